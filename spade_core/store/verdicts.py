"""The final word on each design of a generation, from the rows of the stages that judged it.

A design's reply may have been repaired (``attempt`` > 0, written by the validate stage) and a valid one
may have been found too close to a known environment (the novelty stage's own table). Every reader that
needs "which designs are valid, with which code" — the pool, the scores, the trainer, the summary — asks
here, so the rule is written once: the highest attempt of a design is its design, that attempt's
validation is its verdict, and a ``novel = false`` row turns a valid verdict into ``not_novel``. It reads
the store through the stage markers only (no pipeline module), so the trainer subprocess asks here too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from spade_core.store.artifacts import Store
from spade_core.store.markers import listed_files

# The stages whose markers list ``designs`` files: the designer's replies, the validate stage's retries
# (repairs and fresh designs, written as ``validate-{shard}``) and the top-up's designs and their retries.
DESIGN_STAGES = ("design", "validate", "topup")
# The stages whose markers list ``validations`` files.
VALIDATION_STAGES = ("validate", "topup")
VERDICT_COLUMNS = ["design_id", "attempt", "ok", "error_type", "message"]
# The ``check`` of a ``novelty`` row that refuses a copy of the design's own parent: its lines (``designer.mode``
# mutate) or its parameters (``parameters``); a row without one is the embedding check against the memory.
PARENT_CHECK, PARAMETERS_CHECK = "parent", "parameters"
PARENT_CHECKS = (PARENT_CHECK, PARAMETERS_CHECK)


def _read(
    store: Store, run_id: str, gen: int, table: str, stages: tuple[str, ...], columns: list[str] | None = None
) -> pd.DataFrame:
    """The rows of ``table`` that the markers of ``stages`` list (a stage without a marker lists none), without
    the partition columns."""
    files = [f for stage in stages for f in (listed_files(store, run_id, gen, stage, table) or [])]
    return store.read_files(table, files, columns=columns, keys=False)


def final_verdicts(
    store: Store, run_id: str, gen: int, *, novelty: bool = True, steps: Sequence[str] = ()
) -> pd.DataFrame:
    """One row per design_id with the :data:`VERDICT_COLUMNS` of its latest attempt, sorted by design_id.
    ``novelty=False`` leaves the novelty verdicts out (what the novelty stage itself judges); ``steps`` names the
    per-step top-up stages (``refill-s{k}``) whose designs count too."""
    validations = _read(store, run_id, gen, "validations", (*VALIDATION_STAGES, *steps), VERDICT_COLUMNS)
    rejected = None
    if novelty:
        columns = ["design_id", "attempt", "novel", "similarity", "threshold", "check"]
        rejected = _read(store, run_id, gen, "novelty", ("novelty",), columns)[columns]
    return resolve(validations[VERDICT_COLUMNS], rejected)


def final_designs(
    store: Store, run_id: str, gen: int, *, novelty: bool = True, steps: Sequence[str] = ()
) -> pd.DataFrame:
    """One row per design_id: its latest attempt's ``designs`` columns plus ``ok``, ``error_type`` and
    ``message`` of :func:`final_verdicts`, sorted by design_id (``steps``: as there)."""
    designs = _read(store, run_id, gen, "designs", (*DESIGN_STAGES, *steps))
    verdicts = final_verdicts(store, run_id, gen, novelty=novelty, steps=steps)
    if designs.empty:
        return designs.assign(ok=pd.Series(dtype=bool), error_type=None, message=None)
    frame = designs.merge(verdicts, on=["design_id", "attempt"], how="inner")
    return frame.sort_values("design_id").reset_index(drop=True)


def resolve(validations: pd.DataFrame, novelty: pd.DataFrame | None) -> pd.DataFrame:
    """The rule of the module doc over plain frames.

    >>> v = pd.DataFrame({"design_id": ["a", "a", "b"], "attempt": [0, 1, 0], "ok": [False, True, True],
    ...                   "error_type": ["timeout", None, None], "message": ["slow", None, None]})
    >>> n = pd.DataFrame({"design_id": ["b"], "attempt": [0], "novel": [False], "similarity": [0.99],
    ...                   "threshold": [0.9]})
    >>> final = resolve(v, n)
    >>> final[["design_id", "attempt", "ok"]].to_dict("records")
    [{'design_id': 'a', 'attempt': 1, 'ok': True}, {'design_id': 'b', 'attempt': 0, 'ok': False}]
    >>> final["error_type"].iloc[1]
    'not_novel'
    """
    latest = validations.sort_values(["design_id", "attempt"]).drop_duplicates("design_id", keep="last")
    frame = latest.reset_index(drop=True).astype({"attempt": int, "ok": bool})
    if novelty is None or novelty.empty:
        return frame
    rejected = novelty[~novelty["novel"].astype(bool)]
    reasons = {(r.design_id, int(r.attempt)): _reason(r) for r in rejected.itertuples()}
    keys = list(zip(frame["design_id"], frame["attempt"], strict=True))
    hit = [key in reasons for key in keys]
    frame["ok"] = frame["ok"] & ~pd.Series(hit, index=frame.index)
    frame["error_type"] = ["not_novel" if h else e for h, e in zip(hit, frame["error_type"], strict=True)]
    frame["message"] = [reasons[k] if h else m for k, h, m in zip(keys, hit, frame["message"], strict=True)]
    return frame


def _reason(row: Any) -> str:
    """Why a ``novelty`` row refused its design (a row without ``check`` is an embedding verdict)."""
    if getattr(row, "check", None) == PARENT_CHECK:
        return f"a copy of its parent: {row.similarity:.3f} of its lines match > {row.threshold}"
    if getattr(row, "check", None) == PARAMETERS_CHECK:
        return f"a copy of its parent: {row.similarity:.3f} of its parameters unchanged > {row.threshold}"
    return f"cosine similarity {row.similarity:.3f} to a known environment > {row.threshold}"
