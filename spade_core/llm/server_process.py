"""One supervised server process on loopback or on a Unix socket: started in its own process group with its
log in the cache dir, healthy once ``GET /health`` answers, stopped with SIGTERM then SIGKILL (the whole
group, so no engine worker is left behind). A guard leads the group and takes it down if this process dies
without stopping it.

A server on a Unix socket (``socket_path``, in a directory only this user may enter) can be reached by this
user alone, every endpoint included; :meth:`ServerProcess.request` speaks HTTP over either, with the server's
API key when it has one.

Startup fails with one line — the log's last line — when the process exits or the wait times out.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


class HTTPStatusError(Exception):
    """A server answered with an error status: ``code`` and the start of its body."""

    def __init__(self, code: int, body: str) -> None:
        super().__init__(f"HTTP {code}: {body[:300]}")
        self.code, self.body = code, body


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP over the Unix socket at ``path``."""

    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except OSError:
            sock.close()
            raise
        self.sock = sock


def http_request(
    connection: http.client.HTTPConnection,
    method: str,
    path: str,
    body: Any = None,
    key: str | None = None,
    raw: bool = False,
) -> Any:
    """``method path`` with a JSON ``body`` over ``connection`` (closed after): the decoded JSON answer (its
    text when ``raw``).

    Raises:
        HTTPStatusError: the answer's status is 400 or more.
        OSError: the server could not be reached or broke the connection (a timeout is ``TimeoutError``).
        ValueError: the answer is not JSON.
    """
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else b""
    try:
        connection.request(method, path, body=data if method != "GET" else None, headers=headers)
        response = connection.getresponse()
        text = response.read().decode(errors="replace")
    except http.client.HTTPException as exc:  # a broken answer: as a lost connection
        raise ConnectionError(f"{type(exc).__name__}: {exc}") from None
    finally:
        connection.close()
    if response.status >= 400:
        raise HTTPStatusError(response.status, text)
    return text if raw else json.loads(text or "null")


class ServerProcess:
    """One supervised OpenAI-compatible server process on loopback (``port``) or on a Unix socket
    (``socket_path``); ``api_key``: what its requests send as their bearer token."""

    def __init__(
        self,
        command: list[str],
        port: int | None,
        startup_timeout_s: float = 600.0,
        env: dict[str, str] | None = None,
        socket_path: str | None = None,
        api_key: str | None = None,
    ) -> None:
        if port is None and socket_path is None:
            raise ValueError("a server needs a port or a socket path")
        self.command = command
        self.port = port
        self.socket_path = socket_path
        self.api_key = api_key
        self.startup_timeout_s = startup_timeout_s
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        name = f"server-{port}" if socket_path is None else f"server-{Path(socket_path).parent.name}"
        self.log_path = cache_dir() / "servers" / f"{name}.log"

    @property
    def base_url(self) -> str:
        """Where the server listens: ``http://127.0.0.1:PORT`` or ``unix:PATH``."""
        return f"unix:{self.socket_path}" if self.socket_path else f"http://127.0.0.1:{self.port}"

    def request(self, method: str, path: str, body: Any = None, timeout_s: float = 60.0, raw: bool = False) -> Any:
        """One request to the server (see :func:`http_request` for what it returns and raises)."""
        if self.socket_path is not None:
            connection: http.client.HTTPConnection = UnixHTTPConnection(self.socket_path, timeout_s)
        else:
            connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        return http_request(connection, method, path, body, self.api_key, raw)

    def healthy(self) -> bool:
        try:
            self.request("GET", "/health", timeout_s=2)
        except (HTTPStatusError, OSError, ValueError):
            return False
        return True

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
