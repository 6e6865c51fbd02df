"""Train (docs/DESIGN.md §7): step ``k`` of the generation — one optimizer step under ``accelerate launch``
on the step's plays, from checkpoint ``s`` to checkpoint ``s + 1`` (``s = (gen-1)·K + k``).

The stage's marker lists what the trainer wrote: the checkpoint's own marker file (written last by the
upload) and the ``train_metrics`` / ``train_samples`` files, so a checkpoint that is gone makes the stage
run again; with ``training.enabled`` false the stage records why nothing was
trained.
"""

from __future__ import annotations

from typing import Any

from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.store.checkpoints import checkpoint_files
from spade_core.train.launch import launch_training


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:

    written = ctx.global_step + 1
    summary = launch_training(ctx.cfg, ctx.store, ctx.run_id, ctx.gen, ctx.step or 0, echo=ctx.echo)
    if ctx.cfg.training.enabled:  # the subprocess uploaded checkpoint s + 1
        ctx.adopt(checkpoint_files(ctx.store, ctx.run_id, written))
    return {"summary": summary.to_dict(), "line": summary.line(), "checkpoint_step": written}
