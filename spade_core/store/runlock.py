"""One run at a time on a run id: a lock file in the run's directory of the store, local or S3
(docs/operations.md, "One run per run id").

A run (the ``spade`` and ``spade-run`` flows, so ``spade run``, ``spade resume`` and a deployment's flow run)
holds ``runs/{run_id}/run.lock`` for as long as it runs: who holds it (host, process, since when) and a
heartbeat it rewrites every :data:`HEARTBEAT_S`. A second run of the same run id is refused in one line
naming the holder. A lock is stale — and taken over — when its holder is a process of this machine that is
gone, or its heartbeat is older than :data:`STALE_AFTER_S` (a holder elsewhere that was killed). Writing the
lock and reading it back decides a race between two takers: the one whose token is read back holds it. A
process that holds the lock may take it again (``spade run`` takes it before it starts Prefect, the flow it
runs in the same process takes it too): the inner hold neither writes nor removes it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from spade_core.processes import holder_gone
from spade_core.store.artifacts import Store

LOCK = "run.lock"
HEARTBEAT_S = 20.0
STALE_AFTER_S = 120.0  # six heartbeats missed
SETTLE_S = 0.3  # between writing the lock and reading it back (two takers at once: the later write wins)


class RunLocked(RuntimeError):
    """The run id is in use by another run; one line naming the holder."""


def lock_path(store: Store, run_id: str) -> str:
    return f"{store.run_dir(run_id)}/{LOCK}"


def read_holder(store: Store, run_id: str) -> dict[str, Any] | None:
    """The lock's content, or None when there is none (or it is unreadable: a half-written lock is no holder)."""
    try:
        data = json.loads(store.read_bytes(lock_path(store, run_id)))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def stale(holder: dict[str, Any], now: float | None = None) -> bool:
    """Whether a lock's holder is gone: a process of this machine that no longer runs, or a heartbeat older
    than :data:`STALE_AFTER_S`.

    >>> stale({"host": socket.gethostname(), "pid": os.getpid(), "heartbeat": 0.0}, now=1.0)
    False
    >>> stale({"host": "elsewhere", "pid": 1, "heartbeat": 0.0}, now=STALE_AFTER_S + 1)
    True
    """
    now = time.time() if now is None else now
    if holder.get("host") == socket.gethostname() and isinstance(holder.get("pid"), int):
        return holder_gone(f"{holder['host']}:{holder['pid']}")
    return now - float(holder.get("heartbeat", 0.0)) > STALE_AFTER_S


def describe(holder: dict[str, Any]) -> str:
    """``host:pid since 2026-12-07T14:03:11Z``."""
    return f"{holder.get('host')}:{holder.get('pid')} since {holder.get('started')}"


class RunLock:
    """The lock of one run id, held by this process for the length of a ``with`` block."""

    def __init__(self, store: Store, run_id: str) -> None:
        self.store, self.run_id = store, run_id
        self.path = lock_path(store, run_id)
        self.token = secrets.token_hex(8)
        self.me = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "token": self.token,
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        self._stop = threading.Event()
        self._beat: threading.Thread | None = None
        self.nested = False  # this process held the lock already: the outer hold writes and removes it
        self._made: list[str] = []  # the directories of a local store the lock itself made (removed with it)

    def _write(self) -> None:
        self.store.write_text(self.path, json.dumps({**self.me, "heartbeat": time.time()}))

    def _refuse(self, holder: dict[str, Any]) -> RunLocked:
        return RunLocked(
            f"run {self.run_id!r} is in use by another run ({describe(holder)}, store {self.store.base}); wait for "
            f"it to end or stop it — a killed run's lock is taken over once stale ({STALE_AFTER_S:.0f} s)"
        )

    def acquire(self) -> None:
        """Hold the lock, taking over a stale one.

        Raises:
            RunLocked: another run holds it (one line naming it).
        """
        holder = read_holder(self.store, self.run_id)
        if holder is not None and (holder.get("host"), holder.get("pid")) == (self.me["host"], self.me["pid"]):
            self.nested = True
            return
        if holder is not None and not stale(holder):
            raise self._refuse(holder)
        if not self.store.is_s3:  # a run refused before it writes (a bad config) leaves no directory behind
            run_dir = Path(self.store.run_dir(self.run_id))
            self._made = [str(d) for d in (run_dir, run_dir.parent, run_dir.parent.parent) if not d.exists()]
        self._write()
        time.sleep(SETTLE_S)
        holder = read_holder(self.store, self.run_id)
        if holder is None or holder.get("token") != self.token:  # another taker wrote after this one
            raise self._refuse(holder or {"host": "?", "pid": "?", "started": "just now"})
        self._beat = threading.Thread(target=self._heartbeat, name=f"run-lock-{self.run_id}", daemon=True)
        self._beat.start()

    def _heartbeat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            holder = read_holder(self.store, self.run_id)
            if holder is not None and holder.get("token") != self.token:
                return  # taken over (this run was thought dead): the other run holds it now
            try:
                self._write()
            except OSError:
                continue  # a store that hiccups: the next beat tries again

    def release(self) -> None:
        """Give the lock up (only if this run still holds it, and not from an inner hold)."""
        if self.nested:
            return
        self._stop.set()
        if self._beat is not None:
            self._beat.join(timeout=5)
        holder = read_holder(self.store, self.run_id)
        if holder is not None and holder.get("token") == self.token:
            self.store.remove_file(self.path)
            for directory in self._made:  # innermost first; only those still empty (the run wrote nothing)
                with contextlib.suppress(OSError):
                    os.rmdir(directory)

    def __enter__(self) -> RunLock:
        self.acquire()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.release()
