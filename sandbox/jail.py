"""One long-lived jailed process serving one environment instance over the framed protocol.

A call returns a :class:`CallResult`; nothing an environment does is raised into the caller. A call that
outlives its timeout kills the jail (``timeout``); a reply over the size cap kills it too
(``output_limit``); a jail that dies mid-call is classified from how it died, by
:func:`sandbox.outcome.classify_exit` (its exit status and nsjail's own log, read from a private pipe).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import select
import signal
import struct
import subprocess
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from sandbox.outcome import ErrorType, classify_exit, is_error_type
from sandbox.policy import JailLimits, jail_command, resolve_cgroups

START_TIMEOUT_S = 15.0


@dataclass
class CallResult:
    """Outcome of one call into the jail: ``ok`` with ``data``, or an ``error_type`` and ``message``."""

    ok: bool
    data: dict[str, Any] = field(default_factory=dict)
    error_type: ErrorType | None = None
    message: str | None = None
    stdout: str = ""
    seconds: float = 0.0

    @classmethod
    def failure(cls, error_type: ErrorType, message: str, seconds: float = 0.0) -> CallResult:
        return cls(ok=False, error_type=error_type, message=message, seconds=seconds)


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux /proc); empty when it is gone."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        return []


class NsjailLog:
    """nsjail's own log on a private pipe, drained in a thread; its tail is kept (64 chunks of 4 KiB).

    Create it, put :attr:`write_fd` in the argv (:func:`sandbox.policy.nsjail_argv`), then
    :func:`spawn_jail`; :meth:`text` is what :func:`sandbox.outcome.classify_exit` reads.
    """

    def __init__(self) -> None:
        self._read_fd, self.write_fd = os.pipe()
        self._chunks: collections.deque[bytes] = collections.deque(maxlen=64)
        self._thread = threading.Thread(target=self._drain, daemon=True)

    def start(self) -> None:
        """Close our write end (nsjail has its own now) and start draining."""
        os.close(self.write_fd)
        self._thread.start()

    def _drain(self) -> None:
        with contextlib.suppress(OSError):  # closed while reading: the jail is gone
            for chunk in iter(lambda: os.read(self._read_fd, 4096), b""):
                self._chunks.append(chunk)

    def text(self, wait_s: float = 2.0) -> str:
        """The log, once nsjail has closed it (it exits right after its last line) or ``wait_s`` passed."""
        if self._thread.is_alive():
            self._thread.join(wait_s)
        return b"".join(self._chunks).decode("utf-8", "replace")

    def problems(self) -> list[str]:
        """nsjail's warning and error lines (its info lines describe a normal start and exit)."""
        return [ln for ln in self.text(wait_s=0.5).splitlines() if ln.strip() and not ln.startswith(("[I]", "[D]"))]

    def close(self) -> None:
        """Stop reading; call after nsjail has exited."""
        self._thread.join(timeout=2)
        if not self._thread.is_alive():
            with contextlib.suppress(OSError):
                os.close(self._read_fd)


def spawn_jail(argv: list[str], log: NsjailLog) -> subprocess.Popen[bytes]:
    """Start nsjail with piped stdio in its own session (so a signal to our group never reaches it).

    nsjail alone gets ``log``'s write end (``argv`` names it with ``--log_fd``); ours is closed once nsjail
    holds it, so the log ends when nsjail exits.
    """
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            close_fds=True,
            pass_fds=(log.write_fd,),
        )
    finally:
        log.start()


def kill_jail(proc: subprocess.Popen[bytes]) -> None:
    """Stop a running nsjail and everything in its jail.

    nsjail puts the jailed process in its own session, so a signal to nsjail's group misses it. Kill the
    jail's init (nsjail's child): the kernel kills its whole PID namespace, and nsjail reaps it and exits.
    nsjail itself is killed only if it does not exit by then.
    """
    if proc.poll() is not None:
        return
    for pid in _children(proc.pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    try:
        proc.wait(timeout=3)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=5)


