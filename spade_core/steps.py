"""The run's step arithmetic, in one place (docs/DESIGN.md §7): where a generation's steps fall on the
run's global step axis, and when a generation's designs are trained.

A run of generations g = 1, 2, … trains K = ``training.steps_per_generation`` on-policy steps per
generation, so generation g covers the global steps ``(g − 1) · K … g · K − 1`` and its step k is global
step ``(g − 1) · K + k``. A generation's designs are trained D = ``designer.training_delay`` (None: K)
global steps after its first step (the authors' delayed designer reward, ``spade_rollout.py:548-563``):
by then the window of K steps that scores them is complete.
"""

from __future__ import annotations

from typing import Any


def first_step(cfg: Any, gen: int) -> int:
    """The global step at which generation ``gen`` starts: ``(gen - 1) · K``.

    >>> from types import SimpleNamespace as N
    >>> first_step(N(training=N(steps_per_generation=4)), 3)
    8
    """
    return (gen - 1) * int(cfg.training.steps_per_generation)


def global_step(cfg: Any, gen: int, step: int) -> int:
    """The global step of step ``step`` (0..K-1) of generation ``gen``.

    >>> from types import SimpleNamespace as N
    >>> global_step(N(training=N(steps_per_generation=4)), 3, 1)
    9
    """
    return first_step(cfg, gen) + step


def designer_delay(cfg: Any) -> int:
    """D: a generation's designs are trained D global steps after its first step (None in the config = K).

    >>> from types import SimpleNamespace as N
    >>> designer_delay(N(designer=N(training_delay=None), training=N(steps_per_generation=4)))
    4
    """
    return int(cfg.designer.training_delay or cfg.training.steps_per_generation)


def due_designs_generation(cfg: Any, step: int) -> int | None:
    """The generation whose designs global step ``step`` trains (its first step + D), or None.

    >>> from spade_core.config import load_config
    >>> cfg = load_config("tiny")  # K = 2, D = K
    >>> [due_designs_generation(cfg, s) for s in range(5)]
    [None, None, 1, None, 2]
    """
    k, delay = int(cfg.training.steps_per_generation), designer_delay(cfg)
    if step - delay < 0 or (step - delay) % k:
        return None
    return (step - delay) // k + 1
