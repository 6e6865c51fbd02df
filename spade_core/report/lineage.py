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

from spade_core.envs.seeds import load_seed_envs, load_starter_envs
from spade_core.pipeline.run_config import load_run_config
from spade_core.store.artifacts import Store
from spade_core.store.reader import RunReader

COLUMNS = ["depth", "env_id", "origin", "run_id", "gen", "skill", "win_rate", "regret"]
MAX_DEPTH = 1000  # a chain longer than this is a cycle in corrupted rows, not a lineage


def named_runs(store: Store, runs: list[str]) -> list[str]:
    """``runs`` and, transitively, the runs their stored configs name (``designer.fixed_pool: run:ID``)."""
    found: list[str] = []
    todo = list(runs)
    while todo:
        run = todo.pop(0)
        if run in found:
            continue
        found.append(run)
        cfg = load_run_config(store, run)
        pool = cfg.designer.fixed_pool if cfg is not None else None
        if pool and pool.startswith("run:"):
            todo.append(pool.removeprefix("run:"))
    return found


def lineage(store: Store, env_id: str, runs: list[str] | None = None) -> pd.DataFrame:
    """The chain from ``env_id`` (depth 0) to its oldest known ancestor, one row per environment with the
    :data:`COLUMNS`; ``origin`` is ``design`` (a design row of the store), ``starter`` or ``seed`` (the
    library) or ``unknown``. Rows are read from the files the markers of ``runs`` (and of the runs their
    configs name) list, so a row written under another run, or around the pipeline, cannot graft an ancestor
    on; None: every run of the store. Raises ``FileNotFoundError`` when ``env_id`` is neither designed nor
    library."""
    reader = RunReader(store)
    scope = named_runs(store, runs) if runs is not None else reader.runs()
    designs = reader.rows("designs", scope)
    designs = designs[designs["env_id"].notna()].sort_values("gen", kind="stable")
    designs = designs.drop_duplicates("env_id").set_index("env_id")  # its first design names its parent
    scores = reader.rows("env_scores", scope).sort_values("gen", kind="stable")
    scores = scores.drop_duplicates("env_id", keep="last").set_index("env_id")  # the latest generation's
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
