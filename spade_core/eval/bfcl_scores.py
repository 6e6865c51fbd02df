"""BFCL's summary accuracies, from ``evals`` rows of the BFCL suites, as BFCL's own score tables compute them
(``eval_checker/eval_runner_helper.py``, the columns the authors' ``bfcl_full`` suite reads off them):

- ``non_live``: "Non-Live AST Acc", the unweighted mean of simple (itself the unweighted mean of simple,
  java and javascript), multiple, parallel and parallel_multiple;
- ``live``: "Live Acc", live_simple, live_multiple, live_parallel and live_parallel_multiple weighted by
  their entries;
- ``multi_turn``: "Multi Turn Acc", the unweighted mean of the four multi-turn categories;
- ``irrelevance``: "Irrelevance Detection", the unweighted mean of irrelevance and live_irrelevance;
  ``relevance``: live_relevance.

BFCL counts a category that did not run as 0 in its means; here a group is left out unless every category
it needs has rows (a ``limit`` below the full set still gives a group, over the sampled entries). BFCL's
"Overall Acc" weighs these with the agentic categories, which do not run offline: it is not computed.
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

SIMPLE = ("simple", "java", "javascript")
NON_LIVE = ("simple", "multiple", "parallel", "parallel_multiple")  # "simple" = the mean of SIMPLE
LIVE = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
MULTI_TURN = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
IRRELEVANCE = ("irrelevance", "live_irrelevance")


def category_of(item_id: str) -> str:
    """The category of a BFCL item id.

    >>> category_of("bfcl/live_simple/3-2-0")
    'live_simple'
    """
    return item_id.split("/")[1]


def category_accuracy(frame: pd.DataFrame) -> pd.DataFrame:
    """Per category: ``items`` and ``accuracy`` (the fraction passed) of BFCL rows (``item_id`` ``bfcl/...``).

    >>> rows = pd.DataFrame({"item_id": ["bfcl/java/1", "bfcl/java/2"], "passed": [True, False]})
    >>> category_accuracy(rows).to_dict("records")
    [{'category': 'java', 'items': 2, 'accuracy': 0.5}]
    """
    rows = frame[frame["item_id"].str.startswith("bfcl/")]
    passed = rows["passed"].fillna(False).astype(bool)
    grouped = rows.assign(category=rows["item_id"].map(category_of), _passed=passed).groupby("category", sort=True)
    return grouped.agg(items=("_passed", "size"), accuracy=("_passed", "mean")).reset_index()


def _unweighted(accuracy: dict[str, float], categories: Sequence[str]) -> float | None:
    if not all(c in accuracy for c in categories):
        return None
    return sum(accuracy[c] for c in categories) / len(categories)


def summary(frame: pd.DataFrame) -> dict[str, float]:
    """BFCL's group accuracies (module doc) over the categories present, plus each category's accuracy.

    >>> rows = pd.DataFrame({
    ...     "item_id": ["bfcl/simple/1", "bfcl/java/1", "bfcl/javascript/1", "bfcl/multiple/1", "bfcl/parallel/1",
    ...                 "bfcl/parallel_multiple/1", "bfcl/live_simple/1", "bfcl/live_simple/2", "bfcl/live_multiple/1",
    ...                 "bfcl/live_parallel/1", "bfcl/live_parallel_multiple/1"],
    ...     "passed": [True, False, True, True, False, False, True, True, False, False, False]})
    >>> {k: round(v, 3) for k, v in summary(rows).items() if "/" not in k}
    {'non_live': 0.417, 'live': 0.4}
    """
    per = category_accuracy(frame)
    accuracy = dict(zip(per["category"], per["accuracy"], strict=True))
    counts = dict(zip(per["category"], per["items"], strict=True))
    out: dict[str, float] = {}
    simple = _unweighted(accuracy, SIMPLE)
    if simple is not None:
        non_live = _unweighted({**accuracy, "simple": simple}, NON_LIVE)
        if non_live is not None:
            out["non_live"] = non_live
    if all(c in accuracy for c in LIVE):
        out["live"] = sum(accuracy[c] * counts[c] for c in LIVE) / sum(counts[c] for c in LIVE)
    for name, categories in (("multi_turn", MULTI_TURN), ("irrelevance", IRRELEVANCE)):
        value = _unweighted(accuracy, categories)
        if value is not None:
            out[name] = value
    if "live_relevance" in accuracy:
        out["relevance"] = accuracy["live_relevance"]
    out.update({f"category/{c}": float(a) for c, a in accuracy.items()})
    return out
