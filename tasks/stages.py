"""One thin Prefect task per stage (and per shard) around :mod:`spade_core.stages`.

Cache key (:class:`StageKey` + ``TASK_SOURCE``): run id, generation, stage, shard, config hash and the
digests of the upstream artifacts — never the flow run's id — so a re-run flow run, a ``spade resume`` in
another process or a served deployment run hits the same keys. Results (small :class:`StageRecord`\\ s,
the data stays in the store) are persisted under ``{store}/prefect-results`` (:mod:`tasks.storage`).
Behind the cache, every stage checks the store itself and reuses a complete artifact.

Retries with exponential backoff (``orchestration.retries``, :func:`configured`) go to the tasks that
call a model or do real I/O (documents, design, validation, hints, rollouts, train, evaluate); the tasks
that only combine stored results (pool, stage ends, score, memory) fail at once: a failure there is a bug.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prefect import Task, task
from prefect.cache_policies import TASK_SOURCE, CachePolicy
from prefect.context import TaskRunContext
from prefect.tasks import exponential_backoff
from prefect.utilities.hashing import hash_objects

from spade_core import stages
from spade_core.config import SpadeConfig
from spade_core.generation import GenerationContext
from spade_core.progress import StageRecord, digests
from spade_core.store import Store
from tasks.models import lease_for


@dataclass
class StageKey(CachePolicy):
    """Cache key of a stage task from its inputs ``cfg``, ``run_id``, ``gen``, ``shard`` and its upstream
    :class:`StageRecord` inputs (their digests only)."""

    def compute_key(
        self, task_ctx: TaskRunContext, inputs: dict[str, Any], flow_parameters: dict[str, Any], **kwargs: Any
    ) -> str | None:
        cfg = inputs["cfg"]
        records: list[StageRecord] = []
        for value in inputs.values():
            if isinstance(value, StageRecord):
                records.append(value)
            elif isinstance(value, list):
                records += [v for v in value if isinstance(v, StageRecord)]
        key = {
            "run_id": inputs["run_id"],
            "gen": inputs["gen"],
            "stage": task_ctx.task.name,
            "shard": inputs.get("shard"),
            "config_hash": cfg.config_hash(),
            "upstream": digests(*records),
        }
        return hash_objects(key, raise_on_failure=True)


CACHE = StageKey() + TASK_SOURCE
_COMMON: dict[str, Any] = {"cache_policy": CACHE, "persist_result": True}


def _ctx(cfg: SpadeConfig, run_id: str, gen: int) -> GenerationContext:
    return GenerationContext(cfg, Store.from_config(cfg.store), run_id, gen)


def _lease(cfg: SpadeConfig, run_id: str, gen: int):  # type: ignore[no-untyped-def]
    return lease_for(cfg, Store.from_config(cfg.store), run_id, gen)


@task(name="documents", **_COMMON)
def documents(cfg: SpadeConfig, run_id: str, gen: int) -> StageRecord:
    """Sample the generation's documents from the corpus."""
    return stages.documents(_ctx(cfg, run_id, gen))


@task(name="design", **_COMMON)
def design(cfg: SpadeConfig, run_id: str, gen: int, docs: StageRecord, previous: list[StageRecord]) -> StageRecord:
    """Write the designs of every document prompt (one batched model call)."""
    return stages.design(_ctx(cfg, run_id, gen), docs, previous, _lease(cfg, run_id, gen))


@task(name="validate", **_COMMON)
def validate(cfg: SpadeConfig, run_id: str, gen: int, shard: int, designs: StageRecord) -> StageRecord:
    """Validate (and repair) one shard of designs in the jail."""
    return stages.validate_shard(_ctx(cfg, run_id, gen), shard, designs, _lease(cfg, run_id, gen))


@task(name="validate-end", **_COMMON)
def validate_end(cfg: SpadeConfig, run_id: str, gen: int, shards: list[StageRecord]) -> StageRecord:
    """The novelty filter over all shards (when configured) and the stage's marker."""
    return stages.validate_finish(_ctx(cfg, run_id, gen), shards)


