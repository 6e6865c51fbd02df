"""`spade envs list` and `spade envs show` give each design's designer reward from the reward stage
(``designer_rewards``: the raw value and the trained reward), joined by design and environment; a design
without a row there (invalid, or its generation's reward stage has not run) has none, not a zero."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
from samples import write_stage
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.store.artifacts import Store
from spade_core.store.schemas import SCHEMAS

runner = CliRunner()


def _fill(store: Store) -> None:
    """Generation 1: designs k1 (kept, trained), k2 (dropped), k3 (invalid); generation 2: k4, whose reward
    stage has not run."""
    designs, validations, scores = [], [], []
    made = [(1, "k1", "e1", True), (1, "k2", "e2", True), (1, "k3", "e3", False), (2, "k4", "e4", True)]
    for gen, design_id, env_id, ok in made:
        designs.append(
            {"design_id": design_id, "attempt": 0, "doc_id": "d", "group_id": "g", "skill": "optimization"}
            | {"kind": "game", "prompt": "p", "completion": "c", "code": f"class {design_id.upper()}: ..."}
            | {"env_id": env_id, "model_ref": "base", "policy_step": 0, "gen": gen}
        )
        validations.append(
            {"design_id": design_id, "attempt": 0, "env_id": env_id, "ok": ok, "error_type": None if ok else "trivial"}
            | {"message": None, "checks": {"parses": True}, "seconds": 0.1, "gen": gen}
        )
        scores.append(
            {"env_id": env_id, "design_id": design_id, "skill": "optimization", "win_rate": 0.5 if ok else 0.0}
            | {"r_hint": 0.75 if ok else 0.0, "r_no_hint": 0.5 if ok else 0.0, "regret": 0.25 if ok else 0.0}
            | {"hint_leaked": False, "gen": gen}
        )
    for table, rows in (("designs", designs), ("validations", validations), ("env_scores", scores)):
        frame = pd.DataFrame(rows)
        for field in SCHEMAS[table]:
            if field.name not in frame.columns:
                frame[field.name] = None
        for gen, part in frame.groupby("gen"):
            write_stage(store, "r", int(gen), f"x-{table}", {table: part.drop(columns="gen")})
    rewards = pd.DataFrame(
        [
            {"design_id": "k1", "env_id": "e1", "raw": 0.8, "dropped": False, "centred": 0.05, "reward": 1.6},
            {"design_id": "k2", "env_id": "e2", "raw": -0.1, "dropped": True, "centred": None, "reward": None},
        ]
    ).assign(skill="optimization", window_win_rate=0.5, regret=0.25, scale=32.0, train_step=2)
    write_stage(store, "r", 1, "reward", {"designer_rewards": rewards})


def test_envs_list_gives_the_trained_designer_reward(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    _fill(store)
    result = runner.invoke(app, ["envs", "list", "--store", str(tmp_path), "--json"])
    assert result.exit_code == 0, result.output
    rows = {r["env_id"]: r for r in json.loads(result.stdout)}
    got = {e: (r["designer_raw"], r["designer_reward"]) for e, r in rows.items()}
    assert got == {"e1": (0.8, 1.6), "e2": (-0.1, None), "e3": (None, None), "e4": (None, None)}
    assert "designer_reward" in runner.invoke(app, ["envs", "list", "--store", str(tmp_path)]).stdout


def test_envs_show_gives_the_trained_designer_reward(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    _fill(store)

    def shown(env_id: str) -> str:
        result = runner.invoke(app, ["envs", "show", env_id, "--store", str(tmp_path)])
        assert result.exit_code == 0, result.output
        return next(line for line in result.stdout.splitlines() if line.startswith("designer reward:"))

    assert shown("e1") == "designer reward: raw=0.800, trained=+1.600 at step 2"
    assert shown("e2") == "designer reward: raw=-0.100, dropped (raw < 0: never trained)"
    not_rewarded = "designer reward: n/a (not rewarded: invalid, every play broken, or its reward stage has not run)"
    assert shown("e3") == shown("e4") == not_rewarded
