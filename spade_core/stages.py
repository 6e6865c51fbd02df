"""Resumable stages: each call reuses the store's complete artifact, or runs the stage and marks it done.

One function per stage (and per shard where a stage shards), each taking the generation's context, the
upstream records it depends on and, where it may call the model, a *lease* for the generator. A call:

1. reads the stage's marker (:mod:`spade_core.progress`); if it exists with the same upstream digests and
   the same artifact hash, returns it with ``status="reused"`` — no model is loaded, nothing is written;
2. else runs the stage function of :mod:`spade_core.generation` (which overwrites its own files, so a
   half-written earlier attempt leaves no duplicates), then writes the marker LAST.

The generator is taken from the lease on the first model call only, so a reused stage never loads a
model, and its calls are counted per execution (``model_calls`` in the record). The Prefect tasks in
``tasks/`` are thin wrappers around these functions; tests and scripts can call them directly.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, ExitStack
from typing import Any, cast

import pandas as pd

from spade_core import generation as g
from spade_core.llm.base import Completion, GenerationRequest, Generator, SamplingParams
from spade_core.memory import Memory
from spade_core.progress import (
    StageRecord,
    artifact_hash,
    combined_digest,
    digests,
    now,
    read_marker,
    write_marker,
)

GeneratorLease = Callable[[], AbstractContextManager[Generator]]
Body = Callable[[g.GenerationContext, Generator], dict[str, Any] | None]


class LazyGenerator:
    """A :class:`Generator` that takes the real one from its lease on first use and counts calls."""

    def __init__(self, lease: GeneratorLease | None, stack: ExitStack) -> None:
        self._lease, self._stack = lease, stack
        self._inner: Generator | None = None
        self.calls = 0
        self.requests = 0

    @property
    def inner(self) -> Generator:
        if self._inner is None:
            if self._lease is None:
                raise RuntimeError("this stage has no model lease but tried to call the model")
            self._inner = self._stack.enter_context(self._lease())
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

    def close(self) -> None:  # the lease owns the real generator
        pass


@contextlib.contextmanager
def fixed_lease(generator: Generator) -> Iterator[Generator]:
    """A lease that hands out one already-loaded generator (tests, scripts)."""
    yield generator


def _context(ctx: g.GenerationContext) -> g.GenerationContext:
    """A fresh context per execution: its ``written`` list is exactly this execution's files."""
    return g.GenerationContext(ctx.cfg, ctx.store, ctx.run_id, ctx.gen)


def resumable(
    ctx: g.GenerationContext,
    stage: str,
    shard: int | None,
    upstream: list[StageRecord],
    body: Body,
    lease: GeneratorLease | None = None,
    reuse: bool = True,
) -> StageRecord:
    """Reuse the stage's complete artifact, or run ``body`` and write the marker (see the module doc)."""
    inputs = digests(*upstream)
    bound = artifact_hash(ctx.cfg)
    found = read_marker(ctx.store, ctx.run_id, ctx.gen, stage, shard) if reuse else None
    if found is not None and found.inputs == inputs and found.artifact_hash == bound:
        return found.model_copy(update={"status": "reused"})
    started = time.perf_counter()
    run = _context(ctx)
    with ExitStack() as stack:
        model = LazyGenerator(lease, stack)
        info = body(run, cast(Generator, model)) or {}
    files: dict[str, list[str]] = {}
    for w in run.written:
        if w.path not in files.setdefault(w.table, []):
            files[w.table].append(w.path)
    latest = {w.path: w.digest for w in run.written}  # a file rewritten in one execution counts once
    record = StageRecord(
        stage=stage,
        shard=shard,
        run_id=ctx.run_id,
        gen=ctx.gen,
        artifact_hash=bound,
        digest=combined_digest({"files": sorted(latest.items()), "info": info, "inputs": inputs}),
        inputs=inputs,
        files=files,
        rows=_final_rows(run.written),
        seconds=round(time.perf_counter() - started, 3),
        model_calls=model.calls,
        model_requests=model.requests,
        info=info,
        finished_at=now(),
    )
    write_marker(ctx.store, record)
    return record


def _final_rows(written: list[g.WrittenFile]) -> dict[str, int]:
    last = {w.path: w for w in written}
    rows: dict[str, int] = {}
    for w in last.values():
        rows[w.table] = rows.get(w.table, 0) + w.rows
    return rows


