"""Train (docs/DESIGN.md §7 step 9): the GRPO update under ``accelerate launch`` → checkpoint ``gen``.

A complete checkpoint is reused; with ``training.enabled`` false the stage records why nothing was trained.
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

    if checkpoint_complete(ctx.store, ctx.run_id, ctx.gen):
        summary = TrainSummary.from_dict(read_checkpoint(ctx.store, ctx.run_id, ctx.gen).get("summary", {}))
    else:
        summary = launch_training(ctx.cfg, ctx.store, ctx.run_id, ctx.gen, echo=ctx.echo)
    return {"summary": summary.to_dict(), "line": summary.line()}
