"""Validate (docs/DESIGN.md §7 step 4): each shard of designs in the jail, failed prompts retried
(:func:`spade_core.designer.retries.validate_with_retries`).

Shard ``k`` validates exactly ``designs/design-{k}`` and writes ``validate-{k}``: every retry, repairs and
fresh designs alike, as its own ``designs`` rows (``attempt`` > 0), their fresh documents as ``documents``
rows and every attempt's verdict as a ``validations`` row, so nothing the design stage wrote is ever
rewritten. A shard whose designs, with the design stage's time, run past ``designer.batch_deadline_s`` starts
no more retries and loses every design of its own; a rerun shard starts its budget afresh (:func:`batch_left`).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.designer.deadline import Clock, start_clock
from spade_core.designer.retries import validate_with_retries
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext


def validate_shard(
    ctx: GenerationContext,
    designs: pd.DataFrame,
    shard: int,
    generator: Generator | None = None,
    clock: Clock | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`~spade_core.designer.retries.validate_with_retries` of one shard of designs; writes
    ``validate-{shard}`` of ``validations``, of ``designs`` (the retries) and of ``documents`` (the retries'
    fresh documents). Returns (the retried design rows, every validation row)."""
    retries, rows, documents = validate_with_retries(ctx.design_run(), designs, shard, generator, clock)
    ctx.write("documents", documents, shard)
    ctx.write("designs", retries, shard)
    return retries, ctx.write("validations", rows, shard)


def batch_left(ctx: GenerationContext) -> float | None:
    """What the design stage left of ``designer.batch_deadline_s`` (None: no deadline): each shard's budget."""
    seconds = ctx.cfg.designer.batch_deadline_s
    design = ctx.upstream.get("design")
    spent = float(design.info.get("batch_seconds", 0.0)) if design is not None else 0.0
    return None if seconds is None else seconds - spent


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    shard = ctx.shard or 0
    designs = ctx.read_shard("designs", "design", shard)
    retries, validations = validate_shard(ctx, designs, shard, model, start_clock(batch_left(ctx), model))
    final = validations.drop_duplicates("design_id", keep="last") if not validations.empty else validations
    valid = int(final["ok"].sum()) if not final.empty else 0
    return {"valid": valid, "retried": len(retries), "failed_prompts": len(final) - valid}
