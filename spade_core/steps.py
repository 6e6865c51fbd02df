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


def generation_of(k: int, step: int) -> int:
    """The generation that global step ``step`` belongs to, K = ``k`` steps per generation: ``step // K + 1``.

    >>> [generation_of(4, s) for s in (0, 3, 4, 399)]
    [1, 1, 2, 100]
    """
    return step // k + 1


def designer_delay(cfg: Any) -> int:
    """D: a generation's designs are trained D global steps after its first step (None in the config = K).

    >>> from types import SimpleNamespace as N
    >>> designer_delay(N(designer=N(training_delay=None), training=N(steps_per_generation=4)))
    4
    """
    return int(cfg.designer.training_delay or cfg.training.steps_per_generation)


def top_up_steps(cfg: Any) -> tuple[int, ...]:
    """The steps k of a generation at which its pool is topped up (``designer.top_up_at: steps``): round r at
    step r, r = 1 .. min(``designer.top_up_rounds``, K - 1); none otherwise.

    >>> from spade_core.config import load_config
    >>> top_up_steps(load_config("paper-games")), top_up_steps(load_config("tiny"))
    ((1, 2, 3), ())
    >>> top_up_steps(load_config("paper-games", overrides=["designer.top_up_rounds=9"]))
    (1, 2, 3)
    """
    designer = cfg.designer
    if designer.fixed_pool or designer.top_up_at != "steps":
        return ()
    last = min(int(designer.top_up_rounds), int(cfg.training.steps_per_generation) - 1)
    return tuple(range(1, last + 1))


def flush_step(cfg: Any) -> int | None:
    """The global step that trains the designs due after the run (``training.total_steps``): the last step of
    the generation that holds step ``total_steps - 1``; None without ``total_steps``.

    >>> from types import SimpleNamespace as N
    >>> flush_step(N(training=N(steps_per_generation=4, total_steps=400))), flush_step(N(training=N(
    ...     steps_per_generation=3, total_steps=400)))
    (399, 401)
    """
    total, k = cfg.training.total_steps, int(cfg.training.steps_per_generation)
    return None if total is None else generation_of(k, int(total) - 1) * k - 1


def design_train_step(cfg: Any, gen: int, made_at: int = 0) -> int:
    """The global step that trains a design of generation ``gen`` made at its step ``made_at`` (0: the pool's
    designs; k: a top-up of step k): ``first + made_at + D``, or :func:`flush_step` when that lies beyond it and
    the generation ends by then (a generation played after the run's last step keeps its own step).

    >>> from spade_core.config import load_config
    >>> cfg = load_config("paper-games")  # K = D = 4, total_steps 400: the flush at 399
    >>> [design_train_step(cfg, 1), design_train_step(cfg, 1, 2), design_train_step(cfg, 99, 3)]
    [4, 6, 399]
    >>> design_train_step(cfg, 100)
    399
    >>> design_train_step(cfg, 101)
    404
    """
    k = int(cfg.training.steps_per_generation)
    natural = first_step(cfg, gen) + made_at + designer_delay(cfg)
    flush = flush_step(cfg)
    if flush is not None and natural > flush and first_step(cfg, gen) + k - 1 <= flush:
        return flush
    return natural


def due_generations(cfg: Any, step: int) -> list[int]:
    """The generations whose designs global step ``step`` may train (their ``designer_rewards`` rows name the
    step, ``train_step``): the one whose designs are due in ``[first + D, first + D + K - 1]`` (a top-up of step
    k is due at ``first + k + D``), and at :func:`flush_step` every later one up to the flush's own.

    >>> from spade_core.config import load_config
    >>> cfg = load_config("paper-games")
    >>> due_generations(cfg, 3), due_generations(cfg, 4), due_generations(cfg, 7), due_generations(cfg, 399)
    ([], [1], [1], [99, 100])
    """
    k, delay = int(cfg.training.steps_per_generation), designer_delay(cfg)
    gens = [generation_of(k, step - delay)] if step >= delay else []
    if step == flush_step(cfg):
        start = gens[-1] + 1 if gens else 1
        gens += list(range(start, generation_of(k, step) + 1))
    return gens
