"""Rollout (docs/DESIGN.md §7 step 6): the plays of one shard of the pool at step ``k`` of the generation.

Every no-hint play (``rollout.plays_no_hint`` [8] per environment, or ceil(G / pool size) with
``training.global_batch_size`` G: :func:`no_hint_plays`) starts from a fresh seed of its own, so the plays of
one environment are different instances; at step 0 only, ``rollout.plays_hint`` [16] hinted
plays (never trained on) measure the regret. Shard ``j`` plays the ``j``-th block of
``orchestration.shard_size`` pool environments and writes ``episodes/rollout-s{k}-{j}``; every row carries
the global step of the checkpoint that played it (``policy_step``). With ``designer.top_up_at: steps`` step
``k`` plays the pool with the top-ups of steps 1..k (:func:`~spade_core.pipeline.stages.topup.step_pool`), they
in the last shard, and ceil(G / its size) plays each; they have no hint, so no hinted play.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from spade_core.config import SpadeConfig
from spade_core.hashing import short_hash
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.shards import shard_count
from spade_core.pipeline.stages.topup import step_pool
from spade_core.play.rollout import EpisodeSpec, RolloutEngine


def play_seed(ctx: GenerationContext, env_id: str, condition: str, play: int, step: int | None = None) -> int:
    """The environment seed of one play: fresh per run, generation, step (default: the context's), environment,
    condition and play."""
    at = ctx.step if step is None else step
    key = f"{ctx.cfg.seed}:{ctx.run_id}:{ctx.gen}:{at or 0}:{env_id}:{condition}:{play}"
    return int(short_hash(key, 8), 16)


def no_hint_plays(cfg: SpadeConfig, pool_size: int) -> int:
    """No-hint plays per environment at every step: ``rollout.plays_no_hint``, or with
    ``training.global_batch_size`` G set, ``ceil(G / pool size)`` as the authors
    (``spade/core/orchestrator.py:2382``), so a pool of fewer environments still fills the batch.

    >>> from spade_core.config import load_config
    >>> cfg = load_config(None, overrides=["training.global_batch_size=192"])
    >>> no_hint_plays(cfg, 24), no_hint_plays(cfg, 20), no_hint_plays(load_config(None), 20)
    (8, 10, 8)
    """
    batch = cfg.training.global_batch_size
    return cfg.rollout.plays_no_hint if batch is None or pool_size < 1 else math.ceil(batch / pool_size)


def plan(
    ctx: GenerationContext, envs: pd.DataFrame, hints: pd.DataFrame, pool_size: int | None = None
) -> list[EpisodeSpec]:
    """The plays of ``envs`` at this step: no-hint plays always, hinted plays at step 0 (with a hint).
    ``pool_size``: the environments this step plays (default: the pool's), for ceil(G / pool size)."""
    cfg = ctx.cfg.rollout
    hint_of = dict(zip(hints["env_id"], hints["hint"], strict=True)) if not hints.empty else {}
    size = len(ctx.pool()) if pool_size is None else pool_size
    plays = no_hint_plays(ctx.cfg, size) if ctx.cfg.training.global_batch_size else cfg.plays_no_hint
    specs = []
    for e in envs.itertuples():
        specs += [
            EpisodeSpec(e.env_id, e.code, play_seed(ctx, e.env_id, "no_hint", p), "no_hint", None, p)
            for p in range(plays)
        ]
        hint = hint_of.get(e.env_id) or None
        if hint and not ctx.step:
            specs += [
                EpisodeSpec(e.env_id, e.code, play_seed(ctx, e.env_id, "hint", p), "hint", hint, p)
                for p in range(cfg.plays_hint)
            ]
    return specs


def hint_seeds(ctx: GenerationContext, env_id: str) -> list[int]:
    """The seeds of an environment's hinted plays (whose solutions a hint must not leak)."""
    return [play_seed(ctx, env_id, "hint", p, step=0) for p in range(ctx.cfg.rollout.plays_hint)]


def rollouts(
    ctx: GenerationContext, envs: pd.DataFrame, hints: pd.DataFrame, generator: Generator, pool_size: int | None = None
) -> pd.DataFrame:
    """Every planned play of ``envs`` in one engine run, with the step's ``policy_step``."""
    specs = plan(ctx, envs, hints, pool_size)
    if not specs:
        return pd.DataFrame()
    frame = pd.DataFrame(RolloutEngine.from_config(ctx.cfg, generator).run(specs))
    if "logprobs" not in frame.columns:
        frame["logprobs"] = None  # a backend without log-probs: TIS leaves these samples unweighted
    frame["policy_step"] = ctx.model_step
    return frame


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
    pool = step_pool(ctx)
    block = step_block(pool, len(ctx.pool()), shard, ctx.shard_size)
    hints = ctx.read("hints", ["hint"], ["env_id", "hint"])
    played = ctx.write("episodes", rollouts(ctx, block, hints, model, len(pool)), shard)
    return {"envs": len(block), "episodes": len(played), "policy_step": ctx.model_step}
