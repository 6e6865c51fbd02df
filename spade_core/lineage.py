"""An environment's ancestry: the chain of parents its mutations started from (``designs.parent_env_id``).

A design written with ``designer.mode`` mutate or parameters names the environment it rewrote; that parent
may itself be a mutation, and so on back to an environment written anew or taken from the library (a starter or seed
environment, which has no design row). :func:`lineage` walks the chain from the store and puts each
ancestor's latest scores beside it (``env_scores``: the win rate and regret of the generation that last
played it), which is what ``spade envs lineage`` prints.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.catalog import query
from spade_core.envs.seeds import load_seed_envs, load_starter_envs
from spade_core.store import Store

COLUMNS = ["depth", "env_id", "origin", "run_id", "gen", "skill", "win_rate", "regret"]
MAX_DEPTH = 1000  # a chain longer than this is a cycle in corrupted rows, not a lineage

DESIGNS_SQL = """
select env_id, any_value(parent_env_id order by gen) as parent_env_id, min(gen) as gen,
       any_value(run_id order by gen) as run_id, any_value(skill order by gen) as skill
from designs where env_id is not null and (? is null or list_contains(?, run_id)) group by env_id
"""
SCORES_SQL = """
select env_id, arg_max(win_rate, gen) as win_rate, arg_max(regret, gen) as regret
from env_scores group by env_id
"""


def lineage(store: Store, env_id: str, runs: list[str] | None = None) -> pd.DataFrame:
    """The chain from ``env_id`` (depth 0) to its oldest known ancestor, one row per environment with the
    :data:`COLUMNS`; ``origin`` is ``design`` (a design row of the store), ``starter`` or ``seed`` (the
    library) or ``unknown``. ``runs``: only the design rows of these runs name parents (a row written under
    another run cannot graft an ancestor on); None: every run's. Raises ``FileNotFoundError`` when
    ``env_id`` is neither designed nor library."""
    designs = query(store, DESIGNS_SQL, [runs, runs]).set_index("env_id")
    scores = query(store, SCORES_SQL).set_index("env_id")
    library = {e.env_id: ("starter", e.skill) for e in load_starter_envs()}
    library.update({e.env_id: ("seed", e.skill) for e in load_seed_envs()})
    if env_id not in designs.index and env_id not in library:
        raise FileNotFoundError(f"environment {env_id!r} is neither in the store's designs nor in the library")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    current: str | None = env_id
    while current is not None and current not in seen and len(rows) < MAX_DEPTH:
        seen.add(current)
        row = {"depth": len(rows), "env_id": current, "run_id": None, "gen": None, "skill": None}
        parent = None
        if current in designs.index:
            d = designs.loc[current]
            row.update(origin="design", run_id=d.run_id, gen=int(d.gen), skill=d.skill)
            parent = d.parent_env_id if isinstance(d.parent_env_id, str) else None
        elif current in library:
            row.update(origin=library[current][0], skill=library[current][1])
        else:
            row.update(origin="unknown")
        score = scores.loc[current] if current in scores.index else None
        row.update(
            win_rate=float(score.win_rate) if score is not None else None,
            regret=float(score.regret) if score is not None else None,
        )
        rows.append(row)
        current = parent
    return pd.DataFrame(rows, columns=COLUMNS).astype({"gen": "Int64"})
