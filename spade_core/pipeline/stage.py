"""A stage declaration and the one way a stage executes: reuse its marker, or run it and mark it done.

A :class:`Stage` says what the orchestration needs to know and nothing else: its name, the stages whose
records it takes as inputs (of this generation, and of generation ``gen - 1``), whether it calls the model
(it then gets a *lease* for the generator), whether it is retried, whether it shards, and when it applies
(in which generations, and for a per-step stage in which steps). Everything after the body is keyword-only.
The Prefect flow, ``spade status`` and the local runner all iterate :data:`spade_core.pipeline.registry.STAGES`.

:func:`execute` is the resume rule (docs/DESIGN.md §10): the stage's marker, when it exists with the same
input digests and artifact hash and every file it lists is still in the store with its recorded size and digest, is
returned with ``status="reused"`` and no model is loaded; otherwise the body runs (overwriting its own
deterministic files) and the marker is written LAST. A marker whose files are damaged is run again with one
logged line naming the file and why; the stages after it follow through their input digests.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Collection, Iterable, Iterator
from contextlib import AbstractContextManager, ExitStack
from dataclasses import KW_ONLY, dataclass, replace
from typing import Any, cast

from spade_core.config import SpadeConfig
from spade_core.llm.base import Completion, GenerationRequest, Generator, KVCacheOwner, SamplingParams
from spade_core.pipeline.context import GenerationContext
from spade_core.steps import first_step
from spade_core.store.artifacts import WrittenFile
from spade_core.store.checkpoints import newest_checkpoint_at_or_below
from spade_core.store.integrity import file_problems
from spade_core.store.markers import (
    StageRecord,
    artifact_hash,
    combined_digest,
    digests,
    now,
    now_precise,
    read_marker,
    write_marker,
)

log = logging.getLogger(__name__)

GeneratorLease = Callable[[], AbstractContextManager[Generator]]
LeaseAt = Callable[[int], GeneratorLease]  # the lease of the model of checkpoint ``step``
Body = Callable[[GenerationContext, Generator], dict[str, Any] | None]


def always(cfg: SpadeConfig, gen: int) -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    """One stage of a generation, as the orchestration sees it.

    Attributes:
        name: the stage's name: its marker, its files (``{name}-{shard}.parquet``) and its Prefect task.
        body: ``body(ctx, model) -> info``; a sharded stage's body runs once per shard (``ctx.shard``).
        inputs: earlier stages of the same generation whose records this one depends on (those that do
            not apply to the generation are skipped).
        previous: stages of generation ``gen - 1`` it depends on (their markers are part of its key).
        uses_model: the body calls the model through a lease (loaded on first use only).
        scores_trained: the lease is of the checkpoint the generation ends with, not the one it starts from
            (the evaluator scores what the generation trained).
        retried: retried with backoff on failure (model calls and real I/O); pure stages fail at once.
        shard_by: the input stage whose record's ``info["shards"]`` gives this stage's shard count
            (None: not sharded).
        exclusive: needs the machine to itself (the trainer): held models are released before it runs.
        applies: whether the stage runs in generation ``gen`` of a run with this config.
        per_step: runs once per step ``k`` of the generation (``training.steps_per_generation``), as the
            instance ``{name}-s{k}``.
        runs_at: a per-step stage that runs in some steps only: ``runs_at(cfg)`` gives those steps (``refill``:
            :func:`~spade_core.steps.top_up_steps`); None: every step.
        first_step_only: runs in step 0 only, as a stage of the step block (its instance keeps the plain name):
            ``score`` and ``memory``, whose regret and memory come from the pool's first plays. The registry
            declares every such stage between the first and the last per-step stage, and only those.
        carry: per-step stages of step ``k - 1`` this one depends on (step ``k`` plays with the weights
            step ``k - 1`` trained).
        may_lag: a per-step stage that may use a checkpoint up to ``orchestration.max_staleness`` steps
            older than its step's, so that it overlaps the previous step's update (the rollout).
        step: set on an instance: the step ``k`` within the generation it belongs to (None: no step).
        reads: the tables its body reads (:data:`spade_core.store.schemas.SCHEMAS` names); the context refuses
            any other.
        writes: the tables it writes (``checkpoint``: the trainer's weights); the context refuses any
            other, and every file it writes is listed in its marker.
    """

    name: str
    body: Body
    _: KW_ONLY
    inputs: tuple[str, ...] = ()
    previous: tuple[str, ...] = ()
    uses_model: bool = False
    scores_trained: bool = False
    retried: bool = False
    shard_by: str | None = None
    exclusive: bool = False
    applies: Callable[[SpadeConfig, int], bool] = always
    per_step: bool = False
    runs_at: Callable[[SpadeConfig], Collection[int]] | None = None
    first_step_only: bool = False
    carry: tuple[str, ...] = ()
    may_lag: bool = False
    step: int | None = None
    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()


class LazyGenerator:
    """A :class:`Generator` that takes the real one from its lease on first use and counts calls."""

    def __init__(self, lease: GeneratorLease | None, stack: ExitStack) -> None:
        self._lease, self._stack = lease, stack
        self._inner: Generator | None = None
        self.calls = 0
        self.requests = 0
        self.swaps: list[dict[str, Any]] = []

    @property
    def inner(self) -> Generator:
        if self._inner is None:
            if self._lease is None:
                raise RuntimeError("this stage has no model lease but tried to call the model")
            self._inner = self._stack.enter_context(self._lease())
            take = getattr(self._inner, "take_swaps", None)  # how the lease got its weights into a server
            self.swaps = [swap.as_info() for swap in take()] if callable(take) else []
        return self._inner

    @property
    def model_ref(self) -> str:
        return self.inner.model_ref

    @property
    def supports_token_prompts(self) -> bool:
        return self.inner.supports_token_prompts

    def __getattr__(self, name: str) -> Any:  # tokenizer etc. of the real generator
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.inner, name)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        self.calls += 1
        self.requests += len(requests)
        return self.inner.generate(requests, params)

    def release(self, keys: Iterable[str]) -> None:
        """Free the real generator's kept KV caches (an explicit method: a ``KVCacheOwner`` check looks at the
        class, so forwarding through ``__getattr__`` would go unseen and leak the caches)."""
        if self._inner is not None and isinstance(self._inner, KVCacheOwner):
            self._inner.release(keys)

    def collect_swaps(self) -> list[dict[str, Any]]:
        """This stage's weight swaps: how the lease got the model into a server, then every replacement of an
        engine that died or hung while this stage used it (a ``restart`` with its cause)."""
        take = getattr(self._inner, "take_swaps", None) if self._inner is not None else None
        if callable(take):
            self.swaps = [*self.swaps, *(swap.as_info() for swap in take())]
        return self.swaps

    def close(self) -> None:  # the lease owns the real generator
        pass


@contextlib.contextmanager
def fixed_lease(generator: Generator) -> Iterator[Generator]:
    """A lease that hands out one already-loaded generator (tests, scripts)."""
    yield generator


def execute(
    stage: Stage,
    ctx: GenerationContext,
    upstream: dict[str, StageRecord],
    lease_at: LeaseAt | None = None,
    shard: int | None = None,
) -> StageRecord:
    """Reuse the stage's (or shard's) complete artifact, or run its body and write the marker.

    A stage that runs with ``lease_at`` resolves its checkpoint first (:func:`resolve_policy_step`; a
    reused one reads no checkpoint marker) and gets the lease of that checkpoint: the body writes it on
    every row it makes with the model, and the marker records it.
    """
    return _resumable(ctx, stage, shard, upstream, lease_at)


def finish(stage: Stage, ctx: GenerationContext, shards: list[StageRecord]) -> StageRecord:
    """The whole-stage marker of a sharded stage, once every shard is done (its inputs are the shards).

    It lists every shard's files (with their sizes and digests), so a reader of the stage and its reuse
    check take them from one marker; its digest is made of the shards' digests, which cover those files.
    """
    upstream = {r.name: r for r in shards}
    info: dict[str, Any] = {"shards": len(shards), "rows": _sum_rows(shards), **_sum_counts(shards)}
    if swaps := [swap for part in shards for swap in part.info.get("weight_swaps", [])]:
        info["weight_swaps"] = swaps  # the engine's swaps and replacements while the shards ran
    return _resumable(ctx, replace(stage, body=lambda run, model: info), None, upstream, None, tuple(shards))


def _resumable(
    ctx: GenerationContext,
    stage: Stage,
    shard: int | None,
    upstream: dict[str, StageRecord],
    lease_at: LeaseAt | None,
    parts: tuple[StageRecord, ...] = (),
) -> StageRecord:
    """:func:`execute`'s rule; ``parts``: the shard records whose files a whole-stage marker lists."""
    name = stage.name
    inputs = digests(*upstream.values())
    bound = artifact_hash(ctx.cfg)
    found = read_marker(ctx.store, ctx.run_id, ctx.gen, name, shard)
    if found is not None and found.inputs == inputs and found.artifact_hash == bound:
        problems = file_problems(ctx.store, found)
        if not problems:
            return found.model_copy(update={"status": "reused"})
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        log.warning("run %s %s%s: running the stage again", ctx.run_id, problems[0].line(), more)
    started, started_at = time.perf_counter(), now_precise()
    policy_step, lease = None, None
    if lease_at is not None:
        policy_step = resolve_policy_step(ctx.cfg, ctx.store, ctx.run_id, ctx.gen, stage)
        lease = lease_at(policy_step)
    run = ctx.execution(name, shard, upstream, stage.step, policy_step, stage.reads, stage.writes)
    with ExitStack() as stack:
        model = LazyGenerator(lease, stack)
        info = stage.body(run, cast(Generator, model)) or {}
    latest = {w.path: w for w in run.written}  # a file rewritten in one execution counts once
    files: dict[str, list[str]] = {}
    for w in latest.values():
        files.setdefault(w.table, []).append(w.path)
    sizes = {p: w.size for p, w in latest.items()}
    file_digests = {p: w.digest for p, w in latest.items()}
    for part in parts:
        for table, paths in part.files.items():
            files.setdefault(table, []).extend(paths)
        sizes |= part.sizes
        file_digests |= part.file_digests
    swaps = model.collect_swaps()
    record = StageRecord(
        stage=name,
        shard=shard,
        run_id=ctx.run_id,
        gen=ctx.gen,
        artifact_hash=bound,
        digest=combined_digest(
            {"files": sorted((p, w.digest) for p, w in latest.items()), "info": info, "inputs": inputs}
        ),
        inputs=inputs,
        files=files,
        sizes=sizes,
        file_digests=file_digests,
        rows=_rows(latest.values()),
        seconds=round(time.perf_counter() - started, 3),
        model_calls=model.calls,
        model_requests=model.requests,
        # the weight swaps (how this stage got and kept its model) and the tries it took (a failed one retried)
        # are not what it computed: out of the digest
        info={**info, **({"weight_swaps": swaps} if swaps else {}), **_retries(ctx.attempt)},
        started_at=started_at,
        finished_at=now(),
        policy_step=policy_step,
    )
    write_marker(ctx.store, record)
    return record


