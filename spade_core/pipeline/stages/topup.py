"""Top-up: design the environments a generation is missing, before its pool is formed or at its later steps
(the rounds of :mod:`spade_core.designer.rounds`). ``designer.top_up_at`` says when the
``designer.top_up_rounds`` rounds run:

- ``pool`` (stage ``topup``, :func:`run`): one round after another before the pool's first play, until the count
  is reached. A topped-up design is then a design like any other: hinted, scored, rewarded, trained.
- ``steps`` (stage ``refill``, :func:`refill`; the authors' timing and the paper presets'): round r at step r
  of the pool (:func:`spade_core.steps.top_up_steps`), with that step's checkpoint, as ``refill-s{r}``. Its
  valid designs join the pool (its ``pool`` rows, source ``design``) for that step and the later ones; they
  get no hint and no hinted play, so their designer reward is 0 (theirs: ``env_rewards.py:197-205``), and they
  are trained D steps after the step that designed them (:mod:`spade_core.pipeline.stages.reward`). The
  novelty filter does not judge them.

Every design, retry, document and verdict of either stage is a row of that stage's own files, read with
validate's by :mod:`spade_core.store.verdicts`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.designer.batch import prompt_plan
from spade_core.designer.rounds import added_pool_rows, design_round, missing, round_skills, top_up
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    cfg = ctx.cfg.designer
    judged = ctx.final_designs(novelty=False)
    valid = set(judged.loc[judged["ok"], "env_id"]) if not judged.empty else set()
    skills = round_skills(judged, prompt_plan(cfg, ctx.gen))
    done = top_up(
        ctx.design_run(), model, valid, skills, ctx.previous_memory(), cfg.top_up_rounds, cfg.documents_per_generation
    )
    ctx.write("documents", done.documents)
    ctx.write("designs", done.designs)
    ctx.write("validations", done.validations)
    return {
        "valid_before": len(valid),
        "valid": len(done.valid),
        "target": cfg.documents_per_generation,
        "rounds": done.rounds,
        "designed": done.designed,
    }


def refill(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    """Step k's top-up (``refill-s{k}``, round k): design what the pool the previous step played is missing;
    the valid designs become this step's new ``pool`` rows."""
    cfg = ctx.cfg.designer
    r = ctx.step or 0
    pool = ctx.step_pool(upto=r - 1)
    valid = set(pool.loc[pool["source"] == "design", "env_id"])
    count = missing(valid, cfg.documents_per_generation)
    designs = verdicts = documents = added = pd.DataFrame()
    if count:
        skills = round_skills(ctx.final_designs(novelty=False), prompt_plan(cfg, ctx.gen))
        designs, verdicts, documents, final = design_round(
            ctx.design_run(), model, r, count, skills, ctx.previous_memory()
        )
        added = added_pool_rows(designs, final, pool)
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
