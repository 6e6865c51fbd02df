"""The RLVE fixed pool of one generation (``designer.fixed_pool: rlve:...``): one row per RLVE environment.

Each row is a jail bundle (:func:`spade_core.envs.rlve.bundle`) of the environment at the difficulty its
plays use this generation, drawn from its sliding window (:mod:`spade_core.envs.rlve_difficulty`), and the
window comes from every earlier play of the run in the store. The pool table therefore records the
controller per generation, queryable in SQL:

- ``env_id`` = ``rlve:NAME@dD``: the RLVE environment and the difficulty ``D`` its plays use (the episodes
  carry the same ``env_id``);
- ``skill`` = :data:`SKILL` for every RLVE environment: RLVE has no skill taxonomy, and the memory and the
  scores need one of the project's skills;
- ``source`` = ``fixed`` (as every fixed pool's), ``kind`` = ``game``, ``design_id`` null;
- ``code``: the bundle, with one problem per environment and generation that all its plays share (the
  authors' ``--spade-fixed-env-same-problem``: the plays of an environment are a GRPO group on one problem).

The window itself is not stored: it is a pure function of the stored plays (:func:`windows_by_gen`).

The authors rebuild the environment set and draw difficulties at every rollout step
(``--spade-game-regeneration-interval 1``); here the pool is built once per generation, so the preset runs
one step per generation (``training.steps_per_generation: 1``) and a generation is a step.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import pandas as pd

from spade_core.envs import rlve
from spade_core.envs.rlve_difficulty import Window, sample_difficulty, windows
from spade_core.hashing import short_hash
from spade_core.store.artifacts import Store
from spade_core.store.reader import RunReader

if TYPE_CHECKING:
    from spade_core.config import SpadeConfig

COLUMNS = ["env_id", "design_id", "skill", "kind", "code", "source"]
SOURCE = "fixed"
SKILL = "mathematical_reasoning"
_ROLLOUT = re.compile(r"rollout-s\d+")  # the rollout stage's instances (docs/DESIGN.md §10.2)


def _plays(store: Store, run_id: str, before_gen: int) -> pd.DataFrame:
    """gen, env_id, episode_return of the run's no-hint RLVE plays before ``before_gen``, in play order
    (generation, step, environment, episode), error rows left out.

    Only the files the rollout stages' markers list count (``rollout-s{k}``): plays another command wrote
    into the run (``spade rollout --run-id`` writes ``rollout-cli``) are no training plays and move no window.
    """
    columns = ["env_id", "episode_return", "condition", "error_type", "policy_step", "episode_id"]
    frame = RunReader(store).rows(
        "episodes",
        [run_id],
        stages=lambda stage: _ROLLOUT.fullmatch(stage) is not None,
        gens=lambda gen: gen < before_gen,
        columns=columns,
    )
    frame = frame[
        (frame["condition"] == "no_hint") & frame["error_type"].isna() & frame["env_id"].str.startswith("rlve:")
    ]
    frame = frame.sort_values(["gen", "policy_step", "env_id", "episode_id"], kind="stable")
    return frame[["gen", "env_id", "episode_return"]].reset_index(drop=True)


def _outcomes(frame: pd.DataFrame) -> list[tuple[str, int, bool]]:
    played = []
    for env_id, episode_return in zip(frame["env_id"], frame["episode_return"], strict=True):
        parsed = rlve.parse_env_id(env_id)
        if parsed is not None:
            played.append((parsed[0], parsed[1], bool(episode_return > 0)))
    return played


def controller(designer: dict[str, Any]) -> dict[str, Any]:
    """The sliding-window settings of a config's ``designer`` section (``rlve_*``), as :func:`windows` takes
    them; a setting the section lacks keeps the authors' value.

    >>> controller({"rlve_tau_num": 8, "rlve_controller": "rlve"})
    {'tau_num': 8, 'variant': 'rlve'}
    """
    keys = {
        "rlve_tau_acc": "tau_acc",
        "rlve_tau_num": "tau_num",
        "rlve_d_delta": "d_delta",
        "rlve_controller": "variant",
    }
    return {name: designer[key] for key, name in keys.items() if key in designer}


def outcomes(store: Store, run_id: str, before_gen: int) -> list[tuple[str, int, bool]]:
    """(name, difficulty, success) of the run's no-hint RLVE plays before ``before_gen``, in play order;
    error rows are left out, success is return > 0 (the authors' reward > 0)."""
    return _outcomes(_plays(store, run_id, before_gen))


def difficulty_history(store: Store, run_id: str, settings: dict[str, Any] | None = None) -> pd.DataFrame:
    """Per generation and RLVE environment of a run: the difficulty its plays used (from the pool table) and
    the controller's window ``[low, high]`` it was drawn from (refolded from the plays before it).

    Columns: gen, name, difficulty, low, high; empty for a run without RLVE pools. ``settings``: the run's
    controller settings (:func:`controller`; default: the authors').
    """
    settings = settings or {}
    pool = RunReader(store).query(
        "select gen, env_id from pool where run_id = ? and source = ? and starts_with(env_id, 'rlve:') "
        "order by gen, env_id",
        [run_id, SOURCE],
    )
    columns = ["gen", "name", "difficulty", "low", "high"]
    if pool.empty:
        return pd.DataFrame(columns=columns)
    parsed = [rlve.parse_env_id(e) for e in pool["env_id"]]
    pool = pool.assign(name=[p[0] if p else None for p in parsed], difficulty=[p[1] if p else None for p in parsed])
    names = tuple(dict.fromkeys(pool["name"].dropna()))
    plays = _plays(store, run_id, int(pool["gen"].max()) + 1)
    state = windows(names, [], **settings)
    history = []
    for gen, group in pool.groupby("gen", sort=True):
        for row in group.dropna(subset=["name"]).itertuples():
            window = state[str(row.name)]
            history.append((int(gen), row.name, int(row.difficulty), window.low, window.high))
        state = windows(names, _outcomes(plays[plays["gen"] == gen]), start=state, **settings)
    return pd.DataFrame(history, columns=columns)


def rows(names: tuple[str, ...], state: dict[str, Window], key: str) -> pd.DataFrame:
    """Pool rows of ``names`` at difficulties drawn from their windows, each with the one problem all its
    plays share (``key`` seeds both draws)."""
    built = []
    for name in names:
        window = state[name]
        difficulty = sample_difficulty(window, f"{key}:{name}")
        problem_seed = int(short_hash(f"{key}:{name}:problem", 8), 16)
        built.append(
            {
                "env_id": rlve.env_id(name, difficulty),
                "design_id": None,
                "skill": SKILL,
                "kind": "game",
                "code": rlve.bundle(name, difficulty, problem_seed=problem_seed),
                "source": SOURCE,
            }
        )
    return pd.DataFrame(built, columns=COLUMNS)


def rlve_pool(cfg: SpadeConfig, store: Store, run_id: str, gen: int) -> pd.DataFrame:
    """Generation ``gen``'s RLVE pool; an unknown name is a :class:`~spade_core.envs.rlve.RlveNameError`
    before anything is written."""
    names = rlve.resolve(cfg.designer.fixed_pool or "")
    settings = controller(cfg.designer.model_dump())
    plays = _plays(store, run_id, gen)
    state = windows(names, [], **settings)
    for earlier in range(1, gen):  # one generation = one rollout: RLVE's own controller checks once per rollout
        state = windows(names, _outcomes(plays[plays["gen"] == earlier]), start=state, **settings)
    return rows(names, state, f"{cfg.seed}:{run_id}:{gen}")
