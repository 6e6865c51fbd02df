"""The numbers a parameter-mutation designer chose, per generation (``designer.mode: parameters``).

In a parameter mutation the designer writes new values for its parent's parameters (docs/DESIGN.md §3,
``spade_core/designer/parameters.py``). Where the parent's difficulty is a number, such as the length of
``_NAMES`` in the designer test bed's family (``data/seed_envs/difficulty/``: how many people's answers the
observation lists), the numbers the designs carry are the difficulty the designer chose. For each
rewarded design of a run in that mode (``designer_rewards``, the designs the curve is made of; not a refused
parent copy, which ``scoring.parent_copy_raw`` rewards unplayed) this reads its environment's code (the
``pool`` row) and keeps its numbers: each integer parameter's value and each container parameter's length
(``len(_NAMES)``); per generation and number it gives the designs, the mean with its standard error, and how
many designs chose each value.
"""

from __future__ import annotations

import math
from typing import Any

import duckdb
import pandas as pd

from spade_core.designer.parameters import parameters_of

CHOSEN_COLUMNS = ["run_id", "gen", "parameter", "designs", "mean", "se", "values"]

# The code of each rewarded design of the runs, from its generation's pool row.
_REWARDED_CODE = """
select r.run_id, r.gen, r.design_id, any_value(p.code) as code
from designer_rewards r join pool p on p.run_id = r.run_id and p.gen = r.gen and p.env_id = r.env_id
where list_contains($runs, r.run_id) and r.window_win_rate is not null  -- not a refused parent copy
group by all order by r.run_id, r.gen, r.design_id
"""


def numbers_of(code: str) -> dict[str, int]:
    """The numbers of ``code``'s parameters: an integer's value (a bool is none), a container's length.

    >>> numbers_of('_PEOPLE = 4\\n_NAMES = ["Ann", "Ben"]\\n_FLAG = True\\n_RATE = 0.5\\n')
    {'_PEOPLE': 4, 'len(_NAMES)': 2}
    """
    numbers = {}
    for name, value in parameters_of(code).items():
        if isinstance(value, int) and not isinstance(value, bool):
            numbers[name] = value
        elif isinstance(value, list | tuple | set | frozenset | dict):
            numbers[f"len({name})"] = len(value)
    return numbers


def chosen_parameters(designs: pd.DataFrame) -> pd.DataFrame:
    """Per run, generation and number (:func:`numbers_of`; :data:`CHOSEN_COLUMNS`): the designs that have it,
    the mean, its standard error (NaN for one design) and each value's count, as ``value:count`` from the
    smallest value. ``designs``: ``run_id``, ``gen``, ``code``, one row per design.

    >>> frame = pd.DataFrame({"run_id": ["r"] * 3, "gen": [1, 1, 2],
    ...                       "code": ["_PEOPLE = 2\\n", "_PEOPLE = 4\\n", "_PEOPLE = 3\\nX = 'a'\\n"]})
    >>> chosen_parameters(frame)[["gen", "parameter", "designs", "mean", "se", "values"]].to_dict("records")
    [{'gen': 1, 'parameter': '_PEOPLE', 'designs': 2, 'mean': 3.0, 'se': 1.0, 'values': '2:1 4:1'}, \
{'gen': 2, 'parameter': '_PEOPLE', 'designs': 1, 'mean': 3.0, 'se': nan, 'values': '3:1'}]
    """
    rows: list[dict[str, Any]] = []
    for run_id, gen, code in zip(designs["run_id"], designs["gen"], designs["code"], strict=True):
        rows += [{"run_id": run_id, "gen": int(gen), "parameter": k, "value": v} for k, v in numbers_of(code).items()]
    if not rows:
        return pd.DataFrame(columns=CHOSEN_COLUMNS)
    out = []
    for (run_id, gen, parameter), group in pd.DataFrame(rows).groupby(["run_id", "gen", "parameter"], sort=True):
        values = group["value"].astype(float)
        counts = group["value"].value_counts().sort_index()
        se = float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else math.nan
        out.append(
            {
                "run_id": run_id,
                "gen": int(gen),
                "parameter": parameter,
                "designs": len(values),
                "mean": float(values.mean()),
                "se": se,
                "values": " ".join(f"{v}:{n}" for v, n in counts.items()),
            }
        )
    return pd.DataFrame(out, columns=CHOSEN_COLUMNS)


def load_chosen(con: duckdb.DuckDBPyConnection, runs: dict[str, dict[str, Any]]) -> pd.DataFrame:
    """The chosen parameters of those ``runs`` (run id -> its stored config, {} without one) whose designer
    mode is ``parameters`` or unknown; empty when there are none."""
    designers = {run_id: config.get("designer") for run_id, config in runs.items()}
    # a run without a stored config (the local runner binds none) counts: write-mode designs carry no numbers
    # a parameter mutation chose, but its rows show whatever integer constants its modules define
    mutating = [r for r, d in designers.items() if not isinstance(d, dict) or d.get("mode") == "parameters"]
    if not mutating:
        return pd.DataFrame(columns=CHOSEN_COLUMNS)
    return chosen_parameters(con.execute(_REWARDED_CODE, {"runs": mutating}).df())
