"""A store fault ends a command in one line: a full disk (a real 8 KB tmpfs) and an S3 endpoint that went
away (moto's server, stopped) — each says what failed, where, and what to do; the traceback only with
``--debug`` / ``SPADE_DEBUG=1``; a permanent fault is never retried."""

from __future__ import annotations

import errno
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spade_core.faults import fault_line, permanent
from spade_core.store.artifacts import Store

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def full_disk(tmp_path: Path) -> Iterator[Path]:
    """A real 8 KB tmpfs, already full."""
    mount = tmp_path / "full"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8k", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.decode().strip()}")
    try:
        with open(mount / "filler", "wb") as fh, pytest.raises(OSError):
            fh.write(b"x" * 65536)
            fh.flush()
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=False)


def _spade(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    import os

    environ = {k: v for k, v in os.environ.items() if k != "SPADE_DEBUG"} | (env or {})
    return subprocess.run(
        [sys.executable, "-m", "spade_core.cli", *args],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_full_disk_is_one_line_and_the_traceback_only_when_debugging(full_disk: Path) -> None:
    run = _spade("run", "--run-id", "x", "--store", str(full_disk))
    assert run.returncode == 1
    # the run's first write is its lock (runs/x/run.lock), before its config
    line = f"error: no space left on device writing {full_disk}/runs/x/run.lock; free space or use --store elsewhere"
    assert run.stderr.strip().splitlines()[-1] == line, run.stderr
    assert "Traceback" not in run.stderr
    debug = _spade("--debug", "run", "--run-id", "x", "--store", str(full_disk))
    assert debug.returncode == 1 and "Traceback" in debug.stderr and "OSError: [Errno 28]" in debug.stderr
    assert "Traceback" in _spade("run", "--run-id", "x", "--store", str(full_disk), env={"SPADE_DEBUG": "1"}).stderr


def test_an_s3_endpoint_that_went_away_is_one_line(s3_endpoint: str) -> None:
    import boto3
    from conftest import free_port
    from moto.server import ThreadedMotoServer

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="gone")
    store = Store("s3://gone/store", endpoint_url=endpoint)
    store.write_text(store.path("runs", "r", "config.yaml"), "seed: 0\n")
    server.stop()
    with pytest.raises(Exception) as caught:
        store.read_bytes(store.path("runs", "r", "config.yaml"))
    line = fault_line(caught.value)
    assert line is not None and line.startswith("error: the S3 endpoint is not answering"), repr(caught.value)
    assert "then `spade resume RUN`" in line and not permanent(caught.value)


def test_permanent_faults_are_told_from_transient_ones() -> None:
    assert permanent(OSError(errno.EACCES, "Permission denied", "/s"))
    assert permanent(OSError(errno.EROFS, "Read-only file system", "/s"))
    assert not permanent(OSError(errno.EIO, "Input/output error", "/s"))
    slowdown = OSError(errno.EBUSY, "SlowDown", "s3://b/k")  # what s3fs raises once its retries gave up
    assert not permanent(slowdown) and "throttling requests (SlowDown)" in str(fault_line(slowdown))
    assert fault_line(OSError(errno.EACCES, "denied", "/s/x")) == (
        "error: permission denied on /s/x; fix the permissions or use --store elsewhere"
    )
    assert not permanent(TimeoutError())
    chained = RuntimeError("stage failed")
    chained.__cause__ = OSError(errno.ENOSPC, "No space left on device", "/s/x")
    assert permanent(chained) and fault_line(chained) == (
        "error: no space left on device writing /s/x; free space or use --store elsewhere"
    )
