"""The designer's windowed reward pinned against hand values and the authors' characterization vectors.

docs/DESIGN.md §7.2. Cases marked "authors:" reproduce the inputs and asserted outputs of the tests in the
authors' repository (github spade-rl/spade, ``tests/test_delayed_env_rewards.py`` and
``tests/test_game_utils.py``) with this project's code.
"""

from __future__ import annotations

import doctest
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from spade_core.config import ScoringConfig
from spade_core.method import designer_reward, learning_potential
from spade_core.method.designer_reward import (
    OUTPUT_COLUMNS,
    VARIANTS,
    WINDOW_COLUMNS,
    centre_per_skill,
    designer_rewards,
    drop_mask,
    env_reward_scale,
    raw_reward,
    window_inputs,
)
from spade_core.method.learning_potential import (
    LP_STATE_COLUMNS,
    LearningPotentialState,
    SkillEMA,
    learning_potential_raw,
    learning_potential_update,
    skill_window_means,
)
from spade_core.method.scoring import ScoringError, plateau

CFG = ScoringConfig()


@pytest.mark.parametrize("module", [designer_reward, learning_potential])
def test_docstring_examples_hold(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0


def envs_frame(rows: list[tuple[str, str, float, float, float]], **extra: list[object]) -> pd.DataFrame:
    """(env_id, skill, win_rate, r_no_hint_first, r_hint) rows."""
    frame = pd.DataFrame(rows, columns=["env_id", "skill", "win_rate", "r_no_hint_first", "r_hint"])
    for name, values in extra.items():
        frame[name] = values
    return frame


# ------------------------------------------------------------------------------------------------------------
# Window statistics
# ------------------------------------------------------------------------------------------------------------


def window_of(plays: list[tuple[str, float, int]]) -> pd.DataFrame:
    """The :func:`window_inputs` row of one environment (skill "logic") from its (condition, return, step) plays."""
    episodes = pd.DataFrame(
        [("e", *play) for play in plays], columns=["env_id", "condition", "episode_return", "policy_step"]
    )
    return window_inputs(episodes).assign(skill="logic")


def test_window_win_rate_pools_every_play_of_every_step() -> None:
    # Step 0: four wins, step 1: one loss. Pooled 4/5 = 0.8; a mean of step means would give 0.5.
    window = window_of([*[("no_hint", 1.0, 0)] * 4, ("no_hint", 0.0, 1)])
    assert window["win_rate"].tolist() == pytest.approx([0.8]) and window["n_no_hint"].tolist() == [5]


def test_regret_is_taken_against_the_first_step_only() -> None:
    # Hinted mean 0.75 minus the first step's no-hint mean 0.5 (the later step's 0.0 does not count).
    window = window_of(
        [("hint", 1.0, 0), ("hint", 0.5, 0), ("no_hint", 0.0, 0), ("no_hint", 1.0, 0), ("no_hint", 0.0, 1)]
    )
    out, _ = designer_rewards(window, "regret", CFG, 1.0)
    assert out["regret"].tolist() == pytest.approx([0.25])


def test_window_inputs_aggregates_episodes_by_step() -> None:
    episodes = pd.DataFrame(
        [
            # env a: steps 4 (first) and 5 of the window; a play whose model call failed and plays the
            # environment broke are left out whatever their return (and counted).
            ("a", "no_hint", 1.0, None, 4),
            ("a", "no_hint", 0.0, None, 4),
            ("a", "no_hint", 1.0, None, 5),
            ("a", "no_hint", 0.0, None, 5),
            ("a", "no_hint", 1.0, "model_error", 5),
            ("a", "no_hint", 1.0, "timeout", 5),
            ("a", "no_hint", 0.0, "exception", 3),  # broken: it does not make step 3 the window's first
            ("a", "hint", 1.0, None, 4),
            ("a", "hint", 0.5, None, 4),
            ("a", "hint", 0.0, "memory", 4),
            # env b: no hinted plays; its first step is 5 (nothing at 4).
            ("b", "no_hint", 0.25, None, 6),
            ("b", "no_hint", 0.75, None, 5),
            # env c: hinted plays only.
            ("c", "hint", 1.0, None, 4),
            # env d: the environment broke every no-hint play: no win rate, like c, but n_broken says why.
            ("d", "no_hint", 1.0, "contract_error", 4),
            ("d", "no_hint", 0.0, "jail_error", 5),
            ("d", "hint", 1.0, None, 4),
        ],
        columns=["env_id", "condition", "episode_return", "error_type", "policy_step"],
    )
    out = window_inputs(episodes).set_index("env_id")
    assert list(out.reset_index().columns) == list(WINDOW_COLUMNS)
    assert out.loc["a", "win_rate"] == pytest.approx(0.5)  # (1 + 0 + 1 + 0) / 4
    assert out.loc["a", "n_no_hint"] == 4
    assert out.loc["a", "r_no_hint_first"] == pytest.approx(0.5)
    assert out.loc["a", "r_hint"] == pytest.approx(0.75)
    assert out.loc["a", "n_hint"] == 2
    assert out.loc["a", "n_broken"] == 4
    assert out.loc["b", "win_rate"] == pytest.approx(0.5)
    assert out.loc["b", "r_no_hint_first"] == pytest.approx(0.75)
    assert math.isnan(out.loc["b", "r_hint"]) and out.loc["b", "n_hint"] == 0
    assert math.isnan(out.loc["c", "win_rate"]) and out.loc["c", "n_no_hint"] == 0
    assert math.isnan(out.loc["d", "win_rate"]) and out.loc["d", "n_no_hint"] == 0
    assert (out.loc["d", "n_broken"], out.loc["d", "n_hint"], out.loc["b", "n_broken"]) == (2, 1, 0)
    assert out["n_broken"].dtype == "int64"
    # Without an error_type column nothing is broken.
    clean = window_inputs(episodes[episodes["error_type"].isna()].drop(columns="error_type")).set_index("env_id")
    assert clean["n_broken"].tolist() == [0, 0, 0, 0]
    with pytest.raises(ScoringError, match="'d' has no finite window win rate"):  # the caller must drop it first
        designer_rewards(out.loc[["a", "d"]].reset_index().assign(skill="logic"), "blend", CFG, 1.0)
    with pytest.raises(ScoringError, match="unknown condition"):
        window_inputs(episodes.assign(condition="oracle"))
    with pytest.raises(ScoringError, match="lacks"):
        window_inputs(episodes.drop(columns="policy_step"))


# ------------------------------------------------------------------------------------------------------------
# Raw variants
# ------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("variant", "p", "r", "expected"),
    [
        ("blend", 0.5, 0.075, 0.4 * 0.5 + 0.6 * 1.0),  # 0.8
        ("blend", 0.3, 0.3, 0.4 * 1.0 + 0.6 * 0.6),  # regret clipped at 1: 0.76
        ("blend", 0.7, 0.03, 0.4 * 0.2 + 0.6 * 0.6),  # 0.44
        ("blend", 1.0, -0.2, 0.0),  # negative regret floored, plateau 0
        ("solve_rate", 0.45, 0.3, 1.0),
        ("solve_rate", 0.2, 0.3, 0.2),
        ("regret", 0.5, -0.25, 0.0),
        ("regret", 0.5, 0.25, 0.25),
        ("learnability", 0.25, 0.0, 0.75),
        ("learnability", 0.0, 0.5, 0.0),
        ("learnability", 1.0, 0.5, 0.0),
    ],
)
def test_raw_reward_hand_values(variant: str, p: float, r: float, expected: float) -> None:
    assert raw_reward(variant, p, r, CFG) == pytest.approx(expected)


