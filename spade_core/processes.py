"""Processes of this machine, read from ``/proc``: whether one is alive, who holds something (``host:pid``),
and the processes a process started (its descendants). The engine service's leases, the run lock and a
stopped run's clean-up all ask these questions."""

from __future__ import annotations

import contextlib
import os
import socket
from pathlib import Path


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie has ended: only its parent's wait is left)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


def holder_id() -> str:
    """Who this process is, for a lease or a lock: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def holder_gone(holder: str) -> bool:
    """Whether ``host:pid`` names a process of this machine that has ended (one elsewhere cannot be asked).

    >>> holder_gone(holder_id()), holder_gone("elsewhere:1")
    (False, False)
    """
    host, _, pid = holder.rpartition(":")
    return host == socket.gethostname() and pid.isdigit() and not alive(int(pid))


def parents() -> dict[int, int]:
    """Every process of this machine and its parent."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                found[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
    return found


def descendants(root: int) -> list[int]:
    """Every process whose chain of parents leads to ``root``, children first."""
    parent_of = parents()
    found: list[int] = []
    frontier = {root}
    while frontier:
        children = [pid for pid, parent in parent_of.items() if parent in frontier and pid not in found]
        found += children
        frontier = set(children)
    return found


def command_line(pid: int) -> str:
    """The command line of ``pid``, its arguments joined by spaces ("" once it has ended)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""
