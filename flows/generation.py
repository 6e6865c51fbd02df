"""The pipeline of one generation as a Prefect flow (docs/DESIGN.md §7, §10): it only orchestrates.

It iterates the stage registry (:data:`spade_core.pipeline.registry.STAGES`) exactly as the local runner
does: each stage's task gets the records of its declared inputs; a sharded stage is mapped over its shards
and then finished. Each task returns a small :class:`~spade_core.pipeline.markers.StageRecord`; the data
stays in the store. The flow runs under the run's task runner (``orchestration.task_runner``), chosen by
the caller through ``with_options`` — which is why ``spade`` calls this as a subflow.
"""

from __future__ import annotations

import contextlib
from typing import Any

from prefect import flow, unmapped

from flows.report import Reporter, publish_summary
from spade_core.config import SpadeConfig
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.markers import StageRecord
from spade_core.pipeline.registry import chain_for, previous_names, stages_for
from spade_core.pipeline.schedule import run_stages
from spade_core.pipeline.stage import Stage, previous_records, shard_count, upstream_for
from spade_core.progress import generation_summary
from spade_core.store import Store
from tasks.models import device_turn, release_models
from tasks.stages import finish_task_for, task_for


class Pipeline:
    """Runs the registry's stages of one generation in order and reports each one."""

    def __init__(self, cfg: SpadeConfig, run_id: str, gen: int, chain_only: bool = False) -> None:
        self.cfg, self.run_id, self.gen = cfg, run_id, gen
        self.store = Store.from_config(cfg.store)
        self.stages = chain_for(cfg, gen) if chain_only else stages_for(cfg, gen)
        self.report = Reporter(run_id, gen, [s.name for s in self.stages])
        self.records: dict[str, StageRecord] = {}

    def single(self, stage: Stage, upstream: dict[str, StageRecord]) -> StageRecord:
        future = task_for(stage, self.cfg).submit(self.cfg, self.run_id, self.gen, stage.name, None, upstream)
        return future.result()

    def sharded(self, stage: Stage, upstream: dict[str, StageRecord]) -> StageRecord:
        """The stage's task mapped over its shards, then its finish task over their records."""
        shards = shard_count(stage, upstream)
        futures = task_for(stage, self.cfg).map(
            unmapped(self.cfg),
            unmapped(self.run_id),
            unmapped(self.gen),
            unmapped(stage.name),
            range(shards),
            unmapped(upstream),
        )
        records = []
        for future in futures:
            records.append(future.result())
            self.report.shard(records[-1], shards)
        whole = finish_task_for(stage).submit(self.cfg, self.run_id, self.gen, stage.name, records).result()
        # This flow run's view of the stage: its shards' model calls, "ran" when any shard ran here.
        ran = [r for r in records if r.status == "ran"]
        status = "ran" if ran or whole.status == "ran" else whole.status
        return whole.model_copy(update={"status": status, "model_calls": sum(r.model_calls for r in ran)})

    def run_stages(self) -> dict[str, StageRecord]:
        """Every stage, each once its inputs are done (at once with ``orchestration.max_staleness`` 1)."""
        previous = previous_records(
            GenerationContext(self.cfg, self.store, self.run_id, self.gen), previous_names(self.cfg, self.gen)
        )
        # The trainer and the evaluator load their own model: on a GPU the generator shares, they take turns.
        shared = self.cfg.model.device != "cpu" and self.cfg.orchestration.devices_shared()

        def run_one(stage: Stage) -> StageRecord:
            upstream = upstream_for(stage, self.records, previous)
            self.report.start(stage.name)
            with device_turn(shared) if stage.exclusive else contextlib.nullcontext():
                record = self.single(stage, upstream) if stage.shard_by is None else self.sharded(stage, upstream)
            self.report.finish(record)
            return record

        return run_stages(self.stages, run_one, self.records, concurrent=self.cfg.orchestration.max_staleness > 0)

    def run(self) -> dict[str, Any]:
        self.run_stages()
        summary = generation_summary(self.store, self.run_id, self.gen, self.records, self.report.wall)
        pool = self.records.get("pool")
        summary["markdown"] = publish_summary(self.store, summary, list(pool.info.get("env_ids", [])) if pool else [])
        return summary


@flow(name="spade-generation", log_prints=True)
def generation(config: dict[str, Any], run_id: str, gen: int) -> dict[str, Any]:
    """One generation of a run with a resolved config (use the ``spade`` flow: it resolves and binds it)."""
    cfg = SpadeConfig.model_validate(config)
    try:
        return Pipeline(cfg, run_id, gen).run()
    finally:
        release_models(wait=False)  # a design chain of the next generation may still use its model


@flow(name="spade-design-chain", log_prints=True)
def design_chain(config: dict[str, Any], run_id: str, gen: int) -> dict[str, Any]:
    """The design chain of generation ``gen`` (documents … hint), run ahead while generation ``gen - 1``
    trains (``orchestration.async_generations``); generation ``gen``'s own flow run then reuses it."""
    cfg = SpadeConfig.model_validate(config)
    try:
        records = Pipeline(cfg, run_id, gen, chain_only=True).run_stages()
    finally:
        release_models(wait=False)
    return {
        "run_id": run_id,
        "gen": gen,
        "stages": {name: {"status": r.status, "policy_step": r.policy_step} for name, r in records.items()},
    }
