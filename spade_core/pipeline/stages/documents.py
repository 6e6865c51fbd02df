"""Documents (docs/DESIGN.md §7 step 2): a fresh corpus document per design prompt
(:func:`spade_core.designer.batch.prompt_documents`; none in the 'no corpus' ablation)."""

from __future__ import annotations

from typing import Any

from spade_core.designer.batch import prompt_documents
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    """Sample ``designer.documents_per_generation`` documents (none in the 'no corpus' ablation)."""
    frame = prompt_documents(ctx.cfg, ctx.cfg.designer.documents_per_generation, ctx.seed)
    ctx.write("documents", frame)
    return {"rows": len(frame)}