def _rows(written: Any) -> dict[str, int]:
    rows: dict[str, int] = {}
    for w in cast("list[WrittenFile]", list(written)):
        rows[w.table] = rows.get(w.table, 0) + w.rows
    return rows


# Counts a shard reports in its info that the whole stage reports summed (a rollout's failed model calls).
SUMMED_INFO = ("model_errors", "model_retries", "retries")


def _retries(attempt: int) -> dict[str, int]:
    """``{"retries": n}`` for the ``attempt``-th try of a stage (the flow retried it after n failures).

    >>> _retries(1), _retries(3)
    ({}, {'retries': 2})
    """
    return {"retries": attempt - 1} if attempt > 1 else {}


def _sum_counts(shards: list[StageRecord]) -> dict[str, int]:
    """The shards' :data:`SUMMED_INFO` counts, summed (only those some shard reports)."""
    keys = [k for k in SUMMED_INFO if any(k in r.info for r in shards)]
    return {k: sum(int(r.info.get(k, 0)) for r in shards) for k in keys}


def _sum_rows(shards: list[StageRecord]) -> dict[str, int]:
    total: dict[str, int] = {}
    for record in shards:
        for table, n in record.rows.items():
            total[table] = total.get(table, 0) + n
    return total


def shard_count(stage: Stage, upstream: dict[str, StageRecord]) -> int:
    """How many shards a sharded stage runs: ``info["shards"]`` of its ``shard_by`` input (at least 1)."""
    if stage.shard_by is None:
        raise ValueError(f"stage {stage.name!r} is not sharded")
    return max(1, int(upstream[stage.shard_by].info.get("shards", 1)))


