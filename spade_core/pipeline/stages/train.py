"""Train (docs/DESIGN.md §7): step ``k`` of the generation — one optimizer step under ``accelerate launch``
on the step's plays, from checkpoint ``s`` to checkpoint ``s + 1`` (``s = (gen-1)·K + k``).

A complete checkpoint ``s + 1`` is reused; with ``training.enabled`` false the stage records why nothing
was trained.
"""

from __future__ import annotations

from typing import Any

from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext

NAME = "train"


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    from spade_core.checkpoints import checkpoint_complete
    from spade_core.checkpoints import read_marker as read_checkpoint
    from spade_core.train_launch import TrainSummary, launch_training

    written = ctx.global_step + 1
    if ctx.cfg.training.enabled and checkpoint_complete(ctx.store, ctx.run_id, written):
        summary = TrainSummary.from_dict(read_checkpoint(ctx.store, ctx.run_id, written).get("summary", {}))
    else:
        summary = launch_training(ctx.cfg, ctx.store, ctx.run_id, ctx.gen, ctx.step or 0, echo=ctx.echo)
    return {"summary": summary.to_dict(), "line": summary.line(), "checkpoint_step": written}
