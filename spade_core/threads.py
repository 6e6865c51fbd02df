"""CPU threads for torch: waits that sleep instead of spinning, and only as many threads as CPUs are free
(docs/DESIGN.md §8, "CPU threads").

On a CPU, torch's intra-op pool (OpenMP) meets at a barrier after every parallel region, and by default a
thread that arrives first *spins* there. When another process holds one of the cores, one of torch's
threads is descheduled and the other spins through its time slice waiting for it. Measured on the 2-core
machine with other work on it (load average ~6): four 48-token greedy replies of the tiny model took 107 s
with torch's default two spinning threads, 26 s with passive waits, 18 s with one thread. Hence:

- ``OMP_WAIT_POLICY=PASSIVE`` for every process, set by each entry point before torch loads OpenMP (the
  ``spade`` command, the Prefect flows and tasks, the trainer's launch environment, the benchmarks); a value
  the user set is kept, and subprocesses inherit it;
- the thread count is ``model.threads``, or by default the CPUs that are idle when the model loads
  (:func:`auto_threads`: CPU time not spent by other processes over a short sample).
"""

from __future__ import annotations

import math
import os
import time


def passive_waits() -> None:
    """Make OpenMP threads sleep at barriers (unless the user chose otherwise); must run before torch loads."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def _cpu_ticks() -> tuple[int, int]:
    """(total, idle) jiffies of all CPUs from /proc/stat (idle includes iowait)."""
    with open("/proc/stat") as fh:
        fields = [int(x) for x in fh.readline().split()[1:]]
    return sum(fields[:8]), fields[3] + fields[4]


def _own_ticks() -> int:
    """This process's user + system jiffies (its threads included)."""
    with open("/proc/self/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def free_cpus(sample_s: float = 0.25) -> float:
    """How many of this process's CPUs other processes left free over ``sample_s`` seconds (this process's
    own use counts as free); the allowed CPU count where /proc is unreadable."""
    allowed = len(os.sched_getaffinity(0))
    try:
        total0, idle0 = _cpu_ticks()
        own0 = _own_ticks()
        time.sleep(sample_s)
        total1, idle1 = _cpu_ticks()
        own1 = _own_ticks()
    except (OSError, ValueError, IndexError):
        return float(allowed)
    cpus = os.cpu_count() or allowed
    if total1 <= total0:
        return float(allowed)
    free = cpus * ((idle1 - idle0) + (own1 - own0)) / (total1 - total0)
    return min(float(allowed), free)


def auto_threads(free: float | None = None) -> int:
    """Threads for torch: the free CPUs rounded to the nearest whole one, at least 1.

    >>> auto_threads(1.9), auto_threads(1.2), auto_threads(0.3)
    (2, 1, 1)
    """
    free = free_cpus() if free is None else free
    return max(1, math.floor(free + 0.5))


def use_threads(threads: int | None) -> int:
    """Set torch's intra-op threads to ``threads`` (None: :func:`auto_threads`); returns the number."""
    import torch

    n = threads if threads is not None else auto_threads()
    torch.set_num_threads(n)
    return n