def test_raw_reward_refuses_learning_potential_and_unknown_variants() -> None:
    with pytest.raises(ValueError, match="EMA state"):
        raw_reward("learning_potential", 0.5, 0.0, CFG)
    with pytest.raises(ValueError, match="unknown designer reward variant"):
        raw_reward("micro_lp", 0.5, 0.0, CFG)
    assert set(VARIANTS) == {"blend", "regret", "solve_rate", "learnability", "learning_potential"}


def test_paper_blend_is_never_negative_so_nothing_is_dropped() -> None:
    # Honest mirror of the authors: with the regret term clipped to [0, 1] the paper blend cannot go below 0.
    for p in np.linspace(-1.0, 1.0, 41):
        for r in np.linspace(-2.0, 2.0, 41):
            assert raw_reward("blend", float(p), float(r), CFG) >= 0.0


def test_drop_mask_only_for_blend_paths() -> None:
    raw = [-0.5, 0.0, 0.3]
    assert drop_mask("blend", raw).tolist() == [True, False, False]
    assert drop_mask("solve_rate", raw).tolist() == [True, False, False]
    for variant in ("regret", "learnability", "learning_potential"):
        assert drop_mask(variant, raw).tolist() == [False, False, False]


# ------------------------------------------------------------------------------------------------------------
# Centring and scale
# ------------------------------------------------------------------------------------------------------------


