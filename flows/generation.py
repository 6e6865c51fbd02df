"""The pipeline of one generation as a Prefect flow (docs/DESIGN.md §7, §10): it only orchestrates.

It runs the stage registry (:data:`spade_core.pipeline.registry.STAGES`) through the same runner as the
local one (:mod:`spade_core.pipeline.runner`), submitting each stage and shard as a Prefect task. Each
task returns a small :class:`~spade_core.store.markers.StageRecord`; the data stays in the store. The
flow runs under the run's task runner (``orchestration.task_runner``), chosen by the caller through
``with_options`` — which is why ``spade`` calls this as a subflow.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from prefect import flow

from flows.report import Reporter, publish_summary
from spade_core.config import SpadeConfig
from spade_core.pipeline.leases import process_pool
from spade_core.pipeline.registry import chain_for, stages_for
from spade_core.pipeline.runner import Result, Watcher, run_generation_stages
from spade_core.pipeline.stage import Stage
from spade_core.report.summary import generation_summary
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord
from spade_core.threads import passive_waits
from tasks.stages import finish_task_for, task_for


class Tasks:
    """The runner's :class:`~spade_core.pipeline.runner.Submit` in a flow run: each stage and shard a task."""

    def __init__(self, cfg: SpadeConfig, run_id: str, gen: int) -> None:
        self.cfg, self.run_id, self.gen = cfg, run_id, gen

    def one(self, stage: Stage, upstream: dict[str, StageRecord], shard: int | None) -> Result:
        return task_for(stage, self.cfg).submit(self.cfg, self.run_id, self.gen, stage.name, shard, upstream)

    def finish(self, stage: Stage, shards: list[StageRecord]) -> Result:
        return finish_task_for(stage).submit(self.cfg, self.run_id, self.gen, stage.name, shards)


class Reported(Watcher):
    """The flow run's progress artifact and the CLI's display; the trainer takes turns with the
    generator on a GPU they share."""

    def __init__(self, report: Reporter, shared_device: bool) -> None:
        self.report, self.shared = report, shared_device

    def start(self, stage: Stage) -> None:
        self.report.start(stage.name)

    def shard(self, record: StageRecord, shards: int) -> None:
        self.report.shard(record, shards)

    def finish(self, record: StageRecord) -> None:
        self.report.finish(record)

    def exclusive(self, stage: Stage) -> AbstractContextManager[object]:
        return process_pool().device_turn(self.shared)


def run_pipeline(
    cfg: SpadeConfig, run_id: str, gen: int, chain_only: bool = False
) -> tuple[dict[str, StageRecord], Reporter]:
    """The generation's stages (or only its design chain) as tasks of this flow run, reported as they go."""
    stages = chain_for(cfg, gen) if chain_only else stages_for(cfg, gen)
    report = Reporter(run_id, gen, [s.name for s in stages])
    # The trainer loads its own model: where the generator shares its memory, the two take turns.
    shared = cfg.orchestration.takes_turns(cfg.model.device)
    store = Store.from_config(cfg.store)
    records = run_generation_stages(cfg, store, run_id, gen, stages, Tasks(cfg, run_id, gen), Reported(report, shared))
    return records, report


@flow(name="spade-generation", log_prints=True)
def generation(config: dict[str, Any], run_id: str, gen: int) -> dict[str, Any]:
    """One generation of a run with a resolved config (use the ``spade`` flow: it resolves and binds it)."""
    passive_waits()
    cfg = SpadeConfig.model_validate(config)
    try:
        records, report = run_pipeline(cfg, run_id, gen)
        store = Store.from_config(cfg.store)
        summary = generation_summary(store, run_id, gen, records, report.wall)
        env_ids = list(records["pool"].info.get("env_ids", [])) if "pool" in records else []
        summary["markdown"] = publish_summary(store, summary, env_ids)
        return summary
    finally:
        # a design chain of the next generation may still use its model; a vLLM engine stays for its checkpoint
        process_pool().release(wait=False, keep_reloadable=True)


@flow(name="spade-design-chain", log_prints=True)
def design_chain(config: dict[str, Any], run_id: str, gen: int) -> dict[str, Any]:
    """The design chain of generation ``gen`` (documents … hint), run ahead while generation ``gen - 1``
    trains (``orchestration.async_generations``); generation ``gen``'s own flow run then reuses it."""
    passive_waits()
    cfg = SpadeConfig.model_validate(config)
    try:
        records, _ = run_pipeline(cfg, run_id, gen, chain_only=True)
    finally:
        process_pool().release(wait=False, keep_reloadable=True)
    return {
        "run_id": run_id,
        "gen": gen,
        "stages": {name: {"status": r.status, "policy_step": r.policy_step} for name, r in records.items()},
    }
