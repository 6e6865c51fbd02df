"""RLVE's difficulty controller, the ``sliding_window`` variant the authors' fixed-RLVE baseline runs.

The authors' ``SlidingWindowController`` (``spade/core/difficulty_controller.py:92-188``, selected by
``--spade-difficulty-variant sliding_window`` in ``cmd/games/train_fixed_rlve_{4b,8b,30b}.sh``) keeps, per
environment, a window ``[low, high]`` of difficulty levels, starting at ``[0, 0]``:

- each step, every environment's plays use one difficulty drawn uniformly from ``[low, high]``
  (``fixed_env_orchestrator.py:516-518``);
- after the step, each successful play (reward > 0 counts as a success, ``fixed_env_orchestrator.py:588-596``)
  *at difficulty ``high``* adds an attempt; once there are ``tau_num`` attempts, if at least ``tau_acc`` of
  them succeeded and ``high < max_difficulty``, then ``high += 1`` and ``low = max(low, high - d_delta + 1)``;
  the counters reset after every check, promoted or not (``difficulty_controller.py:138-159``).

Plays at another difficulty, and plays an environment broke (error rows), do not count.

RLVE's own controller (``variant="rlve"``; RLVE's repository, ``slime/ray/rollout_data_source.py:35-56,
101-133``), for runs that want RLVE's original rather than the SPADE authors' copy: every play of a rollout
(here a generation's batch) at ``high`` is counted first, and each environment is checked once, after the
batch, when it has at least ``tau_num`` of them (its counters then reset, promoted or not); there is no cap on
``high``. :func:`windows` takes one such batch.

The state is never kept in memory between steps: :func:`windows` folds every earlier outcome of the run,
read from the store, so a resumed run or a rerun stage gets the same windows (docs/DESIGN.md §4: the store
is the only state). The authors' values are the module's defaults (``train_fixed_rlve_4b.sh:101-103``:
``--spade-difficulty-tau-acc 0.9 --spade-difficulty-tau-num 128 --spade-difficulty-d-delta 4``; the
maximum difficulty 20 is ``rlve_adapter.py:200``).
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, replace

from spade_core.envs.rlve import MAX_DIFFICULTY

TAU_ACC = 0.9
TAU_NUM = 128
D_DELTA = 4


@dataclass(frozen=True)
class Window:
    """One environment's controller state: the window ``[low, high]`` and the counts at ``high``."""

    low: int = 0
    high: int = 0
    successes: int = 0
    attempts: int = 0


def update(
    window: Window,
    difficulty: int,
    success: bool,
    *,
    tau_acc: float = TAU_ACC,
    tau_num: int = TAU_NUM,
    d_delta: int = D_DELTA,
    max_difficulty: int = MAX_DIFFICULTY,
) -> Window:
    """The window after one play at ``difficulty``.

    >>> w = Window()
    >>> for ok in (True, True, True):
    ...     w = update(w, 0, ok, tau_num=3)
    >>> w
    Window(low=0, high=1, successes=0, attempts=0)
    >>> update(w, 0, True, tau_num=3)  # a play below high does not count
    Window(low=0, high=1, successes=0, attempts=0)
    >>> update(update(Window(3, 6), 6, True, tau_num=2), 6, False, tau_num=2)  # 1/2 < 0.9: reset, no promotion
    Window(low=3, high=6, successes=0, attempts=0)
    >>> update(update(Window(3, 6), 6, True, tau_num=2), 6, True, tau_num=2)  # the window keeps d_delta levels
    Window(low=4, high=7, successes=0, attempts=0)
    >>> update(Window(0, 20), 20, True, tau_num=1)  # max_difficulty caps high
    Window(low=0, high=20, successes=0, attempts=0)
    """
    if difficulty != window.high:
        return window
    attempts, successes = window.attempts + 1, window.successes + int(success)
    if attempts < tau_num:
        return replace(window, successes=successes, attempts=attempts)
    if successes / attempts >= tau_acc and window.high < max_difficulty:
        high = window.high + 1
        return Window(max(window.low, high - d_delta + 1), high)
    return replace(window, successes=0, attempts=0)


def windows(
    names: Iterable[str],
    outcomes: Iterable[tuple[str, int, bool]],
    *,
    start: dict[str, Window] | None = None,
    tau_acc: float = TAU_ACC,
    tau_num: int = TAU_NUM,
    d_delta: int = D_DELTA,
    max_difficulty: int = MAX_DIFFICULTY,
    variant: str = "spade",
) -> dict[str, Window]:
    """Every environment's window after ``outcomes`` = (name, difficulty, success), in the order played,
    from ``start`` (default: every window at ``[0, 0]``). ``variant``: ``spade`` (the SPADE authors' check
    after each play, :func:`update`) or ``rlve`` (``outcomes`` is one rollout: counted, then checked once, no
    cap).

    >>> windows(["A", "B"], [("A", 0, True), ("A", 0, True), ("B", 0, False), ("B", 0, True)], tau_num=2)
    {'A': Window(low=0, high=1, successes=0, attempts=0), 'B': Window(low=0, high=0, successes=0, attempts=0)}
    >>> climb = [("A", 0, True)] * 2 + [("A", 1, True)] * 2
    >>> windows(["A"], climb, tau_num=2)["A"].high, windows(["A"], climb, tau_num=2, variant="rlve")["A"].high
    (2, 1)
    """
    state = {name: (start or {}).get(name, Window()) for name in names}
    if variant == "rlve":
        return _rollout_check(state, outcomes, tau_acc=tau_acc, tau_num=tau_num, d_delta=d_delta)
    for name, difficulty, success in outcomes:
        if name in state:
            state[name] = update(
                state[name],
                difficulty,
                success,
                tau_acc=tau_acc,
                tau_num=tau_num,
                d_delta=d_delta,
                max_difficulty=max_difficulty,
            )
    return state


def _rollout_check(
    state: dict[str, Window], outcomes: Iterable[tuple[str, int, bool]], *, tau_acc: float, tau_num: int, d_delta: int
) -> dict[str, Window]:
    """RLVE's own update after one rollout (``rollout_data_source.py:101-133``): count the plays at each
    environment's ``high``, then check every environment with ``tau_num`` or more once; no maximum."""
    for name, difficulty, success in outcomes:
        window = state.get(name)
        if window is not None and difficulty == window.high:
            state[name] = replace(window, successes=window.successes + int(success), attempts=window.attempts + 1)
    for name, window in state.items():
        if window.attempts < tau_num:
            continue
        if window.successes / window.attempts >= tau_acc:
            high = window.high + 1
            state[name] = Window(max(window.low, high - d_delta + 1), high)
        else:
            state[name] = replace(window, successes=0, attempts=0)
    return state


def sample_difficulty(window: Window, key: str) -> int:
    """The difficulty of one environment's plays this step: uniform on ``[low, high]``, drawn from ``key``
    (the run's seed, run, generation and environment), so a rerun draws the same.

    >>> sample_difficulty(Window(0, 0), "k"), sample_difficulty(Window(2, 5), "k") in range(2, 6)
    (0, True)
    """
    return random.Random(key).randint(window.low, window.high)
