"""Hint (docs/DESIGN.md §7 step 5): one hint per pool environment, written by the same model from the
source; a hint that contains the solution of a seed that will be played is flagged ``leaks_solution``."""

from __future__ import annotations

from typing import Any

import pandas as pd

from sandbox.session import EnvSession, run_parallel
from spade_core.hints import clean_hint, hint_messages, hint_row
from spade_core.llm.base import GenerationRequest, Generator, SamplingParams
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.stages.rollout import hint_seeds
from spade_core.validate import limits_from_config

NAME = "hint"


def _solutions(ctx: GenerationContext, env_id: str, code: str) -> list[str]:
    """Reference solutions of the seeds the hinted plays will use (for leak detection), from the jail."""
    out = []
    with EnvSession(
        code,
        max_turns=ctx.cfg.rollout.max_turns,
        limits=limits_from_config(ctx.cfg.validation),
        call_timeout_s=ctx.cfg.validation.call_timeout_s,
    ) as session:
        if session.open().ok:
            for seed in hint_seeds(ctx, env_id):
                if session.reset(seed).ok and (sol := session.solution()).ok:
                    out.append(str(sol.data["solution"]))
    return out


def hints(ctx: GenerationContext, envs: pd.DataFrame, generator: Generator) -> pd.DataFrame:
    """The hint rows of ``envs`` (one batched model call; solutions from parallel jails)."""
    if envs.empty:
        return pd.DataFrame()
    max_words = ctx.cfg.rollout.hint_max_words
    requests = [GenerationRequest(messages=hint_messages(e.code, e.kind, max_words)) for e in envs.itertuples()]
    rollout = ctx.cfg.rollout
    budget = rollout.hint_max_new_tokens or max(32, 2 * max_words)
    params = SamplingParams.from_config(
        ctx.cfg.model, max_new_tokens=budget, temperature=rollout.hint_temperature, seed=ctx.seed + 2
    )
    replies = generator.generate(requests, params)
    solutions = run_parallel(
        lambda env: _solutions(ctx, env[0], env[1]),
        list(zip(envs["env_id"], envs["code"], strict=True)),
        ctx.cfg.validation.parallel_jails,
    )
    rows = [
        {**hint_row(e.env_id, clean_hint(r.text, max_words), sols, generator.model_ref), "policy_step": ctx.first_step}
        for e, r, sols in zip(envs.itertuples(), replies, solutions, strict=True)
    ]
    return pd.DataFrame(rows)


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    frame = ctx.write("hints", hints(ctx, ctx.pool(), model), NAME)
    return {"rows": len(frame)}
