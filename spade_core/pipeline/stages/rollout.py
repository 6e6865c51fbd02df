"""Rollout (docs/DESIGN.md §7 step 6): the plays of one shard of the pool at step ``k`` of the generation
(:func:`spade_core.play.plays.rollouts`).

Shard ``j`` plays the ``j``-th block of ``orchestration.shard_size`` pool environments and writes
``episodes/rollout-s{k}-{j}``. With ``designer.top_up_at: steps`` step ``k`` plays the pool with the top-ups of
steps 1..k (:meth:`~spade_core.pipeline.context.GenerationContext.step_pool`), they in the last shard
(:func:`step_block`), and ceil(G / its size) plays each.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.shards import shard_count
from spade_core.play.plays import rollouts


def step_block(pool: pd.DataFrame, first: int, shard: int, size: int) -> pd.DataFrame:
    """Shard ``shard``'s block of the step's ``pool``, whose first ``first`` rows are the pool stage's: blocks of
    ``size`` of those (the pool stage counted the shards), the last one also holding every row a top-up of this
    pool's steps added.

    >>> pool = pd.DataFrame({"env_id": list("abcde")})
    >>> [list(step_block(pool, 3, s, 2)["env_id"]) for s in (0, 1)]
    [['a', 'b'], ['c', 'd', 'e']]
    """
    last = shard_count(first, size) - 1
    block = pool.iloc[shard * size : None if shard == last else (shard + 1) * size]
    return block.reset_index(drop=True)


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    shard = ctx.shard or 0
    pool = ctx.step_pool()
    block = step_block(pool, len(ctx.pool()), shard, ctx.shard_size)
    hints = ctx.read("hints", ["hint"], ["env_id", "hint"])
    played = rollouts(ctx.play_run(), block, hints, model, len(pool))
    written = ctx.write("episodes", played.frame, shard)
    return {"envs": len(block), "episodes": len(written), "policy_step": ctx.model_step, **played.info()}
