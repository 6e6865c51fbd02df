"""The Prefect-free runner of one generation: the registry's stages in order, in this process.

It runs exactly what the Prefect flow runs (the same :data:`~spade_core.pipeline.registry.STAGES`, the same
inputs, the same :func:`~spade_core.pipeline.stage.execute`, the same order from
:func:`~spade_core.pipeline.schedule.run_stages`), only without Prefect and retries, so the end-to-end
tests exercise the production order. A given ``lease`` serves every model-calling stage (scripts and tests
hand in one loaded model); the rows still record the checkpoint each stage resolved.
"""

from __future__ import annotations

from spade_core.config import SpadeConfig
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.markers import StageRecord
from spade_core.pipeline.registry import previous_names, stages_for
from spade_core.pipeline.schedule import run_stages
from spade_core.pipeline.stage import (
    GeneratorLease,
    Stage,
    execute,
    finish,
    previous_records,
    shard_count,
    upstream_for,
)
from spade_core.store import Store


def run_generation(
    cfg: SpadeConfig,
    store: Store,
    run_id: str,
    gen: int,
    lease: GeneratorLease | None = None,
    stages: list[Stage] | None = None,
) -> dict[str, StageRecord]:
    """Run (or reuse) every stage of generation ``gen`` (or only ``stages``, e.g. its design chain); returns
    the whole-stage records by stage name."""
    ctx = GenerationContext(cfg, store, run_id, gen)
    chosen = stages_for(cfg, gen) if stages is None else stages
    previous = previous_records(ctx, previous_names(cfg, gen))
    records: dict[str, StageRecord] = {}

    def run_one(stage: Stage) -> StageRecord:
        upstream = upstream_for(stage, records, previous)
        lease_at = (lambda _step: lease) if lease is not None and stage.uses_model else None
        if stage.shard_by is None:
            return execute(stage, ctx, upstream, lease_at)
        count = shard_count(stage, upstream)
        shards = [execute(stage, ctx, upstream, lease_at, k) for k in range(count)]
        return finish(stage, ctx, shards)

    return run_stages(chosen, run_one, records, concurrent=cfg.orchestration.max_staleness > 0)