def test_centre_per_skill_excludes_dropped_samples_from_the_mean() -> None:
    out = centre_per_skill([0.9, 0.1, 0.4, 5.0, 0.7], ["a", "a", "a", "a", "b"], keep=[True, True, True, False, True])
    # skill a kept mean (0.9 + 0.1 + 0.4) / 3 = 0.4666..; the dropped 5.0 would have moved it to 1.6.
    assert out[:3] == pytest.approx([0.9 - 1.4 / 3, 0.1 - 1.4 / 3, 0.4 - 1.4 / 3])
    assert math.isnan(out[3])
    assert out[4] == 0.0  # a skill's only sample centres to 0
    all_dropped = centre_per_skill([1.0, 2.0], ["a", "a"], keep=[False, False])
    assert np.isnan(all_dropped).all()
    assert centre_per_skill([], []).tolist() == []
    with pytest.raises(ValueError):
        centre_per_skill([1.0], ["a", "b"])


def test_centring_does_not_divide_by_the_std() -> None:
    out = centre_per_skill([0.0, 0.02], ["a", "a"])
    assert out.tolist() == pytest.approx([-0.01, 0.01])  # a z-score would give [-1, 1]


@pytest.mark.parametrize(
    ("n_agent", "n_designer", "interval", "cap", "expected"),
    [
        (192, 24, 4, 50.0, 32.0),  # the paper's games setting: 192 / 24 * 4
        (192, 24, 8, 50.0, 50.0),  # tool use: 192 / 24 * 8 = 64, capped
        (192, 24, 6, 50.0, 48.0),  # below the cap
        (192, 24, 4, 20.0, 20.0),  # a lower cap
        (168, 24, 4, 50.0, 28.0),
        (0, 24, 4, 50.0, 1.0),  # no counts: 1.0
        # authors: tests/test_game_utils.py (compute_env_reward_scale(2, 8, 3) == 12, (0, 8, 3) == 1)
        (8, 2, 3, 50.0, 12.0),
        (8, 0, 3, 50.0, 1.0),
    ],
)
def test_env_reward_scale(n_agent: int, n_designer: int, interval: int, cap: float, expected: float) -> None:
    assert env_reward_scale(n_agent, n_designer, interval, cap=cap) == pytest.approx(expected)


def test_env_reward_scale_rejects_bad_interval_and_cap() -> None:
    with pytest.raises(ValueError):
        env_reward_scale(192, 24, 0)
    with pytest.raises(ValueError):
        env_reward_scale(192, 24, 4, cap=0.0)


# ------------------------------------------------------------------------------------------------------------
# designer_rewards on frames
# ------------------------------------------------------------------------------------------------------------