def finish(ctx: g.GenerationContext, stage: str, shards: list[StageRecord]) -> StageRecord:
    """The whole-stage marker of a sharded stage, once every shard is done (digest over the shards')."""
    return resumable(ctx, stage, None, shards, lambda run, model: {"shards": len(shards), "rows": _sum_rows(shards)})


def _sum_rows(shards: list[StageRecord]) -> dict[str, int]:
    total: dict[str, int] = {}
    for record in shards:
        for table, n in record.rows.items():
            total[table] = total.get(table, 0) + n
    return total


# -- the stages ---------------------------------------------------------------------------------------
def documents(ctx: g.GenerationContext) -> StageRecord:
    """Step 2: sample this generation's documents."""
    return resumable(ctx, "documents", None, [], lambda run, model: _rows_info(g.stage_documents(run)))


def design(
    ctx: g.GenerationContext, docs: StageRecord, previous: list[StageRecord], lease: GeneratorLease
) -> StageRecord:
    """Step 3: the designs of every document prompt, in one batched call, written in shards.

    ``previous`` are the markers of generation ``gen - 1`` that decide the prompt and the model (its memory
    snapshot and its checkpoint), so a redone earlier generation invalidates this one.
    """

    def body(run: g.GenerationContext, model: Generator) -> dict[str, Any]:
        memory = Memory.load(run.store, run.run_id, run.gen - 1, run.cfg.memory)
        designs = g.stage_design(run, run.read("documents"), model, memory)
        return {"designs": len(designs), "shards": g.shard_count(len(designs), run.shard_size)}

    return resumable(ctx, "design", None, [docs, *previous], body, lease)


def validate_shard(ctx: g.GenerationContext, shard: int, designs: StageRecord, lease: GeneratorLease) -> StageRecord:
    """Step 4 for ``design-{shard}``: validate in the jail (and repair) → ``validate-{shard}``."""

    def body(run: g.GenerationContext, model: Generator) -> dict[str, Any]:
        _, validations = g.validate_shard(run, run.read_shard("designs", "design", shard), shard, model)
        return {"valid": int(validations["ok"].sum()) if not validations.empty else 0, "shards": _shards(designs)}

    return resumable(ctx, "validate", shard, [designs], body, lease)


def validate_finish(ctx: g.GenerationContext, shards: list[StageRecord]) -> StageRecord:
    """Step 4's end: the novelty filter over all shards (when configured), then the stage marker."""

    def body(run: g.GenerationContext, model: Generator) -> dict[str, Any]:
        memory = Memory.load(run.store, run.run_id, run.gen - 1, run.cfg.memory)
        designs = _read_shards(run, "designs", "design", len(shards))
        validations = _read_shards(run, "validations", "validate", len(shards))
        validations = g.apply_novelty(run, designs, validations, memory)
        valid = int(validations["ok"].sum()) if not validations.empty else 0
        return {"shards": len(shards), "designs": len(validations), "valid": valid, "rows": _sum_rows(shards)}

    return resumable(ctx, "validate", None, shards, body)


def pool(ctx: g.GenerationContext, upstream: list[StageRecord]) -> StageRecord:
    """The environments of the generation (new valid designs + replay, or the fixed pool) and their
    diversity; no table: the marker lists them, and every later stage recomputes the same pool."""

    def body(run: g.GenerationContext, model: Generator) -> dict[str, Any]:
        envs = g.load_pool(run)
        diversity = None
        if run.cfg.memory.report_diversity and not envs.empty:
            from spade_core.novelty import default_embedder, pool_diversity

            diversity = pool_diversity(list(envs["code"]), default_embedder())
        return {
            "env_ids": list(envs["env_id"]),
            "replayed": int(envs["design_id"].isna().sum()),
            "shards": g.shard_count(len(envs), run.shard_size),
            "diversity": diversity,
        }

    return resumable(ctx, "pool", None, upstream, body)


def hints(ctx: g.GenerationContext, envs: StageRecord, lease: GeneratorLease) -> StageRecord:
    """Step 5: one hint per environment of the pool."""
    return resumable(
        ctx, "hint", None, [envs], lambda run, model: _rows_info(g.stage_hints(run, g.load_pool(run), model)), lease
    )


