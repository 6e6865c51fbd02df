"""Design (docs/DESIGN.md §7 step 3): the first attempt of every design prompt, from one batched model call
(:func:`spade_core.designer.batch.design_batch`), written as ``designs/design-{k}``, one file per block of
``orchestration.shard_size`` designs (the validate stage's shards). The stage's time counts toward the
batch's ``designer.batch_deadline_s`` (``info["batch_seconds"]``, the validate shards have what is left).
"""

from __future__ import annotations

import time
from typing import Any

import pandas as pd

from spade_core.designer.batch import design_batch
from spade_core.designer.deadline import Clock, start_clock
from spade_core.designer.memory import Memory
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.shards import shard_count, shard_rows


def design(
    ctx: GenerationContext, documents: pd.DataFrame, generator: Generator, memory: Memory, clock: Clock | None = None
) -> pd.DataFrame:
    """:func:`~spade_core.designer.batch.design_batch` of ``documents``, written as ``design-{k}`` shards.
    ``clock``: the batch's (``designer.batch_deadline_s``), whose time left bounds the call."""
    frame = design_batch(ctx.design_run(), documents, generator, memory, clock)
    for shard in range(shard_count(len(frame), ctx.shard_size)):
        ctx.write("designs", shard_rows(frame, shard, ctx.shard_size), shard)
    return frame


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    documents = ctx.read("documents", ["documents"], keys=False)
    memory = ctx.previous_memory()
    clock = start_clock(ctx.cfg.designer.batch_deadline_s, model)
    designs = design(ctx, documents, model, memory, clock)
    # The batch's time so far (designer.batch_deadline_s): each validate shard has what is left of it.
    spent = round(time.monotonic() - clock.started, 3)
    return {"designs": len(designs), "shards": shard_count(len(designs), ctx.shard_size), "batch_seconds": spent}
