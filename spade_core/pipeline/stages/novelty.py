"""Novelty: the verdicts of :func:`spade_core.designer.novelty_checks.novelty_verdicts` on this generation's
valid designs, rows of this stage's own ``novelty`` table; the validations stay as the validate stage wrote
them."""

from __future__ import annotations

from typing import Any

from spade_core.designer.novelty_checks import novelty_verdicts
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    final = ctx.final_designs(novelty=False)
    rows = novelty_verdicts(final[final["ok"]], ctx.previous_memory(), ctx.cfg)
    ctx.write("novelty", rows)
    rejected = set(rows.loc[~rows["novel"].astype(bool), "design_id"]) if not rows.empty else set()
    return {"checked": len(set(rows["design_id"])) if not rows.empty else 0, "rejected": len(rejected)}
