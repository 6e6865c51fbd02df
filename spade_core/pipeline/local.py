"""The Prefect-free runner of one generation: the registry's stages in order, in this process.

It runs exactly what the Prefect flow runs (the same :data:`~spade_core.pipeline.registry.STAGES`, the same
inputs, the same :func:`~spade_core.pipeline.stage.execute`), only sequentially and without retries, so
the end-to-end tests exercise the production order.
"""

from __future__ import annotations

from spade_core.config import SpadeConfig
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.markers import StageRecord
from spade_core.pipeline.registry import previous_names, stages_for
from spade_core.pipeline.stage import (
    GeneratorLease,
    execute,
    finish,
    previous_records,
    shard_count,
    upstream_for,
)
from spade_core.store import Store


def run_generation(
    cfg: SpadeConfig, store: Store, run_id: str, gen: int, lease: GeneratorLease | None = None
) -> dict[str, StageRecord]:
    """Run (or reuse) every stage of generation ``gen``; returns the whole-stage records by stage name."""
    ctx = GenerationContext(cfg, store, run_id, gen)
    previous = previous_records(ctx, previous_names(cfg))
    records: dict[str, StageRecord] = {}
    for stage in stages_for(cfg, gen):
        upstream = upstream_for(stage, records, previous)
        model_lease = lease if stage.uses_model else None
        if stage.shard_by is None:
            records[stage.name] = execute(stage, ctx, upstream, model_lease)
            continue
        shards = [execute(stage, ctx, upstream, model_lease, k) for k in range(shard_count(stage, upstream))]
        records[stage.name] = finish(stage, ctx, shards)
    return records