def test_blend_frame_hand_values_with_the_paper_scale() -> None:
    envs = envs_frame(
        [
            ("e1", "A", 0.5, 0.25, 0.325),  # R 0.075 -> 0.4 * 0.5 + 0.6 * 1   = 0.8
            ("e2", "A", 0.3, 0.0, 0.3),  # R 0.3   -> 0.4 * 1   + 0.6 * 0.6 = 0.76
            ("e3", "A", 1.0, 1.0, float("nan")),  # no hint: R 0 -> 0.0
            ("e4", "B", 0.2, 0.2, 0.1),  # R -0.1  -> 0 + 0.6 * 0.2 = 0.12
            ("e5", "B", 0.85, 0.9, 1.0),  # R 0.1   -> 0.4 * 2/3 + 0 = 0.2666..
        ],
        design_id=["d1", "d2", "d3", "d4", "d5"],
    )
    before = envs.copy()
    scale = env_reward_scale(192, 24, 4)
    out, state = designer_rewards(envs, "blend", CFG, scale)
    assert state is None
    pd.testing.assert_frame_equal(envs, before)  # the input is not modified
    assert list(out.columns) == [*before.columns, *OUTPUT_COLUMNS]
    assert out["design_id"].tolist() == ["d1", "d2", "d3", "d4", "d5"]
    assert out["regret"].tolist() == pytest.approx([0.075, 0.3, 0.0, -0.1, 0.1])
    assert out["raw"].tolist() == pytest.approx([0.8, 0.76, 0.0, 0.12, 0.4 * 2 / 3])
    assert not out["dropped"].any()
    # A: mean 0.52 -> [0.28, 0.24, -0.52]; B: mean 0.19333.. -> [-0.07333.., +0.07333..]; times 32.
    b = (0.4 * 2 / 3 - 0.12) / 2
    assert out["centred"].tolist() == pytest.approx([0.28, 0.24, -0.52, -b, b])
    assert out["reward"].tolist() == pytest.approx([8.96, 7.68, -16.64, -32 * b, 32 * b])


def test_solve_rate_and_learnability_frames_need_no_hint_columns() -> None:
    envs = pd.DataFrame({"env_id": ["a", "b", "c"], "skill": ["s", "s", "t"], "win_rate": [0.5, 0.2, 0.9]})
    out, _ = designer_rewards(envs, "solve_rate", CFG, 2.0)
    assert out["raw"].tolist() == pytest.approx([1.0, 0.2, 0.0])
    assert out["reward"].tolist() == pytest.approx([0.8, -0.8, 0.0])
    assert out["regret"].isna().all()
    out, _ = designer_rewards(envs, "learnability", CFG, 2.0)
    assert out["raw"].tolist() == pytest.approx([0.5, 0.8, 0.1])
    assert out["reward"].tolist() == pytest.approx([-0.3, 0.3, 0.0])
    with pytest.raises(ScoringError, match="r_hint"):
        designer_rewards(envs, "blend", CFG, 2.0)


def test_designer_rewards_rejects_bad_inputs() -> None:
    envs = envs_frame([("a", "s", 0.5, 0.5, 0.5)])
    with pytest.raises(ValueError, match="unknown designer reward variant"):
        designer_rewards(envs, "frontier", CFG, 1.0)
    with pytest.raises(ValueError, match="scale"):
        designer_rewards(envs, "blend", CFG, float("nan"))
    with pytest.raises(ScoringError, match="win rate"):
        designer_rewards(envs.assign(win_rate=float("nan")), "blend", CFG, 1.0)
    with pytest.raises(ScoringError, match="no no-hint plays"):
        designer_rewards(envs.assign(n_no_hint=0), "blend", CFG, 1.0)
    with pytest.raises(ScoringError, match="first-step"):
        designer_rewards(envs.assign(r_no_hint_first=float("nan")), "blend", CFG, 1.0)
    with pytest.raises(ValueError, match="lp_state"):
        designer_rewards(envs, "learning_potential", CFG, 1.0)


def test_window_inputs_feed_designer_rewards() -> None:
    # authors: test_blend_plateau_config_keeps_every_game_non_negative, their weights exactly: regret 1.0 and
    # plateau 1.0 (floored regret), env_reward_scale 1.0; their blend_raw, rewards and masked fraction.
    episodes = pd.DataFrame(
        [
            *[("g1", "no_hint", 1.0, step) for step in (0, 0, 1, 1)],  # easy: win 1.0, no hint
            *[("g2", "no_hint", 0.5, step) for step in (0, 0, 1, 1)],  # in band: win 0.5
            ("g2", "hint", 0.8, 0),
            *[("g3", "no_hint", 0.2, step) for step in (0, 0, 1, 1)],  # hard: win 0.2
            ("g3", "hint", 0.275, 0),
        ],
        columns=["env_id", "condition", "episode_return", "policy_step"],
    )
    envs = window_inputs(episodes).assign(skill=["logic", "logic", "math"])
    out, _ = designer_rewards(envs, "blend", ScoringConfig(regret_weight=1.0, plateau_weight=1.0), scale=1.0)
    assert [plateau(p) for p in out["win_rate"]] == pytest.approx([0.0, 1.0, 0.2])
    assert out["raw"].tolist() == pytest.approx([0.0, 2.0, 0.7])  # their blend_raw
    assert out["reward"].tolist() == pytest.approx([-1.0, 1.0, 0.0])
    assert not out["dropped"].any()  # their masked fraction 0.0


