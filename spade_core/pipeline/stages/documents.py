"""Documents (docs/DESIGN.md §7 step 2): a fresh corpus document per design prompt."""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.designer.corpus import sample_documents
from spade_core.llm.base import Generator
from spade_core.pipeline.context import GenerationContext


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    """Sample ``designer.documents_per_generation`` documents (none in the 'no corpus' ablation)."""
    corpus = ctx.cfg.corpus
    if not corpus.enabled:
        frame = pd.DataFrame()
    else:
        frame = sample_documents(
            corpus.source,
            ctx.cfg.designer.documents_per_generation,
            ctx.seed,
            max(corpus.max_words, corpus.max_words_tool),
            endpoint_url=ctx.cfg.store.endpoint_url,
        )
    ctx.write("documents", frame)
    return {"rows": len(frame)}
