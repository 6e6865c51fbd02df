"""Top-up: design the environments a generation is missing, before its pool is formed or at its later steps.

When fewer than ``designer.documents_per_generation`` distinct valid environments came out of validate, a
round designs the missing number from fresh prompts on fresh documents (the skills of the failed prompts, in
turn) and validates them exactly as validate does, retries included. This is the authors' pool top-up: a
step that finds fewer games than it wants designs the missing ones (``spade/core/orchestrator.py:2299-2301``).
``designer.top_up_at`` says when the ``designer.top_up_rounds`` rounds run:

- ``pool`` (stage ``topup``): one round after another before the pool's first play, until the count is
  reached. A topped-up design is then a design like any other: hinted, scored, rewarded, trained.
- ``steps`` (stage ``refill``, the authors' timing and the paper presets'): round r at step r of the pool
  (:func:`spade_core.steps.top_up_steps`), with that step's checkpoint, as ``refill-s{r}``. Its valid designs
  join the pool (its ``pool`` rows, source ``design``) for that step and the later ones; they get no hint
  and no hinted play, so their designer reward is 0 (theirs: ``env_rewards.py:197-205``), and they are trained
  D steps after the step that designed them (:mod:`spade_core.pipeline.stages.reward`). The novelty filter
  does not judge them.

Every design, retry, document and verdict of either stage is a row of that stage's own files, read with
validate's by :mod:`spade_core.store.verdicts`.
"""

from __future__ import annotations

import random
from typing import Any

import pandas as pd

from spade_core.config import SpadeConfig
from spade_core.designer.deadline import start_clock
from spade_core.designer.design import design_id_for
from spade_core.designer.memory import Memory
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.stages.design import generate_rows, prompt_for, prompt_plan
from spade_core.pipeline.stages.validate import fresh_documents, validate_with_retries
from spade_core.stage_names import instance_name
from spade_core.steps import top_up_steps

REFILL = "refill"
ROUND_OFFSET = 100_000  # design index of round r's i-th prompt: r * ROUND_OFFSET + i (apart from design's)
POOL_COLUMNS = ["env_id", "design_id", "skill", "kind", "code", "source"]


def applies(cfg: SpadeConfig, gen: int) -> bool:
    """The top-up before the pool: rounds to run, at ``designer.top_up_at: pool``."""
    return not cfg.designer.fixed_pool and cfg.designer.top_up_rounds > 0 and cfg.designer.top_up_at == "pool"


def refills(cfg: SpadeConfig, gen: int) -> bool:
    """The top-up at the pool's later steps: ``designer.top_up_at: steps`` and a step to run a round at."""
    return bool(top_up_steps(cfg))


def missing(valid_env_ids: set[str], target: int) -> int:
    """How many environments a round designs.

    >>> missing({"a", "b"}, 5), missing({"a", "b"}, 2)
    (3, 0)
    """
    return max(0, target - len(valid_env_ids))


def step_pool(ctx: GenerationContext, upto: int | None = None) -> pd.DataFrame:
    """The pool as step ``upto`` (default: the context's step) plays it: the pool stage's rows, then the rows
    the top-ups of steps 1 .. ``upto`` added, in step order."""
    at = (ctx.step or 0) if upto is None else upto
    stages = [instance_name(REFILL, k) for k in top_up_steps(ctx.cfg) if k <= at]
    if not stages:
        return ctx.pool()
    added = ctx.read("pool", stages).drop(columns=["run_id", "gen"])
    return pd.concat([ctx.pool(), added], ignore_index=True) if not added.empty else ctx.pool()


