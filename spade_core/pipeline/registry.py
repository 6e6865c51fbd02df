"""The one list of a generation's stages, in pipeline order (docs/DESIGN.md §10).

    documents → design → validate (sharded over design shards) → novelty (optional) → pool → hint
    → rollout (sharded over pool blocks) → score → memory → train → evaluate (when due)

The Prefect flow (``flows/generation.py``), ``spade status`` and the local runner
(:mod:`spade_core.pipeline.local`) iterate :data:`STAGES`. Adding a stage is one module under
``spade_core/pipeline/stages/`` plus one line here.
"""

from __future__ import annotations

from spade_core.config import SpadeConfig
from spade_core.pipeline.stage import Stage
from spade_core.pipeline.stages import (
    design,
    documents,
    evaluate,
    hint,
    memory,
    novelty,
    pool,
    rollout,
    score,
    train,
    validate,
)


def designing(cfg: SpadeConfig, gen: int) -> bool:
    """The designer stages run unless the run plays a fixed pool (the fixed-environment baseline)."""
    return not cfg.designer.fixed_pool


STAGES: tuple[Stage, ...] = (
    Stage("documents", documents.run, retried=True, applies=designing),
    Stage("design", design.run, ("documents",), ("memory", "train"), uses_model=True, retried=True, applies=designing),
    Stage("validate", validate.run, ("design",), uses_model=True, retried=True, shard_by="design", applies=designing),
    Stage("novelty", novelty.run, ("validate",), ("memory",), applies=novelty.applies),
    Stage("pool", pool.run, ("validate", "novelty"), ("memory", "train")),
    Stage("hint", hint.run, ("pool",), uses_model=True, retried=True),
    Stage("rollout", rollout.run, ("pool", "hint"), uses_model=True, retried=True, shard_by="pool"),
    Stage("score", score.run, ("design", "validate", "novelty", "pool", "rollout")),
    Stage("memory", memory.run, ("score",)),
    Stage("train", train.run, ("memory", "rollout", "score"), retried=True, exclusive=True),
    Stage("evaluate", evaluate.run, ("train",), retried=True, exclusive=True, applies=evaluate.due),
)
BY_NAME: dict[str, Stage] = {s.name: s for s in STAGES}
PREVIOUS: frozenset[str] = frozenset(name for s in STAGES for name in s.previous)


def stages_for(cfg: SpadeConfig, gen: int) -> list[Stage]:
    """The stages generation ``gen`` of a run with ``cfg`` runs, in order."""
    return [s for s in STAGES if s.applies(cfg, gen)]


def stage(name: str) -> Stage:
    """The stage called ``name``; an unknown name is an error listing the stages."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown stage {name!r}; stages: {', '.join(BY_NAME)}") from None
