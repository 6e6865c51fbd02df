"""Evaluate (docs/DESIGN.md §9; every ``evaluation.every`` generations): the checkpoint that ends generation
``gen`` (global step ``gen · K``) on the held-out suites, played by the run's own model lease (a ``vllm`` run's
engine service reloads that checkpoint; no second engine starts); its marker lists the ``evals`` files. A
generation that wrote no checkpoint records the stage as a no-op with its reason."""

from __future__ import annotations

from typing import Any

from spade_core.eval import evaluate_checkpoint
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext
from spade_core.steps import first_step
from spade_core.store.artifacts import WrittenFile
from spade_core.store.checkpoints import checkpoint_complete


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:

    if not checkpoint_complete(ctx.store, ctx.run_id, first_step(ctx.cfg, ctx.gen + 1)):  # gen ends with it
        return {"skipped_reason": f"generation {ctx.gen} wrote no checkpoint (training.enabled is false)"}
    written: list[WrittenFile] = []
    frame = evaluate_checkpoint(ctx.cfg, ctx.store, ctx.run_id, ctx.gen, generator=model, written=written)
    ctx.adopt(written)  # ``eval-{suite}``: the name ``spade eval`` writes too, so either replaces the other
    means = frame.groupby("suite")["score"].mean().round(4).to_dict() if not frame.empty else {}
    return {"items": len(frame), "score_mean": means}
