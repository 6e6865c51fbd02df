"""Top-up: design the environments a generation is missing before its pool is formed.

When fewer than ``designer.documents_per_generation`` distinct valid environments came out of validate,
each round designs the missing number from fresh prompts on fresh documents (the skills of the failed
prompts, in turn) and validates them exactly as validate does, retries included, for up to
``designer.top_up_rounds`` rounds or until the count is reached. This is the authors' pool top-up: a step
that finds fewer games than it wants designs the missing ones (``spade/core/orchestrator.py:2299-2301``);
they do it at each later step of a pool, this project once before the pool's first play, with K - 1 rounds
in the paper presets.

Every design, retry, document and verdict of this stage is a row of its own files (``topup``), read with
validate's by :mod:`spade_core.store.verdicts`, so the pool, the scores, the designer's reward and its
training see a topped-up design like any other.
"""

from __future__ import annotations

import random
from typing import Any

import pandas as pd

from spade_core.config import SpadeConfig
from spade_core.designer.design import design_id_for
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.stages.design import generate_rows, prompt_for, prompt_plan
from spade_core.pipeline.stages.validate import fresh_documents, validate_with_retries

NAME = "topup"
ROUND_OFFSET = 100_000  # design index of round r's i-th prompt: r * ROUND_OFFSET + i (apart from design's)


def applies(cfg: SpadeConfig, gen: int) -> bool:
    return not cfg.designer.fixed_pool and cfg.designer.top_up_rounds > 0


def missing(valid_env_ids: set[str], target: int) -> int:
    """How many environments a round designs.

    >>> missing({"a", "b"}, 5), missing({"a", "b"}, 2)
    (3, 0)
    """
    return max(0, target - len(valid_env_ids))


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    cfg = ctx.cfg.designer
    judged = ctx.final_designs(novelty=False)
    valid = set(judged.loc[judged["ok"], "env_id"]) if not judged.empty else set()
    before = len(valid)
    skills = list(judged.loc[~judged["ok"], "skill"]) if not judged.empty else []
    skills = skills or prompt_plan(ctx)
    memory = ctx.previous_memory()
    designs, validations, documents = [], [], []
    rounds = designed = 0
    for r in range(1, cfg.top_up_rounds + 1):
        count = missing(valid, cfg.documents_per_generation)
        if count == 0:
            break
        rounds = r
        docs = fresh_documents(ctx, count, ROUND_OFFSET + r, 0)
        rng = random.Random(f"{ctx.seed}:topup:{r}")
        prompts = [
            prompt_for(ctx, skills[i % len(skills)], docs.iloc[i % len(docs)] if not docs.empty else None, memory, rng)
            for i in range(count)
        ]
        ids = []
        for i, prompt in enumerate(prompts):
            index = r * ROUND_OFFSET + i
            design_id = design_id_for(ctx.run_id, ctx.gen, prompt.doc_id, prompt.skill, index)
            ids.append((design_id, design_id_for(ctx.run_id, ctx.gen, prompt.doc_id, prompt.skill, -1 - index)))
        first = generate_rows(ctx, prompts, ids, model, rng, attempt=0, seed=ctx.seed + 7919 * r)
        designed += len(first)
        retries, verdicts, retry_docs = validate_with_retries(ctx, first, ROUND_OFFSET + r, model)
        designs += [first, retries]
        validations.append(verdicts)
        documents += [docs, retry_docs]
        final = verdicts.sort_values(["design_id", "attempt"]).drop_duplicates("design_id", keep="last")
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


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