# ------------------------------------------------------------------------------------------------------------
# Authors' characterization vectors (tests/test_delayed_env_rewards.py)
# ------------------------------------------------------------------------------------------------------------


def test_authors_blend_default_weights_mask_negative_games() -> None:
    # authors: test_blend_default_weights_mask_negative_games. Their raw blends (regret unfloored + signed
    # micro-LP, terms the paper turns off) are [4.0, 0.0 | -3.666.., 0.5] for logic, logic, math, math.
    raw = [4.0, 0.0, -3.6666666666666665, 0.5]
    skills = ["logic", "logic", "math", "math"]
    dropped = drop_mask("blend", raw)
    assert dropped.tolist() == [False, False, True, False]
    reward = centre_per_skill(raw, skills, keep=~dropped) * 10.0
    assert reward[[0, 1, 3]].tolist() == pytest.approx([20.0, -20.0, 0.0])  # raw 0.0 is kept, not masked
    assert math.isnan(reward[2])  # never scored
    # The same test's window statistics of the teachable game g1 = {0: [0.0, 0.0], 1: [0.6, 0.6]}, hint 0.3.
    g1 = window_of(
        [("no_hint", 0.0, 0), ("no_hint", 0.0, 0), ("no_hint", 0.6, 1), ("no_hint", 0.6, 1), ("hint", 0.3, 0)]
    )
    out, _ = designer_rewards(g1, "regret", CFG, 1.0)
    assert (out["win_rate"].tolist(), out["regret"].tolist()) == (pytest.approx([0.3]), pytest.approx([0.3]))
    assert plateau(0.3) == pytest.approx(0.6)


def test_authors_blend_masking_boundary_is_strictly_negative() -> None:
    # authors: test_blend_masking_boundary_is_strictly_negative. Regret -1.5e-13, weight 0.5, scale 0.15.
    raw = 0.5 * (-1.5e-13 / 0.15)
    assert -1e-9 < raw < 0
    assert drop_mask("blend", [raw]).tolist() == [True]
    assert np.isnan(centre_per_skill([raw], ["logic"], keep=~drop_mask("blend", [raw]))).all()


def test_authors_regret_reports_zero_fractions_when_every_game_is_positive() -> None:
    # authors: test_regret_reports_zero_fractions_when_every_game_is_positive. Their windows are one flat list
    # per game, i.e. a one-step window, where the first step is the whole window.
    envs = envs_frame([("g1", "logic", 0.1, 0.1, 0.9), ("g2", "logic", 0.3, 0.3, 0.5)])
    out, _ = designer_rewards(envs, "regret", CFG, 2.0)
    assert out["raw"].tolist() == pytest.approx([0.8, 0.2])
    assert out["raw"].mean() == pytest.approx(0.5)  # their mean_regret
    assert out["reward"].tolist() == pytest.approx([0.6, -0.6])


def test_authors_regret_floors_negatives() -> None:
    # authors: test_regret_floors_negatives_and_penalizes_step_timeouts, its logic skill (the math skill's
    # step-timeout penalty of -0.5 and its game without plays are not mirrored here).
    envs = envs_frame([("g1", "logic", 0.2, 0.2, 0.8), ("g2", "logic", 0.5, 0.5, 0.1)])
    out, _ = designer_rewards(envs, "regret", CFG, 10.0)
    assert out["regret"].tolist() == pytest.approx([0.6, -0.4])
    assert out["raw"].tolist() == pytest.approx([0.6, 0.0])  # floored, not dropped
    assert not out["dropped"].any()
    assert out["reward"].tolist() == pytest.approx([3.0, -3.0])