class JailedProcess:
    """``host.py`` running in nsjail; call :meth:`start` then :meth:`call`, finally :meth:`close`."""

    def __init__(self, limits: JailLimits | None = None, call_timeout_s: float = 5.0) -> None:
        self.limits = limits or JailLimits()
        self.call_timeout_s = call_timeout_s
        self.proc: subprocess.Popen[bytes] | None = None
        self.dead: CallResult | None = None
        self.started_at = 0.0
        self.log: NsjailLog | None = None
        self._buffer = b""
        self._stderr: collections.deque[bytes] = collections.deque(maxlen=64)
        self._drain: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------------
    def start(self) -> CallResult:
        """Start the jail and wait for the host's ready frame."""
        t0 = time.perf_counter()
        use_cgroups = resolve_cgroups()
        self.log = NsjailLog()
        self.proc = spawn_jail(jail_command(self.limits, use_cgroups, self.log.write_fd), self.log)
        self.started_at = time.monotonic()
        self._drain = threading.Thread(target=self._drain_stderr, daemon=True)
        self._drain.start()
        reply = self._read_frame(time.monotonic() + max(START_TIMEOUT_S, self.call_timeout_s))
        if isinstance(reply, CallResult):
            reason = (
                reply
                if reply.error_type == "output_limit"
                else CallResult.failure(
                    "jail_error", f"jail did not start: {reply.message}; nsjail said: {self.nsjail_said()}"
                )
            )
            return self._die(reason)
        return CallResult(ok=True, seconds=time.perf_counter() - t0)

    def _drain_stderr(self) -> None:
        assert self.proc is not None and self.proc.stderr is not None
        fd = self.proc.stderr.fileno()
        try:
            for chunk in iter(lambda: os.read(fd, 4096), b""):
                self._stderr.append(chunk)
        except OSError:  # closed while reading: the jail is gone
            return

    def nsjail_said(self, limit: int = 400) -> str:
        """nsjail's warnings and errors, then the jail's stderr: the tail of both, for a failed start."""
        text = b"".join(self._stderr).decode(errors="replace")
        lines = [ln for ln in text.splitlines() if "no version information available" not in ln]
        problems = self.log.problems() if self.log is not None else []
        return "\n".join([*problems, *lines])[-limit:].strip()

    def close(self) -> None:
        """Ask the host to close the environment, then make sure nothing of the jail survives."""
        proc = self.proc
        if proc is None:
            return
        if self.dead is None and proc.poll() is None:
            try:
                self._send({"op": "close"}, time.monotonic() + 1.0)
                self._read_frame(time.monotonic() + 1.0)
            except OSError:  # TimeoutError included: the jail is killed below either way
                pass
        self._kill()
        self.dead = self.dead or CallResult.failure("jail_error", "jail closed")

    def _kill(self) -> None:
        proc = self.proc
        if proc is None:
            return
        kill_jail(proc)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):  # unflushed bytes to a dead jail: BrokenPipeError
                    stream.close()
        if self._drain is not None:
            self._drain.join(timeout=2)
        if proc.stderr is not None:
            proc.stderr.close()
        if self.log is not None:
            self.log.close()

    def __enter__(self) -> JailedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- protocol -------------------------------------------------------------------------------------
    def call(self, op: str, timeout_s: float | None = None, **payload: Any) -> CallResult:
        """Send one request and wait for its reply; every failure comes back as a CallResult."""
        if self.dead is not None:
            return CallResult.failure(self.dead.error_type or "jail_error", f"jail is down: {self.dead.message}")
        if self.proc is None:
            return CallResult.failure("jail_error", "jail not started")
        t0 = time.perf_counter()
        deadline = time.monotonic() + (timeout_s or self.call_timeout_s)
        try:
            self._send({"op": op, **payload}, deadline)
        except TimeoutError:
            return self._die(
                CallResult.failure("timeout", f"{op}: the jail did not read the request within the call timeout"), t0
            )
        except OSError:
            return self._die(self._death_reason(op), t0)
        reply = self._read_frame(deadline, op)
        if isinstance(reply, CallResult):
            return self._die(reply, t0)
        seconds = time.perf_counter() - t0
        stdout = str(reply.pop("stdout", ""))
        if not reply.pop("ok", False):
            claimed = reply.get("error_type", "jail_error")
            message = str(reply.get("message", ""))
            if not is_error_type(claimed):  # the jail is untrusted: only the taxonomy's names pass
                claimed, message = "jail_error", f"{op}: unknown error_type {str(claimed)[:40]!r}: {message}"
            failed = CallResult(
                ok=False,
                error_type=claimed,
                message=message,
                data=reply,
                stdout=stdout,
                seconds=seconds,
            )
            return self._die(failed) if failed.error_type == "timeout" else failed  # a spent jail is done
        return CallResult(ok=True, data=reply, stdout=stdout, seconds=seconds)

    def _send(self, message: dict[str, Any], deadline: float) -> None:
        """Write one frame, never blocking past ``deadline`` (a jail that stops reading cannot stall us).

        Raises:
            TimeoutError: the jail did not take the whole frame in time.
            OSError: the jail is gone (broken pipe).
        """
        assert self.proc is not None and self.proc.stdin is not None
        body = json.dumps(message).encode()
        view = memoryview(struct.pack(">I", len(body)) + body)
        fd = self.proc.stdin.fileno()
        while view:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            _, writable, _ = select.select([], [fd], [], remaining)
            if writable:  # a writable pipe takes PIPE_BUF bytes without blocking
                view = view[os.write(fd, view[: select.PIPE_BUF]) :]

    def _read_frame(self, deadline: float, op: str = "start") -> dict[str, Any] | CallResult:
        assert self.proc is not None and self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        cap = self.limits.max_message_bytes + 4096
        while True:
            if len(self._buffer) >= 4:
                size = struct.unpack(">I", self._buffer[:4])[0]
                if size > cap:
                    return CallResult.failure("output_limit", f"{op}: reply frame of {size} bytes exceeds {cap}")
                if len(self._buffer) >= 4 + size:
                    body, self._buffer = self._buffer[4 : 4 + size], self._buffer[4 + size :]
                    try:
                        # the jail is untrusted: undecodable bytes become U+FFFD, never a crash downstream
                        message = json.loads(body.decode("utf-8", "replace"))
                    except ValueError:
                        return CallResult.failure("jail_error", f"{op}: undecodable reply frame")
                    if not isinstance(message, dict):
                        return CallResult.failure("jail_error", f"{op}: reply is not an object")
                    return message
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return CallResult.failure("timeout", f"{op} did not return within the call timeout")
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                continue
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return self._death_reason(op)
            self._buffer += chunk

    def _death_reason(self, op: str) -> CallResult:
        """Classify a jail that went away during ``op`` (:func:`sandbox.outcome.classify_exit`)."""
        assert self.proc is not None
        try:
            code: int | None = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        lived = time.monotonic() - self.started_at
        log = self.log.text() if self.log is not None else ""
        error_type, reason = classify_exit(code, log, lived, self.limits)
        if error_type == "exception":
            if op == "start":
                return CallResult.failure("jail_error", f"jail {reason} before it was ready")
            return CallResult.failure("exception", f"{op}: environment process {reason} after {lived:.1f}s")
        return CallResult.failure(error_type, f"{op}: jail {reason} after {lived:.1f}s")

    def _die(self, reason: CallResult, t0: float | None = None) -> CallResult:
        if t0 is not None:
            reason.seconds = time.perf_counter() - t0
        self.dead = reason
        self._kill()
        return reason