def design_round(
    ctx: GenerationContext, model: Generator, r: int, count: int, skills: list[str], memory: Memory
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Round ``r``: ``count`` designs of ``skills`` in turn on fresh documents, validated with their retries
    (within ``designer.batch_deadline_s``: a round is a batch of its own). Returns (design rows, validation
    rows, documents, the final verdict of each design)."""
    docs = fresh_documents(ctx, count, ROUND_OFFSET + r, 0)
    rng = random.Random(f"{ctx.seed}:topup:{r}")
    prompts = [
        prompt_for(ctx, skills[i % len(skills)], docs.iloc[i % len(docs)] if not docs.empty else None, memory, rng)
        for i in range(count)
    ]
    ids = []
    for i, prompt in enumerate(prompts):
        index = r * ROUND_OFFSET + i
        ids.append(
            (
                design_id_for(ctx.run_id, ctx.gen, prompt.doc_id, prompt.skill, index),
                design_id_for(ctx.run_id, ctx.gen, prompt.doc_id, prompt.skill, -1 - index),
            )
        )
    clock = start_clock(ctx.cfg.designer.batch_deadline_s, model)
    first = generate_rows(ctx, prompts, ids, model, rng, attempt=0, seed=ctx.seed + 7919 * r, clock=clock)
    retries, verdicts, retry_docs = validate_with_retries(ctx, first, ROUND_OFFSET + r, model, clock)
    designs = pd.concat([f for f in (first, retries) if not f.empty], ignore_index=True)
    final = verdicts.sort_values(["design_id", "attempt"]).drop_duplicates("design_id", keep="last")
    return designs, verdicts, _concat([docs, retry_docs]), final


def _skills(ctx: GenerationContext, judged: pd.DataFrame) -> list[str]:
    """The skills a round designs, in turn: those of the failed prompts, else the generation's plan."""
    skills = list(judged.loc[~judged["ok"], "skill"]) if not judged.empty else []
    return skills or prompt_plan(ctx)


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    cfg = ctx.cfg.designer
    judged = ctx.final_designs(novelty=False)
    valid = set(judged.loc[judged["ok"], "env_id"]) if not judged.empty else set()
    before = len(valid)
    skills = _skills(ctx, judged)
    memory = ctx.previous_memory()
    designs, validations, documents = [], [], []
    rounds = designed = 0
    for r in range(1, cfg.top_up_rounds + 1):
        count = missing(valid, cfg.documents_per_generation)
        if count == 0:
            break
        rounds = r
        round_designs, verdicts, docs, final = design_round(ctx, model, r, count, skills, memory)
        designed += count
        designs.append(round_designs)
        validations.append(verdicts)
        documents.append(docs)
        valid |= set(final.loc[final["ok"], "env_id"])
    ctx.write("documents", _concat(documents))
    ctx.write("designs", _concat(designs))
    ctx.write("validations", _concat(validations))
    return {
        "valid_before": before,
        "valid": len(valid),
        "target": cfg.documents_per_generation,
        "rounds": rounds,
        "designed": designed,
    }


def refill(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    """Step k's top-up (``refill-s{k}``, round k): design what the pool the previous step played is missing;
    the valid designs become this step's new ``pool`` rows."""
    cfg = ctx.cfg.designer
    r = ctx.step or 0
    pool = step_pool(ctx, upto=r - 1)
    valid = set(pool.loc[pool["source"] == "design", "env_id"])
    count = missing(valid, cfg.documents_per_generation)
    designs = verdicts = documents = added = pd.DataFrame()
    if count:
        judged = ctx.final_designs(novelty=False)
        designs, verdicts, documents, final = design_round(
            ctx, model, r, count, _skills(ctx, judged), ctx.previous_memory()
        )
        kept = final[final["ok"]][["design_id", "env_id"]]
        rows = (
            designs.sort_values("attempt")
            .drop_duplicates("design_id", keep="last")
            .merge(kept, on=["design_id", "env_id"])
        )
        rows = rows[~rows["env_id"].isin(set(pool["env_id"]))].drop_duplicates("env_id")
        added = rows.assign(source="design")[POOL_COLUMNS].reset_index(drop=True)
    ctx.write("documents", documents)
    ctx.write("designs", designs)
    ctx.write("validations", verdicts)
    ctx.write("pool", added)
    return {
        "valid_before": len(valid),
        "designed": count,
        "added": len(added),
        "env_ids": list(added.get("env_id", [])),
    }


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
