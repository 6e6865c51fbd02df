"""A run stopped by SIGINT or SIGTERM stops within seconds and leaves nothing running (docs/operations.md,
"Stopping a run").

``spade run`` and ``spade resume`` run the flow in their own process, whose threads cannot be interrupted
and whose Prefect engine would finish the generation in flight first (its SIGTERM handler raises in the main
thread, which then waits for the generation's thread). So the command installs its own handlers
(:func:`stopped_by_signals`), and the flow, once Prefect has put its handler in place, puts the command's
back for the length of the run (:func:`rearmed`; a deployment's flow run has none and keeps Prefect's
cancellation). The first SIGINT or SIGTERM then:

1. says in one line that the run stops and how to resume it (the store is resumable at any point: every
   stage's marker is written after its files);
2. ends every process this one started — the engine replicas, the trainer, the jails, Prefect's temporary
   server — with SIGTERM, then SIGKILL what is left after :data:`GRACE_S`;
3. releases the run's lock, and exits with 128 + the signal's number, as a shell reports a signal.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from spade_core.processes import alive, descendants

GRACE_S = 3.0
SIGNALS = (signal.SIGINT, signal.SIGTERM)
_HANDLERS: dict[str, Callable[[int, FrameType | None], Any]] = {}  # run id -> the command's stop handler


def end_processes(pids: list[int], grace_s: float = GRACE_S) -> None:
    """SIGTERM (and SIGCONT, for a stopped one) to ``pids``, SIGKILL to whatever is left after ``grace_s``."""
    for pid in pids:
        for sig in (signal.SIGTERM, signal.SIGCONT):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(pid) for pid in pids):
        time.sleep(0.1)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


@contextlib.contextmanager
def stopped_by_signals(run_id: str, on_stop: Callable[[], None] = lambda: None) -> Iterator[None]:
    """For the length of the block, SIGINT and SIGTERM stop the run as the module doc says; ``on_stop`` runs
    before the processes are ended (the run's lock is given back there)."""

    def stop(signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        line = f"\n{name}: stopping run {run_id}; what finished is kept — continue with: spade resume {run_id}\n"
        os.write(sys.__stderr__.fileno() if sys.__stderr__ else 2, line.encode())  # past a live display's capture
        with contextlib.suppress(Exception):
            on_stop()
        end_processes(descendants(os.getpid()))
        os._exit(128 + signum)  # the flow's threads cannot be joined: the stages in flight are redone on resume

    previous = {sig: signal.signal(sig, stop) for sig in SIGNALS}
    _HANDLERS[run_id] = stop
    try:
        yield
    finally:
        _HANDLERS.pop(run_id, None)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


@contextlib.contextmanager
def rearmed(run_id: str) -> Iterator[None]:
    """Inside a flow run: the command's stop handlers for run ``run_id`` again, in place of Prefect's, for the
    length of the block (nothing when no command of this process installed one, or off the main thread)."""
    stop = _HANDLERS.get(run_id)
    if stop is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, stop) for sig in SIGNALS}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
