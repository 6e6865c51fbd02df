"""The reward stage over a stored generation (no model): window win rates over the K steps, first-step
regret, per-skill centring, the scale, the delay, a leaking hint, a broken environment, and the
learning-potential state carried to the next generation."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from samples import ROWS, as_stage, write_stage

from spade_core.config import load_config
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.stages import reward
from spade_core.store.artifacts import Store
from spade_core.train.step import due_designs

# Three valid designs (two optimization, one causal_inference) and one invalid; K = 2 steps, 2 no-hint plays
# per env per step, 2 hinted plays at step 0.
DESIGNS = [
    ("d1", "e1", "optimization", True),
    ("d2", "e2", "optimization", True),
    ("d3", "e3", "causal_inference", True),
]
DESIGNS += [("d4", None, "optimization", False)]
# (env, step) -> no-hint returns; env -> hinted returns (step 0 only)
NO_HINT = {
    ("e1", 0): [1.0, 0.0],
    ("e1", 1): [1.0, 1.0],
    ("e2", 0): [0.0, 0.0],
    ("e2", 1): [0.0, 1.0],
    ("e3", 0): [0.0, 0.0],
    ("e3", 1): [0.0, 0.0],
}
HINT = {"e1": [1.0, 1.0], "e2": [1.0, 0.0], "e3": [1.0, 1.0]}


# Two more valid designs of optimization that the novelty stage refused: a copy of its parent and one too close
# to a known environment (design, env, the novelty check).
REFUSED = [("d5", "e5", "parameters"), ("d6", "e6", "embedding")]


def _store_generation(  # type: ignore[no-untyped-def]
    store: Store, run: str, gen: int, leaked: set[str] = frozenset(), broken: str | None = None, refused=False
):
    designs, validations, pool, episodes, hints = [], [], [], [], []
    listed = DESIGNS + ([(d, e, "optimization", True) for d, e, _ in REFUSED] if refused else [])
    for design_id, env_id, skill, ok in listed:
        code = f"class {design_id.upper()}: ..." if ok else None
        row = ROWS["designs"] | {"design_id": design_id, "env_id": env_id, "skill": skill, "code": code}
        designs.append(row | {"kind": "game", "group_id": design_id})
        verdict = {"ok": ok, "error_type": None if ok else "syntax_error", "message": None, "env_id": env_id}
        validations.append(ROWS["validations"] | {"design_id": design_id, "attempt": 0} | verdict)
        if ok and env_id not in {e for _, e, _ in REFUSED}:
            pool.append(ROWS["pool"] | {"env_id": env_id, "design_id": design_id, "skill": skill, "code": code})
            hints.append(ROWS["hints"] | {"env_id": env_id, "leaks_solution": env_id in leaked})
    for (env_id, step), returns in NO_HINT.items():
        for p, r in enumerate(returns):
            error = "exception" if env_id == broken else None
            row = {"episode_id": f"{env_id}-{step}-{p}", "env_id": env_id, "condition": "no_hint", "seed": p}
            episodes.append((step, ROWS["episodes"] | row | {"episode_return": r, "error_type": error}))
    for env_id, returns in HINT.items():
        for p, r in enumerate(returns):
            row = {"episode_id": f"{env_id}-h-{p}", "env_id": env_id, "condition": "hint", "seed": 100 + p}
            episodes.append((0, ROWS["episodes"] | row | {"episode_return": r}))
    write_stage(store, run, gen, "design", {"designs": pd.DataFrame(designs)})
    write_stage(store, run, gen, "validate", {"validations": pd.DataFrame(validations)})
    if refused:
        rows = [{"design_id": d, "attempt": 0, "env_id": e, "novel": False, "check": c} for d, e, c in REFUSED]
        novelty = pd.DataFrame(rows).assign(similarity=1.0, threshold=0.9)
        write_stage(store, run, gen, "novelty", {"novelty": novelty})
    write_stage(store, run, gen, "pool", {"pool": pd.DataFrame(pool)})
    write_stage(store, run, gen, "hint", {"hints": pd.DataFrame(hints)})
    for step in (0, 1):
        frame = pd.DataFrame([e for s, e in episodes if s == step]).assign(policy_step=(gen - 1) * 2 + step)
        write_stage(store, run, gen, f"rollout-s{step}", {"episodes": frame})


def _rewards(tmp_path: Path, *overrides: str, gen: int = 1, **kwargs) -> tuple[dict, pd.DataFrame]:  # type: ignore[no-untyped-def]
    cfg = load_config("tiny", overrides=[f"store.root={tmp_path}", "rollout.plays_no_hint=2", *overrides])
    store = Store(str(tmp_path))
    _store_generation(store, "r", gen, **kwargs)
    ctx = GenerationContext(cfg, store, "r", gen)
    # With its marker, as a finished stage: the next generation's reward reads the state the marker lists.
    summary = as_stage(ctx, "reward", lambda run: reward.run(run, None))
    frame = store.read_table("designer_rewards", "r", gen, stages=["reward"]).set_index("design_id")
    return summary, frame


def test_blend_over_the_window_centred_per_skill_and_scaled(tmp_path: Path) -> None:
    summary, frame = _rewards(tmp_path)
    # Window win rates: e1 3/4, e2 1/4, e3 0. Regret = hinted mean - first-step no-hint mean:
    # e1 1 - 0.5 = 0.5, e2 0.5 - 0 = 0.5, e3 1 - 0 = 1.
    assert frame.loc[["d1", "d2", "d3"], "window_win_rate"].tolist() == [0.75, 0.25, 0.0]
    assert frame.loc[["d1", "d2", "d3"], "regret"].tolist() == [0.5, 0.5, 1.0]
    # blend = 0.4 * clip(regret / 0.15, 0, 1) + 0.6 * plateau(p): plateau(0.75) = 0.4, plateau(0.25) = 0.4,
    # plateau(0) = 0 -> 0.64, 0.64, 0.4.
    assert frame.loc[["d1", "d2", "d3"], "raw"].tolist() == pytest.approx([0.64, 0.64, 0.4])
    # Centred per skill (no std division): optimization 0.64 - 0.64 = 0 twice; causal_inference alone: 0.
    assert frame["centred"].tolist() == pytest.approx([0.0, 0.0, 0.0])
    # Scale min(n_agent / n_designer * K, 50) = 3 envs * 2 plays / 3 valid designs * 2 = 4; trained at 0 + D = 2.
    assert set(frame["scale"]) == {4.0} and set(frame["train_step"]) == {2}
    assert "d4" not in frame.index and summary["failed_prompts"] == 1 and summary["rewarded"] == 3


def test_solve_rate_centres_unequal_rewards_and_a_leaking_hint_has_no_regret_term(tmp_path: Path) -> None:
    _, frame = _rewards(tmp_path, "scoring.designer_reward=regret", leaked={"e2"})
    # regret variant: max(0, regret): e1 0.5, e2 0 (its hint leaked), e3 1.0
    assert frame.loc[["d1", "d2", "d3"], "raw"].tolist() == [0.5, 0.0, 1.0]
    # optimization mean 0.25 -> +0.25 / -0.25; times the scale 4
    assert frame.loc[["d1", "d2"], "reward"].tolist() == pytest.approx([1.0, -1.0])


def test_a_design_whose_plays_all_broke_is_not_rewarded(tmp_path: Path) -> None:
    summary, frame = _rewards(tmp_path, broken="e2")
    assert "d2" not in frame.index and summary["broken_envs"] == ["e2"]
    assert frame.loc["d1", "centred"] == pytest.approx(0.0)  # alone in its skill now


def test_learning_potential_state_continues_in_the_next_generation(tmp_path: Path) -> None:
    _rewards(tmp_path, "scoring.designer_reward=learning_potential", gen=1)
    state = Store(str(tmp_path)).read_table("designer_lp_state", "r", 1, stages=["reward"])
    # The first observation sets both EMAs to the skill's window mean: optimization (3 + 1) / 8 = 0.5.
    opt = state.set_index("skill").loc["optimization"]
    assert (opt["mu_fast"], opt["mu_slow"], opt["count"]) == (0.5, 0.5, 1)
    _, frame = _rewards(tmp_path, "scoring.designer_reward=learning_potential", gen=2)
    state2 = Store(str(tmp_path)).read_table("designer_lp_state", "r", 2, stages=["reward"]).set_index("skill")
    assert state2.loc["optimization", "count"] == 2  # continued from generation 1's stored state
    # raw = |window mean of the env - mu_slow|: mu_slow stays 0.5 (same observation), e1 0.25, e2 0.25.
    assert frame.loc[["d1", "d2"], "raw"].tolist() == pytest.approx([0.25, 0.25])


def test_a_parent_copy_is_rewarded_only_with_parent_copy_raw(tmp_path: Path) -> None:
    summary, frame = _rewards(tmp_path / "authors", refused=True)
    assert {"d5", "d6"}.isdisjoint(frame.index) and summary["parent_copies"] == 0  # the authors: no sample
    summary, frame = _rewards(tmp_path / "ours", "scoring.parent_copy_raw=0", refused=True)
    # The copy d5 joins optimization with raw 0 and no win rate; d6, refused as too close to a known
    # environment (not its parent), stays out. Optimization: 0.64, 0.64, 0 -> mean 0.4267.
    assert "d6" not in frame.index and summary["parent_copies"] == 1
    assert frame.loc["d5", "raw"] == 0.0 and pd.isna(frame.loc["d5", "window_win_rate"])
    assert frame.loc[["d1", "d2", "d5"], "centred"].tolist() == pytest.approx([0.64 / 3, 0.64 / 3, -1.28 / 3])
    # The copy is a trained sample, so it counts in n_designer: 3 envs * 2 plays / 4 designs * K 2 = 3.
    assert set(frame["scale"]) == {3.0} and frame.loc["d5", "reward"] == pytest.approx(-1.28)
    # The trainer takes it at its train step with the valid designs.
    cfg = load_config("tiny", overrides=[f"store.root={tmp_path / 'ours'}", "scoring.parent_copy_raw=0"])
    due = due_designs(cfg, Store(str(tmp_path / "ours")), "r", 2).set_index("design_id")
    assert sorted(due.index) == ["d1", "d2", "d3", "d5"] and due.loc["d5", "reward"] == pytest.approx(-1.28)
    assert due.loc["d5", "error_type"] == "not_novel"