@task(name="pool", **_COMMON)
def pool(cfg: SpadeConfig, run_id: str, gen: int, upstream: list[StageRecord]) -> StageRecord:
    """Plan the generation's environments (valid designs + replay, or the fixed pool)."""
    return stages.pool(_ctx(cfg, run_id, gen), upstream)


@task(name="hint", **_COMMON)
def hint(cfg: SpadeConfig, run_id: str, gen: int, envs: StageRecord) -> StageRecord:
    """Write one hint per environment (one batched model call)."""
    return stages.hints(_ctx(cfg, run_id, gen), envs, _lease(cfg, run_id, gen))


@task(name="rollout", **_COMMON)
def rollout(cfg: SpadeConfig, run_id: str, gen: int, shard: int, envs: StageRecord, hints: StageRecord) -> StageRecord:
    """Play one shard of environments, with and without hints."""
    return stages.rollout_shard(_ctx(cfg, run_id, gen), shard, envs, hints, _lease(cfg, run_id, gen))


@task(name="rollout-end", **_COMMON)
def rollout_end(cfg: SpadeConfig, run_id: str, gen: int, shards: list[StageRecord]) -> StageRecord:
    """The rollout stage's marker, once every shard is done."""
    return stages.finish(_ctx(cfg, run_id, gen), "rollout", shards)


@task(name="score", **_COMMON)
def score(cfg: SpadeConfig, run_id: str, gen: int, upstream: list[StageRecord]) -> StageRecord:
    """Win rate, regret and designer reward of every environment and design."""
    return stages.score(_ctx(cfg, run_id, gen), upstream)


@task(name="memory", **_COMMON)
def memory(cfg: SpadeConfig, run_id: str, gen: int, upstream: list[StageRecord]) -> StageRecord:
    """The generation's memory snapshot."""
    return stages.memory(_ctx(cfg, run_id, gen), upstream)


@task(name="train", **_COMMON)
def train(cfg: SpadeConfig, run_id: str, gen: int, upstream: list[StageRecord]) -> StageRecord:
    """The GRPO update under ``accelerate launch`` (a complete checkpoint is reused)."""
    from prefect.logging import get_run_logger

    logger = get_run_logger()
    return stages.train(_ctx(cfg, run_id, gen), upstream, echo=logger.debug)


@task(name="evaluate", **_COMMON)
def evaluate(cfg: SpadeConfig, run_id: str, gen: int, upstream: list[StageRecord]) -> StageRecord:
    """Score checkpoint ``gen`` on the held-out suites (a recorded no-op when the generation wrote no checkpoint)."""
    record = stages.evaluate(_ctx(cfg, run_id, gen), upstream)
    if reason := record.info.get("skipped_reason"):
        from prefect.logging import get_run_logger

        get_run_logger().warning("evaluate: %s; the stage is recorded as a no-op", reason)
    return record


ALL = (documents, design, validate, validate_end, pool, hint, rollout, rollout_end, score, memory, train, evaluate)
RETRIED = frozenset({"documents", "design", "validate", "hint", "rollout", "train", "evaluate"})


@dataclass(frozen=True)
class StageTasks:
    """Every stage task, configured for one run (result storage, retries)."""

    documents: Task[..., StageRecord]
    design: Task[..., StageRecord]
    validate: Task[..., StageRecord]
    validate_end: Task[..., StageRecord]
    pool: Task[..., StageRecord]
    hint: Task[..., StageRecord]
    rollout: Task[..., StageRecord]
    rollout_end: Task[..., StageRecord]
    score: Task[..., StageRecord]
    memory: Task[..., StageRecord]
    train: Task[..., StageRecord]
    evaluate: Task[..., StageRecord]


def configured(cfg: SpadeConfig, result_storage: Any) -> StageTasks:
    """The stage tasks with the run's result storage, and retries with backoff on the I/O and model ones."""
    delay = float(getattr(cfg.orchestration, "retry_delay_s", 5.0))
    options: dict[str, Task[..., StageRecord]] = {}
    for t in ALL:
        retried = t.name in RETRIED and cfg.orchestration.retries > 0
        options[t.fn.__name__] = t.with_options(
            result_storage=result_storage,
            retries=cfg.orchestration.retries if retried else 0,
            retry_delay_seconds=exponential_backoff(backoff_factor=delay) if retried else 0,
        )
    return StageTasks(**options)
