"""The pool: the environments a generation plays (docs/DESIGN.md §7 step 5).

New valid designs (one row per env_id), plus ``rollout.replay_envs`` environments replayed from the memory
of ``gen - 1`` (PLR-style, beyond the paper), plus the first ``rollout.starter_envs`` starter environments
— or, for the fixed-environment baseline (``designer.fixed_pool``), the seed library, the starter
environments, the valid environments of a stored run, an export's environments (``spade envs export``), or
RLVE's environments at the difficulties of their controller (:mod:`spade_core.envs.rlve_pool`).
"""

from __future__ import annotations

import pandas as pd

from spade_core.config import SpadeConfig
from spade_core.designer.memory import Memory
from spade_core.envs.export import export_ids, read_export
from spade_core.envs.rlve_pool import rlve_pool
from spade_core.envs.seeds import SeedEnv, load_seed_envs, load_starter_envs
from spade_core.store.artifacts import Store
from spade_core.store.reader import RunReader

COLUMNS = ["env_id", "design_id", "skill", "kind", "code", "source"]


def designed_pool(designs: pd.DataFrame, memory: Memory, replay_envs: int) -> pd.DataFrame:
    """Valid designs (``final_designs`` rows; first design of each env_id) then the memory's replays."""
    valid = designs[designs["ok"]].assign(source="design")
    frame = valid[COLUMNS].drop_duplicates("env_id")
    replay = memory.replay(replay_envs, exclude=set(frame["env_id"]))
    extra = pd.DataFrame(
        [
            {
                "env_id": e.env_id,
                "design_id": None,
                "skill": e.skill,
                "kind": e.kind,
                "code": e.code,
                "source": "replay",
            }
            for e in replay
        ],
        columns=COLUMNS,
    )
    return pd.concat([frame, extra], ignore_index=True) if not extra.empty else frame.reset_index(drop=True)


def library_rows(envs: list[SeedEnv], source: str) -> pd.DataFrame:
    """Pool rows for library environments (seeds or starters), tagged with ``source``."""
    rows = [
        {"env_id": e.env_id, "design_id": None, "skill": e.skill, "kind": e.kind, "code": e.code, "source": source}
        for e in envs
    ]
    return pd.DataFrame(rows, columns=COLUMNS)


def with_starters(pool: pd.DataFrame, count: int) -> pd.DataFrame:
    """``pool`` plus the first ``count`` starter environments not already in it (source ``starter``)."""
    starters = library_rows(load_starter_envs(count), "starter") if count else pd.DataFrame(columns=COLUMNS)
    starters = starters[~starters["env_id"].isin(pool["env_id"])]
    return pd.concat([pool, starters], ignore_index=True) if not starters.empty else pool


def fixed_pool(cfg: SpadeConfig, store: Store, run_id: str, gen: int) -> pd.DataFrame:
    """The fixed-environment baseline's pool: the seed library, the starters, a stored run's valid envs, an
    export's environments (read each time a generation's pool is built), or RLVE's (whose controller state is
    read from ``store``, as a stored run's pool is)."""
    source = cfg.designer.fixed_pool or "seeds"
    if source.startswith("rlve:"):
        return rlve_pool(cfg, store, run_id, gen)
    if source.startswith("export:"):
        exported = read_export(source.removeprefix("export:"), endpoint_url=cfg.store.endpoint_url)
        export_ids(exported)
        frame = exported.sort_values("env_id", kind="stable")
        return frame.assign(design_id=None, source="fixed")[COLUMNS].reset_index(drop=True)
    if source == "seeds":
        return library_rows(load_seed_envs(), "fixed")
    if source == "starters":
        return library_rows(load_starter_envs(), "fixed")
    run = source.removeprefix("run:")
    frame = RunReader(store).rows("pool", [run], columns=COLUMNS)  # the pool and top-up stages' files
    frame = frame[frame["source"] == "design"]
    if frame.empty:
        raise ValueError(f"designer.fixed_pool {source!r}: run {run!r} has no valid environments in the store")
    frame = frame.sort_values("env_id", kind="stable").drop_duplicates("env_id")
    return frame.assign(design_id=None, source="fixed")[COLUMNS].reset_index(drop=True)