def test_authors_delayed_baseline_rewards_are_centered_per_skill() -> None:
    # authors: test_delayed_baseline_rewards_are_centered_per_skill (trackers gamma 0.8 / 0.2 seeded with
    # logic 0.5, math 0.2; no update). g4 has no plays: raw 0.0.
    state = LearningPotentialState(0.8, 0.2).update({"logic": 0.5, "math": 0.2})
    win = [0.2, 1.0, 0.4, 0.0]
    skills = ["logic", "logic", "math", "math"]
    raw = learning_potential_raw(win, skills, state, n_plays=[2, 2, 2, 0])
    assert raw.tolist() == pytest.approx([0.3, 0.5, 0.2, 0.0])
    assert (centre_per_skill(raw, skills) * 10.0).tolist() == pytest.approx([-1.0, 1.0, 1.0, -1.0])
    assert state.baseline("logic") == pytest.approx(0.5)
    assert state.skills["logic"].mu_fast == state.skills["logic"].mu_slow  # no potential yet
    assert state.skills["math"] == SkillEMA(0.2, 0.2, 1)


def test_authors_delayed_update_lp_advances_trackers_before_baselines() -> None:
    # authors: test_delayed_baseline_update_lp_advances_trackers_before_baselines (seeded logic 0.0; plays
    # g1 [1, 1], g2 [0, 0], g3 [0.5, 0.5]; skill mean 0.5).
    before = LearningPotentialState(0.8, 0.2).update({"logic": 0.0})
    envs = pd.DataFrame(
        {"env_id": ["g1", "g2", "g3"], "skill": "logic", "win_rate": [1.0, 0.0, 0.5], "n_no_hint": [2, 2, 2]}
    )
    out, after = designer_rewards(envs, "learning_potential", CFG, 10.0, lp_state=before)
    assert after is not None
    assert after.skills["logic"].mu_fast == pytest.approx(0.4)
    assert after.skills["logic"].mu_slow == pytest.approx(0.1)
    assert after.skills["logic"].count == 2  # seed + the one delayed update
    assert out["reward"].tolist() == pytest.approx([4.333333333333333, -3.6666666666666665, -0.6666666666666666])
    assert out["raw"].mean() == pytest.approx(0.4666666666666667)
    logic = after.skills["logic"]  # (mu_fast - mu_slow) / (2 (gamma_fast - gamma_slow))
    assert (logic.mu_fast - logic.mu_slow) / (2 * (0.8 - 0.2)) == pytest.approx(0.25)
    assert before.skills["logic"] == SkillEMA(0.0, 0.0, 1)  # the input state is untouched


# ------------------------------------------------------------------------------------------------------------
# Learning potential with the paper's gammas, and its state across a resume
# ------------------------------------------------------------------------------------------------------------

GEN1 = pd.DataFrame(
    {
        "env_id": ["a1", "a2", "b1"],
        "skill": ["A", "A", "B"],
        "win_rate": [0.2, 0.6, 0.3],
        "n_no_hint": [8, 24, 32],
    }
)
GEN2 = pd.DataFrame({"env_id": ["a3", "a4"], "skill": ["A", "A"], "win_rate": [0.9, 0.7], "n_no_hint": [8, 8]})


