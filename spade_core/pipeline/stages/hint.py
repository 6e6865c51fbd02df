"""Hint (docs/DESIGN.md §7 step 5): one hint per pool environment, written by the same model from the source,
a leaking hint rewritten (:func:`spade_core.play.hint_batch.hints_and_counts`); written as ``hints/hint-0``."""

from __future__ import annotations

from typing import Any

from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.play.hint_batch import hints_and_counts


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    envs = ctx.pool()
    if ctx.cfg.rollout.plays_hint == 0:  # no hinted play reads them (a fixed baseline): no model call
        envs = envs.iloc[0:0]
    frame, counts = hints_and_counts(ctx.play_run(), envs, model)
    written = ctx.write("hints", frame)
    return {"rows": len(written), **counts}
