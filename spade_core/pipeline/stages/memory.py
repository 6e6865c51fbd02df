"""Memory (docs/DESIGN.md §7 step 8): every scored pool environment enters the FIFO memory; the snapshot
of this generation is written whole (the designer of ``gen + 1`` reads it). Starter environments
(``rollout.starter_envs``) are training wheels for a small agent, not designs: they stay out."""

from __future__ import annotations

from typing import Any

from spade_core.designer.memory import win_fractions
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    memory = ctx.previous_memory()
    scores = ctx.read("env_scores", ["score"], keys=False)
    pool = ctx.pool()
    episodes = ctx.first_plays()
    # The memory's win rate is the fraction of the first step's no-hint plays with return > 0 (the authors').
    memory.add_scored(scores, pool[pool["source"] != "starter"], ctx.gen, wins=win_fractions(episodes))
    frame = ctx.write("memory", memory.to_frame())
    return {"rows": len(frame)}
