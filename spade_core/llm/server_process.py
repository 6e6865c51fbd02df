"""One supervised server process on loopback: started in its own process group with its log in the cache
dir, healthy once ``GET /health`` answers, stopped with SIGTERM then SIGKILL (the whole group, so no engine
worker is left behind). A guard leads the group and takes it down if this process dies without stopping it.

Startup fails with one line — the log's last line — when the process exits or the wait times out.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from spade_core.llm.base import ModelError
from spade_core.llm.embedded import cache_dir

# The server's group leader: it runs the server and, should this process die without stopping it (SIGKILL,
# a SIGTERM that skips atexit), takes the whole group down instead of leaving an engine and its gigabytes
# behind. Its exit code is the server's (128 + N when a signal N ended it, as a shell says).
GUARD = """
import os, signal, subprocess, sys, time
parent = int(sys.argv[1])
server = subprocess.Popen(sys.argv[2:])
while server.poll() is None:
    if os.getppid() != parent:
        os.killpg(os.getpgrp(), signal.SIGTERM)
    time.sleep(1)
sys.exit(server.returncode if server.returncode >= 0 else 128 - server.returncode)
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """One supervised OpenAI-compatible server process on loopback."""

    def __init__(
        self, command: list[str], port: int, startup_timeout_s: float = 600.0, env: dict[str, str] | None = None
    ) -> None:
        self.command = command
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = cache_dir() / "servers" / f"server-{port}.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as resp:
                return 200 <= resp.status < 300
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 1) -> str:
        """The log's last line — or its last line that names an error, which a traceback's tail may not."""
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        errors = [line for line in text[-60:] if "Error" in line or "error:" in line]
        return " | ".join(errors[-lines:] or text[-lines:])[-300:]

    def start(self) -> None:
        if shutil.which(self.command[0]) is None:
            raise ModelError(f"server command {self.command[0]!r} not found")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", GUARD, str(os.getpid()), *self.command],
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env={**os.environ, **(self.env or {})},
            )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise ModelError(f"model server exited with code {code} during startup: {self.log_tail()}")
            if self.healthy():
                return
            time.sleep(0.5)
        self.stop()
        raise ModelError(f"model server not healthy after {self.startup_timeout_s:.0f}s: {self.log_tail()}")

    def stop(self, grace_s: float = 20.0) -> None:
        """SIGTERM (and SIGCONT, for a stopped process) to the whole process group, SIGKILL to whatever is left
        of it after ``grace_s``; returns once no process of the group is left (an engine's workers can outlive
        the server they belong to)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig in (signal.SIGTERM, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + grace_s
        while _group_alive(proc) and time.monotonic() < deadline:
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _group_alive(proc) and time.monotonic() < deadline:
            time.sleep(0.1)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def _group_alive(proc: subprocess.Popen[bytes]) -> bool:
    """Whether any process of ``proc``'s group is left (the leader reaped, so it cannot linger as a zombie)."""
    proc.poll()
    try:
        os.killpg(proc.pid, 0)
    except ProcessLookupError:
        return False
    return True
