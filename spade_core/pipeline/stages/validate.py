"""Validate (docs/DESIGN.md §7 step 4): each shard of designs in the jail, with optional repair rounds.

Shard ``k`` validates exactly ``designs/design-{k}``. A repair round feeds a failed design's error back to
the model; the repaired reply is a new ``designs`` row of its own (same ``design_id``, ``attempt`` = the
round, file ``repair-{k}``) and its verdict a new ``validations`` row, so nothing the design stage wrote is
ever rewritten. The verdict of a design is the one of its highest attempt
(:func:`spade_core.pipeline.verdicts.final_designs`).
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from spade_core.design import design_row, repair_messages
from spade_core.llm.base import GenerationRequest, Generator, SamplingParams
from spade_core.pipeline.context import GenerationContext
from spade_core.validate import validate_many

NAME = "validate"
REPAIR = "repair"  # the designs file of this stage's repaired replies


def validation_rows(ctx: GenerationContext, designs: pd.DataFrame) -> list[dict[str, Any]]:
    """One ``validations`` row per design row (a reply without code is a ``syntax_error``)."""
    with_code = designs[designs["code"].notna()]
    results = validate_many(list(with_code["code"]), ctx.cfg.validation)
    by_index = {i: r.as_row() for i, r in zip(with_code.index, results, strict=True)}
    rows = []
    for i, d in designs.iterrows():
        row = by_index.get(i) or {
            "env_id": None,
            "ok": False,
            "error_type": "syntax_error",
            "message": "no ```python block in the reply",
            "checks": {},
            "seconds": 0.0,
        }
        rows.append({"design_id": d["design_id"], "attempt": int(d["attempt"]), **row})
    return rows


def _repair(
    ctx: GenerationContext, failed: pd.DataFrame, verdicts: list[dict[str, Any]], generator: Generator, attempt: int
) -> pd.DataFrame:
    """The repaired replies of ``failed`` designs as new design rows with ``attempt``."""
    params = SamplingParams.from_config(
        ctx.cfg.model, max_new_tokens=ctx.cfg.designer.max_new_tokens, seed=ctx.seed + 1
    )
    requests = [
        GenerationRequest(
            messages=repair_messages(json.loads(d.prompt), d.completion, v["error_type"], v["message"] or "")
        )
        for d, v in zip(failed.itertuples(), verdicts, strict=True)
    ]
    replies = generator.generate(requests, params)
    rows = []
    for d, reply in zip(failed.itertuples(), replies, strict=True):
        row = design_row(
            design_id=d.design_id,
            doc_id=d.doc_id,
            group_id=d.group_id,
            skill=d.skill,
            messages=json.loads(d.prompt),
            completion=reply.text,
            model_ref=d.model_ref,
        )
        rows.append({**row, "attempt": attempt, "policy_step": ctx.first_step})
    return pd.DataFrame(rows)


def validate_shard(
    ctx: GenerationContext, designs: pd.DataFrame, shard: int, generator: Generator | None = None
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Validate one shard of designs, repair failures (``designer.repair_rounds``), write ``validate-{shard}``
    and ``repair-{shard}``. Returns (the repaired design rows, every validation row)."""
    rows = validation_rows(ctx, designs)
    current = designs.reset_index(drop=True)
    latest = list(rows)  # the newest verdict of each design in ``current``
    repaired: list[pd.DataFrame] = []
    rounds = ctx.cfg.designer.repair_rounds if generator is not None else 0
    for attempt in range(1, rounds + 1):
        failed = [i for i, r in enumerate(latest) if not r["ok"]]
        if not failed or generator is None:
            break
        fixes = _repair(ctx, current.iloc[failed], [latest[i] for i in failed], generator, attempt)
        verdicts = validation_rows(ctx, fixes)  # only the repaired designs are validated again
        repaired.append(fixes)
        rows += verdicts
        for i, fix, verdict in zip(failed, fixes.to_dict("records"), verdicts, strict=True):
            current.iloc[i] = pd.Series(fix)
            latest[i] = verdict
    repairs = pd.concat(repaired, ignore_index=True) if repaired else pd.DataFrame()
    ctx.write("designs", repairs, REPAIR, shard)
    return repairs, ctx.write("validations", pd.DataFrame(rows), NAME, shard)


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    shard = ctx.shard or 0
    designs = ctx.read_shard("designs", "design", shard)
    repairs, validations = validate_shard(ctx, designs, shard, model)
    final = validations.drop_duplicates("design_id", keep="last") if not validations.empty else validations
    valid = int(final["ok"].sum()) if not final.empty else 0
    return {"valid": valid, "repaired": len(repairs)}
