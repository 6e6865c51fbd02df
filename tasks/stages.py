"""One Prefect task per stage of the registry (and per shard), each a thin wrapper around
:func:`spade_core.pipeline.stage.execute`.

Resume has one authority, the store markers (docs/DESIGN.md §10): a task whose stage marker matches its
inputs returns it as ``reused`` without loading a model. Prefect's result cache is therefore not used for
stages (``NO_CACHE``): it could only disagree with the markers. Prefect gives the stages retries with
exponential backoff (``orchestration.retries``, only for stages declared ``retried``: model calls and real
I/O; a failure in a pure stage is a bug and fails at once), task runners and the UI.
"""

from __future__ import annotations

from typing import Any

from prefect import State, Task, task
from prefect.cache_policies import NO_CACHE
from prefect.tasks import exponential_backoff

from spade_core.config import SpadeConfig
from spade_core.faults import permanent
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.leases import process_pool
from spade_core.pipeline.registry import stage as stage_named
from spade_core.pipeline.stage import Stage, execute, finish
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord
from spade_core.threads import passive_waits


def _context(cfg: SpadeConfig, run_id: str, gen: int) -> GenerationContext:
    from prefect.context import TaskRunContext
    from prefect.logging import get_run_logger

    logger = get_run_logger()
    task_run = TaskRunContext.get()
    attempt = max(1, int(task_run.task_run.run_count)) if task_run is not None else 1  # Prefect's tries so far
    return GenerationContext(cfg, Store.from_config(cfg.store), run_id, gen, echo=logger.debug, attempt=attempt)


@task(name="stage", cache_policy=NO_CACHE, persist_result=False)
def run_stage(
    cfg: SpadeConfig, run_id: str, gen: int, name: str, shard: int | None, upstream: dict[str, StageRecord]
) -> StageRecord:
    """Execute (or reuse) one stage or one shard of a sharded stage."""
    passive_waits()  # a worker process of the processes / dask runners starts here
    stage = stage_named(name, cfg, gen)
    ctx = _context(cfg, run_id, gen)
    models = process_pool()  # a task's process keeps its models for the next task (pipeline/leases.py)
    lease_at = (lambda step: models.lease_for(cfg, ctx.store, run_id, step)) if stage.uses_model else None
    record = execute(stage, ctx, upstream, lease_at, shard)
    if reason := record.info.get("skipped_reason"):
        from prefect.logging import get_run_logger

        get_run_logger().warning("%s: %s; the stage is recorded as a no-op", name, reason)
    return record


@task(name="finish", cache_policy=NO_CACHE, persist_result=False)
def finish_stage(cfg: SpadeConfig, run_id: str, gen: int, name: str, shards: list[StageRecord]) -> StageRecord:
    """The whole-stage marker of a sharded stage, once all its shards are done."""
    return finish(stage_named(name, cfg, gen), _context(cfg, run_id, gen), shards)


def retry_worth_it(task: Any, task_run: Any, state: State[Any]) -> bool:
    """Retry a failed stage unless its error is a permanent store fault (no space, permission, no such
    bucket: :func:`spade_core.faults.permanent`), which fails at once."""
    try:
        state.result()
    except Exception as exc:
        return not permanent(exc)
    return True


def task_for(stage: Stage, cfg: SpadeConfig) -> Task[..., StageRecord]:
    """The task of ``stage``: named after it, retried with backoff when the stage is declared ``retried``
    (not after a permanent store fault)."""
    retried = stage.retried and cfg.orchestration.retries > 0
    options: dict[str, Any] = {"name": stage.name}
    if retried:
        options |= {
            "retries": cfg.orchestration.retries,
            "retry_delay_seconds": exponential_backoff(backoff_factor=cfg.orchestration.retry_delay_s),
            "retry_condition_fn": retry_worth_it,
        }
    return run_stage.with_options(**options)


def finish_task_for(stage: Stage) -> Task[..., StageRecord]:
    return finish_stage.with_options(name=f"{stage.name}-end")
