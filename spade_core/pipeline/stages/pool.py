"""Pool: the environments a generation plays (:mod:`spade_core.designer.pool`), written once as the ``pool``
table; every later stage reads it instead of recomputing it."""

from __future__ import annotations

from typing import Any

from spade_core.designer.novelty import default_embedder, pool_diversity
from spade_core.designer.pool import designed_pool, fixed_pool, with_starters
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.shards import shard_count


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    if ctx.cfg.designer.fixed_pool:
        envs = fixed_pool(ctx.cfg, ctx.store, ctx.run_id, ctx.gen)
    else:
        designs = ctx.final_designs()
        envs = designed_pool(designs, ctx.previous_memory(), ctx.cfg.rollout.replay_envs)
        envs = with_starters(envs, ctx.cfg.rollout.starter_envs)
    ctx.write("pool", envs)
    diversity = None
    if ctx.cfg.memory.report_diversity and not envs.empty:
        diversity = pool_diversity(list(envs["code"]), default_embedder())
    return {
        "env_ids": list(envs["env_id"]),
        "replayed": int((envs["source"] == "replay").sum()),
        "starters": int((envs["source"] == "starter").sum()),
        "shards": shard_count(len(envs), ctx.shard_size),
        "diversity": diversity,
    }
