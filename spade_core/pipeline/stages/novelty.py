"""Novelty (optional; ``memory.novelty_threshold``): valid designs too close to a known environment.

A valid design whose MiniLM cosine similarity to a memory environment (the snapshot of ``gen - 1``) or to
an earlier accepted design of this generation exceeds the threshold gets ``novel = false``. The verdicts
are rows of this stage's own ``novelty`` table; the validations stay as the validate stage wrote them.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.llm.base import Generator
from spade_core.novelty import default_embedder, novelty_filter
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.verdicts import final_designs

NAME = "novelty"


def applies(cfg: Any, gen: int) -> bool:
    return cfg.memory.novelty_threshold is not None and not cfg.designer.fixed_pool


def novelty_rows(valid: pd.DataFrame, memory_codes: list[str], threshold: float) -> pd.DataFrame:
    """One row per valid design (in ``design_id`` order): accepted or not, and its highest similarity."""
    valid = valid.sort_values("design_id")
    verdicts = novelty_filter([str(c) for c in valid["code"]], memory_codes, threshold, default_embedder())
    return pd.DataFrame(
        {
            "design_id": valid["design_id"],
            "attempt": valid["attempt"].astype(int),
            "env_id": valid["env_id"],
            "novel": [accepted for accepted, _ in verdicts],
            "similarity": [float(similarity) for _, similarity in verdicts],
            "threshold": float(threshold),
        }
    )


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    threshold = ctx.cfg.memory.novelty_threshold
    if threshold is None:
        raise ValueError("the novelty stage needs memory.novelty_threshold")
    final = final_designs(ctx.store, ctx.run_id, ctx.gen, novelty=False)
    rows = novelty_rows(final[final["ok"]], [e.code for e in ctx.previous_memory()], threshold)
    ctx.write("novelty", rows, NAME)
    return {"checked": len(rows), "rejected": int((~rows["novel"]).sum()) if not rows.empty else 0}
