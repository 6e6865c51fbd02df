"""Rollout (docs/DESIGN.md §7 step 6): the plays of one shard of the pool at step ``k`` of the generation.

Every no-hint play (``rollout.plays_no_hint`` [8] per environment) starts from a fresh seed of its own, so
the plays of one environment are different instances; at step 0 only, ``rollout.plays_hint`` [16] hinted
plays (never trained on) measure the regret. Shard ``j`` plays the ``j``-th block of
``orchestration.shard_size`` pool environments and writes ``episodes/rollout-s{k}-{j}``; every row carries
the global step of the checkpoint that played it (``policy_step``).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.hashing import short_hash
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.rollout import EpisodeSpec, RolloutEngine
from spade_core.shards import shard_rows

NAME = "rollout"


def play_seed(ctx: GenerationContext, env_id: str, condition: str, play: int, step: int | None = None) -> int:
    """The environment seed of one play: fresh per run, generation, step (default: the context's), environment,
    condition and play."""
    at = ctx.step if step is None else step
    key = f"{ctx.cfg.seed}:{ctx.run_id}:{ctx.gen}:{at or 0}:{env_id}:{condition}:{play}"
    return int(short_hash(key, 8), 16)


def plan(ctx: GenerationContext, envs: pd.DataFrame, hints: pd.DataFrame) -> list[EpisodeSpec]:
    """The plays of ``envs`` at this step: no-hint plays always, hinted plays at step 0 (with a hint)."""
    cfg = ctx.cfg.rollout
    hint_of = dict(zip(hints["env_id"], hints["hint"], strict=True)) if not hints.empty else {}
    specs = []
    for e in envs.itertuples():
        specs += [
            EpisodeSpec(e.env_id, e.code, play_seed(ctx, e.env_id, "no_hint", p), "no_hint", None, p)
            for p in range(cfg.plays_no_hint)
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


def rollouts(ctx: GenerationContext, envs: pd.DataFrame, hints: pd.DataFrame, generator: Generator) -> pd.DataFrame:
    """Every planned play of ``envs`` in one engine run, with the step's ``policy_step``."""
    specs = plan(ctx, envs, hints)
    if not specs:
        return pd.DataFrame()
    frame = pd.DataFrame(RolloutEngine.from_config(ctx.cfg, generator).run(specs))
    if "logprobs" not in frame.columns:
        frame["logprobs"] = None  # a backend without log-probs: TIS leaves these samples unweighted
    frame["policy_step"] = ctx.model_step
    return frame


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    shard = ctx.shard or 0
    block = shard_rows(ctx.pool(), shard, ctx.shard_size)
    hints = ctx.read("hints", ["hint"], ["env_id", "hint"])
    played = ctx.write("episodes", rollouts(ctx, block, hints, model), ctx.stage, shard)
    return {"envs": len(block), "episodes": len(played), "policy_step": ctx.model_step}
