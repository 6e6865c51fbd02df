"""The installed bfcl-eval data (v4): the categories the paper evaluates, their entries and possible answers,
and the categories bfcl-eval ships that are not run here, with the reason (see :mod:`spade_core.eval.bfcl`)."""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

NON_LIVE_CATEGORIES = ("simple", "multiple", "parallel", "parallel_multiple", "java", "javascript", "irrelevance")
LIVE_CATEGORIES = (
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_relevance",
    "live_irrelevance",
)
MULTI_TURN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")
# suite "bfcl_full": the paper's 17 (their gem_eval_bfcl_only.yaml; tool_use.yaml's non_live, live, multi_turn)
PAPER_CATEGORIES = NON_LIVE_CATEGORIES + LIVE_CATEGORIES + MULTI_TURN_CATEGORIES
DEFAULT_CATEGORIES = ("simple", "parallel", "irrelevance", "multi_turn_base")  # suite "bfcl"
_BFCL_NAMES = {"simple": "simple_python", "java": "simple_java", "javascript": "simple_javascript"}
# our category name -> BFCL's data file (BFCL's category name is the file's stem after the version prefix)
CATEGORIES: dict[str, str] = {c: f"BFCL_v4_{_BFCL_NAMES.get(c, c)}.json" for c in PAPER_CATEGORIES}
NOT_RUN: dict[str, str] = {
    "web_search_base": "searches and fetches web pages over the network (SerpAPI, an API key)",
    "web_search_no_snippet": "searches and fetches web pages over the network (SerpAPI, an API key)",
    "memory_kv": "agentic: replays prerequisite conversations into BFCL's memory backend first; not in the paper",
    "memory_vector": "loads a sentence-transformers model by its hub name (network) and a faiss index",
    "memory_rec_sum": "agentic: replays prerequisite conversations into BFCL's memory backend first; not in the paper",
    "format_sensitivity": "BFCL does not score it (a prompt-format robustness probe); not in the paper",
}
FULL_LIMIT = 4441  # entries of the 17 categories in bfcl-eval 2026.3.23: every one once (a test pins it)
MAXIMUM_STEP_LIMIT = 20  # BFCL's call steps per turn (constants.default_prompts.MAXIMUM_STEP_LIMIT)


def package_dir(name: str) -> str:
    """The directory of an installed package (bound into the jail by the multi-turn suites)."""
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"{name} is not installed (pip install --no-deps bfcl-eval)")
    return str(Path(spec.origin).parent)


@functools.cache
def data_dir() -> Path:
    """bfcl-eval's data directory."""
    return Path(package_dir("bfcl_eval")) / "data"


@functools.cache
def entries(relative: str) -> tuple[dict[str, Any], ...]:
    """The entries of one JSON-lines file under :func:`data_dir`."""
    with open(data_dir() / relative) as fh:
        return tuple(json.loads(line) for line in fh if line.strip())


@functools.cache
def answers(category: str) -> dict[str, Any]:
    """Entry id -> BFCL's possible answers, for a category that has them (relevance categories have none)."""
    path = Path("possible_answer") / CATEGORIES[category]
    return {} if not (data_dir() / path).exists() else {e["id"]: e["ground_truth"] for e in entries(str(path))}


def bfcl_name(category: str) -> str:
    """BFCL's name of one of our categories (its data file's stem).

    >>> bfcl_name("java"), bfcl_name("live_simple")
    ('simple_java', 'live_simple')
    """
    return CATEGORIES[category].removeprefix("BFCL_v4_").removesuffix(".json")


def category_sizes(categories: Sequence[str]) -> list[int]:
    """Entries per category in the installed bfcl-eval data."""
    return [len(entries(CATEGORIES[c])) for c in categories]


def allocate(limit: int, sizes: Sequence[int]) -> list[int]:
    """``limit`` items split evenly over categories of ``sizes`` entries, a full category's share passed on to
    the others (earlier categories take the remainder first).

    >>> allocate(8, [10, 10, 10]), allocate(10, [1, 10, 10]), allocate(100, [3, 4])
    ([3, 3, 2], [1, 5, 4], [3, 4])
    """
    counts = [0] * len(sizes)
    remaining, open_ = limit, [i for i, size in enumerate(sizes) if size > 0]
    while remaining > 0 and open_:
        share, extra = divmod(remaining, len(open_))
        for rank, i in enumerate(open_):
            take = min(sizes[i] - counts[i], share + (1 if rank < extra else 0))
            counts[i] += take
            remaining -= take
        open_ = [i for i in open_ if counts[i] < sizes[i]]
    return counts


def multi_turn_functions(involved: list[str]) -> list[dict[str, Any]]:
    """The function docs of a multi-turn entry's classes, as the data has them."""
    from bfcl_eval.constants.executable_backend_config import MULTI_TURN_FUNC_DOC_FILE_MAPPING

    return [f for cls in involved for f in entries(f"multi_turn_func_doc/{MULTI_TURN_FUNC_DOC_FILE_MAPPING[cls]}")]
