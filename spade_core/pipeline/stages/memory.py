"""Memory (docs/DESIGN.md §7 step 8): every scored pool environment enters the FIFO memory; the snapshot
of this generation is written whole (the designer of ``gen + 1`` reads it)."""

from __future__ import annotations

from typing import Any

from spade_core.llm.base import Generator
from spade_core.memory import STAGE
from spade_core.pipeline.context import GenerationContext

NAME = STAGE


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    memory = ctx.previous_memory()
    scores = ctx.read("env_scores", ["score"]).drop(columns=["run_id", "gen"])
    memory.add_scored(scores, ctx.pool(), ctx.gen)
    frame = ctx.write("memory", memory.to_frame(), NAME)
    return {"rows": len(frame)}