def rollout_shard(
    ctx: g.GenerationContext, shard: int, envs: StageRecord, hint: StageRecord, lease: GeneratorLease
) -> StageRecord:
    """Step 6 for the ``shard``-th block of ``orchestration.shard_size`` environments → ``rollout-{shard}``."""

    def body(run: g.GenerationContext, model: Generator) -> dict[str, Any]:
        block = g.shard_rows(g.load_pool(run), shard, run.shard_size)
        played = g.stage_rollouts(run, block, run.read("hints"), model, shard)
        return {"envs": len(block), "episodes": len(played), "shards": _shards(envs)}

    return resumable(ctx, "rollout", shard, [envs, hint], body, lease)


def score(ctx: g.GenerationContext, upstream: list[StageRecord]) -> StageRecord:
    """Step 7: win rate, regret and designer reward of every environment and design."""

    def body(run: g.GenerationContext, model: Generator) -> dict[str, Any]:
        envs = g.load_pool(run)
        if run.cfg.designer.fixed_pool:
            designs = pd.DataFrame(columns=["design_id", "skill"])
            validations = pd.DataFrame(columns=["design_id", "env_id", "ok"])
        else:
            designs, validations = run.read("designs"), run.read("validations")
        scores = g.stage_score(run, designs, validations, envs, run.read("episodes"))
        return _rows_info(scores)

    return resumable(ctx, "score", None, upstream, body)


def memory(ctx: g.GenerationContext, upstream: list[StageRecord]) -> StageRecord:
    """Step 8: the memory snapshot of this generation (from the snapshot of ``gen - 1``)."""

    def body(run: g.GenerationContext, model: Generator) -> dict[str, Any]:
        mem = Memory.load(run.store, run.run_id, run.gen - 1, run.cfg.memory)
        return _rows_info(g.stage_memory(run, mem, g.load_pool(run), run.read("env_scores")))

    return resumable(ctx, "memory", None, upstream, body)


def train(
    ctx: g.GenerationContext, upstream: list[StageRecord], echo: Callable[[str], None] | None = None
) -> StageRecord:
    """Step 9: the GRPO update (``spade_core.train_launch``) → checkpoint ``gen``; a complete checkpoint is
    reused, and with ``training.enabled`` false the stage records why nothing was trained."""

    def body(run: g.GenerationContext, model: Generator) -> dict[str, Any]:
        from spade_core.checkpoints import checkpoint_complete
        from spade_core.checkpoints import read_marker as read_checkpoint
        from spade_core.train_launch import TrainSummary, launch_training

        if checkpoint_complete(run.store, run.run_id, run.gen):
            summary = TrainSummary.from_dict(read_checkpoint(run.store, run.run_id, run.gen).get("summary", {}))
        else:
            summary = launch_training(run.cfg, run.store, run.run_id, run.gen, echo=echo)
        return {"summary": summary.to_dict(), "line": summary.line()}

    return resumable(ctx, "train", None, upstream, body)


def evaluate(ctx: g.GenerationContext, upstream: list[StageRecord]) -> StageRecord:
    """Step 10 (every ``evaluation.every`` generations): score checkpoint ``gen`` on the held-out suites."""

    def body(run: g.GenerationContext, model: Generator) -> dict[str, Any]:
        from spade_core.checkpoints import checkpoint_complete
        from spade_core.eval import evaluate_checkpoint

        if not checkpoint_complete(run.store, run.run_id, run.gen):
            return {"skipped_reason": f"generation {run.gen} wrote no checkpoint (training.enabled is false)"}
        frame = evaluate_checkpoint(run.cfg, run.store, run.run_id, run.gen)
        means = frame.groupby("suite")["score"].mean().round(4).to_dict() if not frame.empty else {}
        return {"items": len(frame), "score_mean": means}

    return resumable(ctx, "evaluate", None, upstream, body)


def _read_shards(run: g.GenerationContext, table: str, stage: str, shards: int) -> pd.DataFrame:
    """The shard files of one stage in shard order (a directory listing sorts 10 before 2)."""
    return pd.concat([run.read_shard(table, stage, k) for k in range(shards)], ignore_index=True)


def _rows_info(frame: pd.DataFrame) -> dict[str, Any]:
    return {"rows": len(frame)}


def _shards(record: StageRecord) -> int:
    return int(record.info.get("shards", 1))
