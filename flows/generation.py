"""The pipeline of one generation as a Prefect flow (DESIGN.md §7, §10): it only orchestrates.

    documents → design → validate (mapped over design shards) → pool → hint → rollout (mapped over
    environment shards) → score → memory → train → evaluate (when due)

Each task returns a small :class:`~spade_core.progress.StageRecord`; the data stays in the store. The flow
runs under the run's task runner (``orchestration.task_runner``), chosen by the caller through
``with_options`` — which is why ``spade`` calls this as a subflow.
"""

from __future__ import annotations

from typing import Any

from prefect import flow, unmapped
from prefect.futures import PrefectFuture

from flows.report import Reporter, publish_summary
from spade_core.config import SpadeConfig
from spade_core.progress import StageRecord, generation_summary, read_marker, stages_for
from spade_core.store import Store
from tasks.models import release_models
from tasks.stages import StageTasks, configured
from tasks.storage import result_storage


def _record(future: PrefectFuture[StageRecord]) -> StageRecord:
    """The future's record, marked ``cached`` when Prefect answered it from the result cache."""
    record = future.result()
    if future.state.name == "Cached":
        return record.model_copy(update={"status": "cached"})
    return record


class Pipeline:
    """Runs the stage tasks of one generation in order and reports each one."""

    def __init__(self, cfg: SpadeConfig, run_id: str, gen: int) -> None:
        self.cfg, self.run_id, self.gen = cfg, run_id, gen
        self.store = Store.from_config(cfg.store)
        self.tasks: StageTasks = configured(cfg, result_storage(self.store))
        self.report = Reporter(run_id, gen, stages_for(cfg, gen))
        self.records: dict[str, StageRecord] = {}

    def stage(self, name: str, task: Any, *args: Any) -> StageRecord:
        self.report.start(name)
        record = _record(task.submit(self.cfg, self.run_id, self.gen, *args))
        return self._finish(name, record)

    def sharded(self, name: str, task: Any, end: Any, shards: int, *args: Any) -> StageRecord:
        """``task`` mapped over ``shards`` shards, then ``end`` over their records."""
        self.report.start(name)
        futures = task.map(
            unmapped(self.cfg), unmapped(self.run_id), unmapped(self.gen), range(shards), *map(unmapped, args)
        )
        records = []
        for future in futures:
            records.append(_record(future))
            self.report.shard(records[-1], shards)
        whole = _record(end.submit(self.cfg, self.run_id, self.gen, records))
        # This flow run's view of the stage: its shards' model calls, "ran" when any shard ran here.
        ran = [r for r in records if r.status == "ran"]
        status = "ran" if ran or whole.status == "ran" else whole.status
        view = whole.model_copy(update={"status": status, "model_calls": sum(r.model_calls for r in ran)})
        return self._finish(name, view)

    def _finish(self, name: str, record: StageRecord) -> StageRecord:
        self.records[name] = record
        self.report.finish(record)
        return record

    def previous(self) -> list[StageRecord]:
        """Generation ``gen - 1``'s memory and train markers: what this generation's prompts and model come from."""
        found = [read_marker(self.store, self.run_id, self.gen - 1, s) for s in ("memory", "train")]
        return [r for r in found if r is not None]

    def run(self) -> dict[str, Any]:
        t, cfg = self.tasks, self.cfg
        previous = self.previous() if self.gen > 1 else []
        if cfg.designer.fixed_pool:
            upstream = previous
        else:
            docs = self.stage("documents", t.documents)
            designs = self.stage("design", t.design, docs, previous)
            shards = int(designs.info.get("shards", 1))
            upstream = [self.sharded("validate", t.validate, t.validate_end, shards, designs)]
        envs = self.stage("pool", t.pool, upstream)
        hints = self.stage("hint", t.hint, envs)
        episodes = self.sharded("rollout", t.rollout, t.rollout_end, int(envs.info["shards"]), envs, hints)
        scores = self.stage("score", t.score, [*upstream, envs, episodes])
        memory = self.stage("memory", t.memory, [scores])
        release_models()  # the trainer is a separate process: give it the memory (and the GPU)
        trained = self.stage("train", t.train, [memory, episodes, scores])
        if "evaluate" in self.report.stages:
            self.stage("evaluate", t.evaluate, [trained])
        summary = generation_summary(self.store, self.run_id, self.gen, self.records, self.report.wall)
        summary["markdown"] = publish_summary(self.store, summary, list(envs.info.get("env_ids", [])))
        return summary


@flow(name="spade-generation", log_prints=True)
def generation(config: dict[str, Any], run_id: str, gen: int) -> dict[str, Any]:
    """One generation of a run with a resolved config (use the ``spade`` flow: it resolves and binds it)."""
    cfg = SpadeConfig.model_validate(config)
    try:
        return Pipeline(cfg, run_id, gen).run()
    finally:
        release_models()
