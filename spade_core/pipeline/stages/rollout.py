"""Rollout (docs/DESIGN.md §7 step 6): no-hint and hinted plays of one shard of the pool, batched.

Shard ``k`` plays the ``k``-th block of ``orchestration.shard_size`` pool environments and writes
``episodes/rollout-{k}``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.rollout import RolloutEngine, plan_episodes
from spade_core.shards import shard_rows

NAME = "rollout"


def play_seeds(ctx: GenerationContext) -> list[int]:
    """The environment seeds every play of this generation starts from."""
    return [ctx.seed + s for s in range(ctx.cfg.rollout.seeds_per_env)]


def rollouts(ctx: GenerationContext, envs: pd.DataFrame, hints: pd.DataFrame, generator: Generator) -> pd.DataFrame:
    """Every planned play of ``envs``, hinted ones with their environment's hint, in one engine run."""
    if envs.empty:
        return pd.DataFrame()
    hint_of = dict(zip(hints["env_id"], hints["hint"], strict=True)) if not hints.empty else {}
    specs = []
    for e in envs.itertuples():
        specs += plan_episodes(e.env_id, e.code, ctx.cfg.rollout, hint_of.get(e.env_id) or None, base_seed=ctx.seed)
    return pd.DataFrame(RolloutEngine.from_config(ctx.cfg, generator).run(specs))


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    shard = ctx.shard or 0
    block = shard_rows(ctx.pool(), shard, ctx.shard_size)
    hints = ctx.read("hints", ["hint"], ["env_id", "hint"])
    played = ctx.write("episodes", rollouts(ctx, block, hints, model), NAME, shard)
    return {"envs": len(block), "episodes": len(played)}
