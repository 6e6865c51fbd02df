"""The Prefect-free runner: stages execute in this process, through the same
:mod:`~spade_core.pipeline.runner` the Prefect flows use (same registry, inputs, order, resume rule and
schedule across generations), only without Prefect and its retries, so the end-to-end tests exercise the
production order.

The model-calling stages get the production leases of the run's own
:class:`~spade_core.pipeline.leases.ModelPool` (the checkpoint each stage resolves, loaded once and released
when the run ends) unless a ``lease`` is given: scripts and tests hand in one
loaded model, which then serves every model-calling stage one at a time (the rows still record the
checkpoint each stage resolved).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass

from spade_core.config import SpadeConfig
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.leases import ModelPool
from spade_core.pipeline.registry import chain_for, stages_for
from spade_core.pipeline.runner import Watcher, run_generation_stages, run_generations
from spade_core.pipeline.stage import GeneratorLease, LeaseAt, Stage, execute, finish
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord


class StageLog(Watcher):
    """One line per finished stage through ``log``, with its wall time (the local runner prints nothing
    itself; scripts such as the benchmarks hand this in as ``watch``)."""

    def __init__(self, log: Callable[[str], None]) -> None:
        self.log = log
        self.started: dict[tuple[str, str], float] = {}

    def start(self, stage: Stage) -> None:
        self.started[(threading.current_thread().name, stage.name)] = time.perf_counter()

    def finish(self, record: StageRecord) -> None:
        began = self.started.pop((threading.current_thread().name, record.stage), time.perf_counter())
        calls = f", {record.model_calls} model calls" if record.status == "ran" and record.model_calls else ""
        self.log(
            f"  gen {record.gen} {record.stage:<12} {record.status:<6} {time.perf_counter() - began:6.1f} s{calls}"
        )


def _done(record: StageRecord) -> Future[StageRecord]:
    future: Future[StageRecord] = Future()
    future.set_result(record)
    return future


@dataclass
class InProcess:
    """A :class:`~spade_core.pipeline.runner.Submit` that executes each stage (or shard) here and now."""

    ctx: GenerationContext
    lease: GeneratorLease | None = None
    models: ModelPool | None = None

    def lease_at(self) -> LeaseAt:
        """The lease of checkpoint ``step``: the given one, else the production lease of ``models``."""
        fixed, ctx, models = self.lease, self.ctx, self.models
        if fixed is not None:
            return lambda _step: fixed
        if models is None:
            raise ValueError("a model-calling stage needs a lease or a model pool")
        return lambda step: models.lease_for(ctx.cfg, ctx.store, ctx.run_id, step)

    def one(self, stage: Stage, upstream: dict[str, StageRecord], shard: int | None) -> Future[StageRecord]:
        return _done(execute(stage, self.ctx, upstream, self.lease_at() if stage.uses_model else None, shard))

    def finish(self, stage: Stage, shards: list[StageRecord]) -> Future[StageRecord]:
        return _done(finish(stage, self.ctx, shards))


def run_generation(
    cfg: SpadeConfig,
    store: Store,
    run_id: str,
    gen: int,
    lease: GeneratorLease | None = None,
    stages: Sequence[Stage] | None = None,
    watch: Watcher | None = None,
    models: ModelPool | None = None,
) -> dict[str, StageRecord]:
    """Run (or reuse) every stage of generation ``gen`` (or only ``stages``, e.g. its design chain); returns
    the whole-stage records by stage name. ``watch`` hears of each stage as it starts and finishes. Without
    a ``lease``, the stages load their checkpoints into ``models`` (None: a pool of this call's own, closed
    when it returns)."""
    own = models is None and lease is None
    pool = ModelPool() if own else models
    try:
        submit = InProcess(GenerationContext(cfg, store, run_id, gen), lease, pool)
        chosen = stages_for(cfg, gen) if stages is None else stages
        return run_generation_stages(cfg, store, run_id, gen, chosen, submit, watch)
    finally:
        if own and pool is not None:
            pool.release()


def run_run(
    cfg: SpadeConfig,
    store: Store,
    run_id: str,
    gens: Sequence[int],
    lease: GeneratorLease | None = None,
    watch: Watcher | None = None,
) -> list[dict[str, StageRecord]]:
    """Generations ``gens`` in order (with ``orchestration.async_generations``, each next design chain beside
    the current generation's steps), as the ``spade-run`` flow runs them. A given ``lease``'s one model
    serves one stage at a time: a chain's stage and a generation's stage take turns on it."""
    shared, models = None, ModelPool() if lease is None else None
    if lease is not None:
        fixed, turn = lease, threading.Lock()

        @contextlib.contextmanager
        def one_at_a_time() -> Iterator[Generator]:
            with turn, fixed() as model:
                yield model

        shared = one_at_a_time
    try:
        return run_generations(
            cfg,
            store,
            run_id,
            gens,
            lambda gen: run_generation(cfg, store, run_id, gen, shared, watch=watch, models=models),
            lambda gen: run_generation(cfg, store, run_id, gen, shared, chain_for(cfg, gen), watch, models),
        )
    finally:
        if models is not None:
            models.release()