def test_learning_potential_paper_gammas_hand_values() -> None:
    state0 = LearningPotentialState()
    assert (state0.gamma_fast, state0.gamma_slow) == (0.98, 0.85)
    # Generation 1: A's play-weighted mean (0.2 * 8 + 0.6 * 24) / 32 = 0.5 is the first observation: both EMAs.
    assert skill_window_means(GEN1["win_rate"], list(GEN1["skill"]), GEN1["n_no_hint"]) == pytest.approx(
        {"A": 0.5, "B": 0.3}
    )
    out1, state1 = designer_rewards(GEN1, "learning_potential", CFG, 32.0, lp_state=state0)
    assert state1 is not None
    a = state1.skills["A"]
    assert (a.mu_fast, a.mu_slow, a.count) == (pytest.approx(0.5), pytest.approx(0.5), 1)
    assert out1["raw"].tolist() == pytest.approx([0.3, 0.1, 0.0])
    assert out1["reward"].tolist() == pytest.approx([3.2, -3.2, 0.0])
    # Generation 2: A observes 0.8. mu_slow = 0.15 * 0.5 + 0.85 * 0.8 = 0.755, mu_fast = 0.02 * 0.5 + 0.98 * 0.8
    # = 0.794; raws |0.9 - 0.755| = 0.145, |0.7 - 0.755| = 0.055, mean 0.1. B is absent and keeps its state.
    out2, state2 = designer_rewards(GEN2, "learning_potential", CFG, 32.0, lp_state=state1)
    assert state2 is not None
    assert state2.skills["A"].mu_slow == pytest.approx(0.755)
    assert state2.skills["A"].mu_fast == pytest.approx(0.794)
    assert state2.skills["A"].count == 2
    assert state2.skills["B"] == state1.skills["B"]
    assert out2["raw"].tolist() == pytest.approx([0.145, 0.055])
    assert out2["reward"].tolist() == pytest.approx([1.44, -1.44])
    a = state2.skills["A"]
    assert (a.mu_fast - a.mu_slow) / (2 * (state2.gamma_fast - state2.gamma_slow)) == pytest.approx(0.039 / 0.26)
    assert not out2["dropped"].any()


def test_learning_potential_state_continues_across_a_parquet_round_trip(tmp_path: Path) -> None:
    state0 = LearningPotentialState()
    # In one process: two generations back to back.
    _, s1 = designer_rewards(GEN1, "learning_potential", CFG, 32.0, lp_state=state0)
    straight, s2 = designer_rewards(GEN2, "learning_potential", CFG, 32.0, lp_state=s1)
    # Resumed: generation 1's state stored as Parquet, read back by a fresh process, then generation 2.
    assert s1 is not None
    path = tmp_path / "lp_state.parquet"
    s1.to_frame().to_parquet(path, index=False)
    stored = pd.read_parquet(path)
    assert list(stored.columns) == list(LP_STATE_COLUMNS)
    reloaded = LearningPotentialState.from_frame(stored)
    assert reloaded == s1
    resumed, s2_resumed = designer_rewards(GEN2, "learning_potential", CFG, 32.0, lp_state=reloaded)
    assert s2_resumed == s2
    pd.testing.assert_frame_equal(resumed, straight)
    # A resume that forgot the state would start over and give a different reward.
    fresh, _ = designer_rewards(GEN2, "learning_potential", CFG, 32.0, lp_state=LearningPotentialState())
    assert fresh["reward"].tolist() != pytest.approx(straight["reward"].tolist())


def test_learning_potential_state_frame_rules() -> None:
    empty = LearningPotentialState().to_frame()
    assert list(empty.columns) == list(LP_STATE_COLUMNS) and len(empty) == 0
    assert LearningPotentialState.from_frame(empty) == LearningPotentialState()
    frame = LearningPotentialState().update({"b": 0.1, "a": 0.4}).to_frame()
    assert frame["skill"].tolist() == ["a", "b"]
    assert frame["count"].dtype == np.int64
    with pytest.raises(ValueError, match="gamma"):
        LearningPotentialState.from_frame(frame, gamma_fast=0.99, gamma_slow=0.95)
    with pytest.raises(ValueError, match="repeats"):
        LearningPotentialState.from_frame(pd.concat([frame, frame]))
    with pytest.raises(ValueError, match="lacks"):
        LearningPotentialState.from_frame(frame.drop(columns="mu_slow"))
    with pytest.raises(ValueError, match="gamma_slow < gamma_fast"):
        LearningPotentialState(gamma_fast=0.85, gamma_slow=0.98)
    with pytest.raises(TypeError):
        LearningPotentialState().skills["x"] = SkillEMA(0.0, 0.0, 1)  # type: ignore[index]


def test_learning_potential_update_is_pure_and_skips_skills_without_plays() -> None:
    state = LearningPotentialState(0.8, 0.2)
    raw, new = learning_potential_update([0.4, 0.9], ["a", "b"], state, n_plays=[4, 0])
    assert state.skills == {}
    assert set(new.skills) == {"a"}  # b had no plays: no observation, raw 0
    assert raw.tolist() == pytest.approx([0.0, 0.0])
