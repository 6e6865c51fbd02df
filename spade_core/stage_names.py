"""Names of stage instances: a per-step stage runs once per step ``k`` of a generation as ``{name}-s{k}``.

Kept apart from the registry so that a stage module can name another stage's files without importing the
registry (which imports every stage module), and outside :mod:`spade_core.pipeline` so that the trainer
subprocess (:mod:`spade_core.train.step`) names the files of its step without importing the pipeline. The
registry checks that its per-step declarations match.
"""

from __future__ import annotations

STEP_STAGES: tuple[str, ...] = ("refill", "rollout", "train")


def instance_name(name: str, step: int | None) -> str:
    """The name of stage ``name`` in step ``step`` (per-step stages only carry the step).

    >>> instance_name("rollout", 2), instance_name("score", 0), instance_name("train", None)
    ('rollout-s2', 'score', 'train')
    """
    return f"{name}-s{step}" if name in STEP_STAGES and step is not None else name