def upstream_for(
    stage: Stage, records: dict[str, StageRecord], previous: dict[str, StageRecord]
) -> dict[str, StageRecord]:
    """The input records of ``stage``: its ``inputs`` among this generation's finished stages, then its
    ``previous`` among generation ``gen - 1``'s markers (keyed ``prev:{stage}``)."""
    found = {name: records[name] for name in stage.inputs if name in records}
    found.update({f"prev:{name}": previous[name] for name in stage.previous if name in previous})
    return found


def target_step(cfg: SpadeConfig, gen: int, stage: Stage) -> int:
    """The checkpoint a model-calling stage instance of generation ``gen`` is meant to use.

    The generation's first checkpoint ``(gen - 1) · K`` for the stages outside the steps (design, validate,
    hint); ``first + k`` for step ``k``'s plays, or ``first + max(0, k - max_staleness)`` for a stage that
    may lag (docs/DESIGN.md §10: step ``k``'s plays overlap step ``k - 1``'s update).

    >>> from types import SimpleNamespace as N
    >>> cfg = N(training=N(steps_per_generation=4), orchestration=N(max_staleness=1))
    >>> [target_step(cfg, 2, Stage("rollout", always, may_lag=True, step=k)) for k in range(4)]
    [4, 4, 5, 6]
    >>> target_step(cfg, 2, Stage("hint", always)), target_step(cfg, 2, Stage("train", always, step=3))
    (4, 7)

    With ``training.roles: designer`` the agent is frozen: a stage that writes no designs uses checkpoint 0.

    >>> cfg.training.roles = "designer"
    >>> target_step(cfg, 2, Stage("hint", always)), target_step(cfg, 2, Stage("design", always, writes=("designs",)))
    (0, 4)
    """
    if stage.scores_trained:
        return first_step(cfg, gen + 1)
    if getattr(cfg.training, "roles", "both") == "designer" and "designs" not in stage.writes:
        return 0
    first = first_step(cfg, gen)
    if stage.step is None:
        return first
    lag = cfg.orchestration.max_staleness if stage.may_lag else 0
    return first + max(0, stage.step - lag)


def resolve_policy_step(cfg: SpadeConfig, store: Any, run_id: str, gen: int, stage: Stage) -> int:
    """The checkpoint the stage uses now: the newest complete one at or below :func:`target_step`.

    With asynchronous generations the design chain of generation ``gen`` runs while generation ``gen - 1``
    still trains, so its target checkpoint does not exist yet: it takes the newest one at that moment.
    """

    return newest_checkpoint_at_or_below(store, run_id, target_step(cfg, gen, stage))


def previous_records(ctx: GenerationContext, names: set[str]) -> dict[str, StageRecord]:
    """The markers of generation ``gen - 1`` named ``names`` that exist (none before the first generation)."""
    if ctx.gen <= 1:
        return {}
    found = {name: read_marker(ctx.store, ctx.run_id, ctx.gen - 1, name) for name in sorted(names)}
    return {name: record for name, record in found.items() if record is not None}
