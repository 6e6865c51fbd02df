"""The one runner of a run: the stages of a generation, and a run of generations with the next one's design
chain overlapping the current one's steps (docs/DESIGN.md §10).

What runs where is decided by the caller's :class:`Submit`: the Prefect flows submit each stage (and each
shard) as a task, the local runner (:mod:`spade_core.pipeline.local`) executes it in this process. Both go
through :func:`run_stages` and :func:`run_generations`, so the tests run the production schedule.

- **A generation**: each stage instance of :func:`~spade_core.pipeline.registry.stages_for` gets the
  records of its declared inputs (this generation's, then generation ``gen - 1``'s markers); a sharded
  stage submits its shards, then its finish. With ``orchestration.max_staleness`` > 0 every stage starts as
  soon as its inputs are done (:func:`spade_core.pipeline.schedule.run_stages`).
- **A run of generations**: generation g runs; with ``orchestration.async_generations`` generation g+1's
  design chain starts beside it as soon as the stages of g that the chain depends on
  (:func:`chain_trigger`, from the registry's declared ``previous`` inputs) have their markers, and
  generation g+1 itself starts once g has ended and the chain has been joined; it then reuses the chain
  from its markers.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import AbstractContextManager
from typing import Any, Protocol

from spade_core.config import SpadeConfig
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.registry import chain_for, previous_names
from spade_core.pipeline.schedule import run_stages as schedule
from spade_core.pipeline.stage import Stage, previous_records, shard_count, upstream_for
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord, read_marker

log = logging.getLogger(__name__)

TRIGGER_POLL_S = 1.0  # how often a run of generations looks for the markers that start the next chain


class Result(Protocol):
    """What a submission returns: a Prefect future, or a finished local one."""

    def result(self) -> StageRecord: ...


class Submit(Protocol):
    """Where a stage executes. ``one`` runs a stage (``shard`` None) or one shard of a sharded stage;
    ``finish`` writes a sharded stage's whole-stage marker from its shards' records."""

    def one(self, stage: Stage, upstream: dict[str, StageRecord], shard: int | None) -> Result: ...

    def finish(self, stage: Stage, shards: list[StageRecord]) -> Result: ...


class Watcher:
    """What a runner tells as it goes (the flow's progress artifact and display); by default nothing, and an
    exclusive stage (the trainer) runs without waiting for a device turn."""

    def start(self, stage: Stage) -> None:
        """``stage`` is about to run."""

    def shard(self, record: StageRecord, shards: int) -> None:
        """One of ``shards`` shards has finished."""

    def finish(self, record: StageRecord) -> None:
        """The whole stage has finished."""

    def exclusive(self, stage: Stage) -> AbstractContextManager[object]:
        """Held while an ``exclusive`` stage runs (a turn on a device the generator shares)."""
        return contextlib.nullcontext()


def run_stage(submit: Submit, stage: Stage, upstream: dict[str, StageRecord], watch: Watcher) -> StageRecord:
    """One stage instance through ``submit``: itself, or its shards and then its finish.

    A sharded stage's record is its finish's, with this run's view of it: ``ran`` when any shard ran here
    (its finish alone may be reused), with the model calls of the shards that ran.
    """
    watch.start(stage)
    with watch.exclusive(stage) if stage.exclusive else contextlib.nullcontext():
        if stage.shard_by is None:
            record = submit.one(stage, upstream, None).result()
        else:
            count = shard_count(stage, upstream)
            futures = [submit.one(stage, upstream, k) for k in range(count)]
            shards = []
            for future in futures:
                shards.append(future.result())
                watch.shard(shards[-1], count)
            whole = submit.finish(stage, shards).result()
            ran = [r for r in shards if r.status == "ran"]
            status = "ran" if ran or whole.status == "ran" else whole.status
            record = whole.model_copy(update={"status": status, "model_calls": sum(r.model_calls for r in ran)})
    watch.finish(record)
    return record


def run_generation_stages(
    cfg: SpadeConfig,
    store: Store,
    run_id: str,
    gen: int,
    stages: Sequence[Stage],
    submit: Submit,
    watch: Watcher | None = None,
) -> dict[str, StageRecord]:
    """Run (or reuse) ``stages`` of generation ``gen`` in the registry's order (each as soon as its inputs are
    done with ``orchestration.max_staleness`` > 0); returns the whole-stage records by stage name."""
    watch = watch or Watcher()
    previous = previous_records(GenerationContext(cfg, store, run_id, gen), previous_names(cfg, gen))
    records: dict[str, StageRecord] = {}

    def run_one(stage: Stage) -> StageRecord:
        return run_stage(submit, stage, upstream_for(stage, records, previous), watch)

    return schedule(list(stages), run_one, records, concurrent=cfg.orchestration.max_staleness > 0)


def chain_trigger(cfg: SpadeConfig, gen: int) -> list[str]:
    """The stage instances of generation ``gen - 1`` that generation ``gen``'s design chain waits for: the
    ``previous`` inputs its stages declare (with asynchronous generations, the memory: the chain no longer
    waits for the last update, :data:`~spade_core.pipeline.registry.ASYNC_RELEASED`).

    >>> from spade_core.config import load_config
    >>> chain_trigger(load_config("tiny"), 2)
    ['memory']
    """
    return sorted({name for stage in chain_for(cfg, gen) for name in stage.previous})


def run_generations[T](
    cfg: SpadeConfig,
    store: Store,
    run_id: str,
    gens: Sequence[int],
    generation: Callable[[int], T],
    chain: Callable[[int], Any],
    poll_s: float = TRIGGER_POLL_S,
) -> list[T]:
    """Generations ``gens`` in order, each by ``generation(gen)``; returns what each returned.

    With ``orchestration.async_generations``, once the markers of :func:`chain_trigger` are in the store,
    ``chain(g + 1)`` runs on a second thread beside generation g (on the newest checkpoint at that moment);
    generation g+1 starts after g has ended and the chain has been joined. A failure of generation g is
    raised once the chain beside it has ended (the store keeps what finished); a failure of the chain is
    logged and left to generation g+1, which runs whatever stage of the chain has no marker.
    """
    if not cfg.orchestration.async_generations:
        return [generation(gen) for gen in gens]
    results: list[T] = []
    ahead: Future[Any] | None = None
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="generation") as pool:
        for i, gen in enumerate(gens):
            _join(ahead, run_id, gen)
            ahead = None
            current = pool.submit(contextvars.copy_context().run, generation, gen)
            following = gens[i + 1] if i + 1 < len(gens) else None
            if following is not None and _triggered(store, run_id, gen, chain_trigger(cfg, following), current, poll_s):
                log.info("run %s: generation %d's design chain starts beside generation %d", run_id, following, gen)
                ahead = pool.submit(contextvars.copy_context().run, chain, following)
            try:
                results.append(current.result())
            except BaseException:
                _join(ahead, run_id, following or gen)  # never leave a chain writing behind a failed run
                raise
    return results


def _triggered(store: Store, run_id: str, gen: int, names: list[str], current: Future[Any], poll_s: float) -> bool:
    """Wait until generation ``gen`` has the markers ``names`` (True) or ended without them. A store error
    while looking is logged and looked past: the generation itself is not affected by it."""

    def there() -> bool:
        try:
            return all(read_marker(store, run_id, gen, name) is not None for name in names)
        except Exception as exc:
            log.warning("run %s: could not read generation %d's markers %s: %s", run_id, gen, names, exc)
            return False

    while not current.done():
        if there():
            return True
        time.sleep(poll_s)
    return there()


def _join(ahead: Future[Any] | None, run_id: str, gen: int) -> None:
    """Wait for generation ``gen``'s design chain run ahead; its failure is logged, not raised."""
    if ahead is None:
        return
    try:
        ahead.result()
    except Exception as exc:
        log.warning(
            "run %s: generation %d's design chain, run ahead, failed (%s: %s); its own run redoes the rest",
            run_id, gen, type(exc).__name__, exc,
        )  # fmt: skip
