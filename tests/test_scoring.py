"""Scoring formulas pinned against hand-computed values (docs/DESIGN.md §7 step 7)."""

from __future__ import annotations

import doctest
import typing

import pandas as pd
import pytest

from sandbox.outcome import ENV_ERROR_TYPES
from spade_core.config import ScoringConfig
from spade_core.method import scoring
from spade_core.method.scoring import (
    DESIGNER_REWARDS,
    ScoringError,
    blend_reward,
    learnability_reward,
    plateau,
    regret,
    regret_reward,
    score_environments,
    solve_rate_reward,
    win_rate,
)
from spade_core.store.schemas import SCHEMAS, to_arrow

CFG = ScoringConfig()


def test_docstring_examples_hold() -> None:
    result = doctest.testmod(scoring)
    assert result.attempted > 0 and result.failed == 0


@pytest.mark.parametrize(
    ("p", "expected"),
    [(0.4, 1.0), (0.6, 1.0), (0.5, 1.0), (0.3, 0.6), (0.15, 0.0), (0.7, 0.6), (0.85, 0.0), (0.0, 0.0), (1.0, 0.0)],
)
def test_plateau_is_one_inside_and_falls_linearly_over_a_quarter(p: float, expected: float) -> None:
    assert plateau(p) == pytest.approx(expected)


def test_plateau_uses_its_edges_and_falloff() -> None:
    assert plateau(0.2, low=0.3, high=0.5, falloff=0.5) == pytest.approx(0.8)
    assert plateau(0.75, low=0.3, high=0.5, falloff=0.5) == pytest.approx(0.5)


def test_plateau_rejects_inverted_edges_and_zero_falloff() -> None:
    with pytest.raises(ValueError, match=r"low=0\.6"):
        plateau(0.5, low=0.6, high=0.4)
    with pytest.raises(ValueError, match="falloff=0"):
        plateau(0.5, falloff=0)


def test_win_rate_is_the_mean_no_hint_return() -> None:
    assert win_rate([1.0, 0.0, 0.0, 0.5]) == pytest.approx(0.375)


def test_win_rate_of_no_plays_is_an_error() -> None:
    with pytest.raises(ScoringError, match="undefined"):
        win_rate([])


def test_regret_is_hint_mean_minus_no_hint_mean_and_may_be_negative() -> None:
    assert regret([1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]) == pytest.approx(0.25)
    assert regret([0.0, 0.0], [1.0, 0.0]) == pytest.approx(-0.5)


def test_regret_without_hinted_plays_is_zero() -> None:
    assert regret([], [1.0, 0.0]) == 0.0


@pytest.mark.parametrize(("r", "term"), [(-0.1, 0.0), (0.0, 0.0), (0.075, 0.5), (0.15, 1.0), (0.3, 1.0)])
def test_blend_clips_regret_over_its_scale(r: float, term: float) -> None:
    # win rate 0 puts the plateau term at 0, win rate 0.5 at 1: blend = 0.4 * term (+ 0.6).
    assert blend_reward(0.0, r, CFG) == pytest.approx(0.4 * term)
    assert blend_reward(0.5, r, CFG) == pytest.approx(0.4 * term + 0.6)


def test_blend_mixes_both_terms() -> None:
    assert blend_reward(0.3, 0.075, CFG) == pytest.approx(0.4 * 0.5 + 0.6 * 0.6)  # 0.56
    assert blend_reward(0.85, 0.3, CFG) == pytest.approx(0.4)


def test_blend_takes_every_constant_from_the_config() -> None:
    cfg = ScoringConfig(
        regret_weight=0.5, plateau_weight=0.25, regret_scale=0.1, plateau_low=0.2, plateau_high=0.3, plateau_falloff=0.5
    )
    # regret term clip(0.05 / 0.1) = 0.5; plateau(0.55) = 1 - 0.25 / 0.5 = 0.5
    assert blend_reward(0.55, 0.05, cfg) == pytest.approx(0.5 * 0.5 + 0.25 * 0.5)


def test_blend_weights_are_independent_as_the_authors() -> None:
    # authors (spade/core/utils/delayed_env_rewards.py, test_blend_plateau_config_keeps_every_game_non_negative):
    # regret weight 1.0 and plateau weight 1.0, floored regret; blend_raw [0.0, 2.0, 0.7] for
    # (win 1.0, regret -1.0), (win 0.5, regret 0.3), (win 0.2, regret 0.075).
    both = ScoringConfig(regret_weight=1.0, plateau_weight=1.0)
    got = [blend_reward(p, r, both) for p, r in [(1.0, -1.0), (0.5, 0.3), (0.2, 0.075)]]
    assert got == pytest.approx([0.0, 2.0, 0.7])
    # Each weight scales its own term only: with the plateau off, blend is the clipped regret term alone.
    assert blend_reward(0.5, 0.075, ScoringConfig(regret_weight=1.0, plateau_weight=0.0)) == pytest.approx(0.5)
    assert blend_reward(0.5, 0.075, ScoringConfig(regret_weight=0.0, plateau_weight=1.0)) == pytest.approx(1.0)


@pytest.mark.parametrize(("r", "expected"), [(-0.3, 0.0), (0.0, 0.0), (0.075, 0.075), (0.3, 0.3)])
def test_regret_variant_is_positive_part_of_regret(r: float, expected: float) -> None:
    assert regret_reward(0.5, r, CFG) == pytest.approx(expected)


@pytest.mark.parametrize(("p", "expected"), [(0.5, 1.0), (0.3, 0.6), (0.7, 0.6), (0.15, 0.0), (1.0, 0.0)])
def test_solve_rate_variant_is_the_plateau_and_ignores_regret(p: float, expected: float) -> None:
    assert solve_rate_reward(p, 0.3, CFG) == pytest.approx(expected)


@pytest.mark.parametrize(("p", "expected"), [(0.0, 0.0), (1.0, 0.0), (0.25, 0.75), (0.5, 0.5), (0.9, 0.1)])
def test_learnability_is_absolute_zeros_one_minus_p_strictly_inside(p: float, expected: float) -> None:
    assert learnability_reward(p, 0.3, CFG) == pytest.approx(expected)


def test_registry_covers_every_per_environment_variant() -> None:
    choices = typing.get_args(ScoringConfig.model_fields["designer_reward"].annotation)
    # learning_potential depends on the skill's other environments and on a stored state: not per environment.
    assert set(DESIGNER_REWARDS) == set(choices) - {"learning_potential"}


@pytest.mark.parametrize(
    ("variant", "expected"), [("blend", 0.56), ("regret", 0.075), ("solve_rate", 0.6), ("learnability", 0.7)]
)
def test_the_registry_maps_each_variant_to_its_formula(variant: str, expected: float) -> None:
    assert DESIGNER_REWARDS[variant](0.3, 0.075, CFG) == pytest.approx(expected)


# -- score_environments ------------------------------------------------------------------------------------
def _episodes() -> pd.DataFrame:
    rows = [
        # A: no hint 1, 0, 0, 0 -> 0.25, a play whose model call failed and one the environment broke (both
        # left out, whatever their return); hint 1, 1, 1, 0 -> 0.75, and two left out the same way; regret 0.5
        ("A", "no_hint", 1.0, None),
        ("A", "no_hint", 0.0, None),
        ("A", "no_hint", 1.0, "model_error"),
        ("A", "no_hint", 0.0, None),
        ("A", "no_hint", 0.0, None),
        ("A", "no_hint", 1.0, "timeout"),
        ("A", "hint", 1.0, None),
        ("A", "hint", 1.0, None),
        ("A", "hint", 1.0, None),
        ("A", "hint", 0.0, None),
        ("A", "hint", 1.0, "model_error"),
        ("A", "hint", 0.0, "exception"),
        # B: no hinted plays; partial returns 0.5, 0.5 -> win rate 0.5
        ("B", "no_hint", 0.5, None),
        ("B", "no_hint", 0.5, None),
        # D: a replayed env the agent always solves
        ("D", "no_hint", 1.0, None),
        ("D", "no_hint", 1.0, None),
        ("D", "hint", 1.0, None),
    ]
    return pd.DataFrame(rows, columns=["env_id", "condition", "episode_return", "error_type"])


def _envs() -> pd.DataFrame:
    rows = [
        ("A", "a1", "optimization", True),
        ("A", "a2", "optimization", True),  # a second design with identical code
        ("B", "b", "logical_deduction", True),
        ("C", "c", "data_retrieval", False),
        ("D", None, "pattern_recognition", True),
    ]
    return pd.DataFrame(rows, columns=["env_id", "design_id", "skill", "valid"])


def test_score_environments_matches_hand_computed_rows() -> None:
    scores = score_environments(_episodes(), _envs(), CFG)
    assert list(scores.columns) == SCHEMAS["env_scores"].names
    assert to_arrow("env_scores", scores).column("design_id").null_count == 1
    expected = [
        # env, design, skill, win_rate, r_hint, r_no_hint, regret
        ("A", "a1", "optimization", 0.25, 0.75, 0.25, 0.5),
        ("A", "a2", "optimization", 0.25, 0.75, 0.25, 0.5),
        ("B", "b", "logical_deduction", 0.5, 0.0, 0.5, 0.0),
        ("C", "c", "data_retrieval", 0.0, 0.0, 0.0, 0.0),
        ("D", None, "pattern_recognition", 1.0, 1.0, 1.0, 0.0),
    ]
    numbers = ["win_rate", "r_hint", "r_no_hint", "regret"]
    for got, want in zip(scores.to_dict("records"), expected, strict=True):
        assert (got["env_id"], got["skill"]) == (want[0], want[2])
        assert got["design_id"] == want[1] or (want[1] is None and pd.isna(got["design_id"]))  # pandas 3: NaN
        assert [got[c] for c in numbers] == pytest.approx(want[3:])
        assert got["hint_leaked"] is False


def test_env_scores_hold_no_designer_reward_and_no_scoring_constant_changes_them() -> None:
    # The designer's reward is the reward stage's (designer_rewards, over the window); a score row is the
    # same whatever the variant or its weights.
    scores = score_environments(_episodes(), _envs(), CFG)
    assert "designer_reward" not in scores.columns and scores["hint_leaked"].dtype == bool
    for cfg in (
        ScoringConfig(regret_weight=1.0, plateau_weight=1.0),
        ScoringConfig(designer_reward="learning_potential"),
        ScoringConfig(designer_reward="learnability", plateau_low=0.1),
    ):
        pd.testing.assert_frame_equal(score_environments(_episodes(), _envs(), cfg), scores)


def test_both_blend_weights_apply_to_the_scores() -> None:
    scores = score_environments(_episodes(), _envs(), CFG)
    cfg = ScoringConfig(regret_weight=1.0, plateau_weight=1.0)
    blend = [blend_reward(p, r, cfg) for p, r in zip(scores["win_rate"], scores["regret"], strict=True)]
    # A: clip(0.5 / 0.15) = 1, plateau(0.25) = 0.4; B: regret 0, plateau(0.5) = 1; C (invalid, zeros) and D
    # (win rate 1): plateau 0.
    assert blend == pytest.approx([1.4, 1.4, 1.0, 0.0, 0.0])


def test_a_still_leaking_hint_removes_only_the_regret_term() -> None:
    # A's hinted plays (0.75 vs 0.25) would give regret 0.5; its hint leaked, so no regret term: regret 0,
    # r_hint kept for the record, so blend = 0.6 * plateau(0.25) = 0.6 * 0.4; its twin design a2 shares it.
    scores = score_environments(_episodes(), _envs(), CFG, leaked={"A", "C", "not-scored"})
    to_arrow("env_scores", scores)
    assert scores["hint_leaked"].tolist() == [True, True, False, False, False]  # C is invalid: never leaked
    a = scores.iloc[0]
    assert (a.win_rate, a.r_hint, a.regret) == pytest.approx((0.25, 0.75, 0.0))
    assert blend_reward(a.win_rate, a.regret, CFG) == pytest.approx(0.6 * 0.4)
    clean = score_environments(_episodes(), _envs(), CFG)
    others = ["win_rate", "r_hint", "r_no_hint", "regret"]
    pd.testing.assert_frame_equal(scores.iloc[2:][others], clean.iloc[2:][others])


@pytest.mark.parametrize(("variant", "expected"), [("regret", 0.0), ("solve_rate", 0.4), ("learnability", 0.75)])
def test_every_variant_scores_a_leaked_env_with_regret_zero(variant: str, expected: float) -> None:
    a = score_environments(_episodes(), _envs(), CFG, leaked=["A"]).iloc[0]
    assert DESIGNER_REWARDS[variant](a.win_rate, a.regret, CFG) == pytest.approx(expected)


def test_plays_whose_model_call_failed_and_env_broken_plays_are_left_out() -> None:
    episodes = pd.DataFrame(
        {
            "env_id": ["E"] * 4,
            "condition": ["no_hint"] * 4,
            "episode_return": [1.0, 1.0, 0.0, 1.0],
            "error_type": ["model_error", None, "memory", "contract_error"],
        }
    )
    envs = pd.DataFrame({"env_id": ["E"], "design_id": ["e"], "skill": ["optimization"], "valid": [True]})
    assert score_environments(episodes, envs, CFG)["win_rate"].tolist() == [1.0]  # only the clean play counts


@pytest.mark.parametrize("error", sorted(ENV_ERROR_TYPES))
def test_a_valid_env_whose_plays_the_environment_all_broke_gets_no_row(error: str) -> None:
    # F's two no-hint plays broke (its hinted play did not): no win rate, so no row, and broken_env_ids names
    # it for the record; the other environments keep their rows and values.
    broken = pd.DataFrame(
        [("F", "no_hint", 1.0, error), ("F", "no_hint", 0.0, error), ("F", "hint", 1.0, None)],
        columns=["env_id", "condition", "episode_return", "error_type"],
    )
    episodes = pd.concat([_episodes(), broken], ignore_index=True)
    envs = pd.concat(
        [_envs(), pd.DataFrame([("F", "f", "optimization", True)], columns=_envs().columns)], ignore_index=True
    )
    assert scoring.broken_env_ids(episodes) == ["F"]
    for variant in ("blend", "learning_potential"):
        cfg = ScoringConfig(designer_reward=variant)  # type: ignore[arg-type]
        scores = score_environments(episodes, envs, cfg)
        to_arrow("env_scores", scores)
        assert scores["env_id"].tolist() == ["A", "A", "B", "C", "D"]
        pd.testing.assert_frame_equal(scores, score_environments(_episodes(), _envs(), cfg))
    with pytest.raises(ScoringError, match="'F' has no no_hint episodes"):  # no plays at all: still an error
        score_environments(_episodes(), envs, CFG)


def test_an_env_whose_plays_all_failed_in_the_model_call_gets_no_row() -> None:
    episodes = pd.DataFrame(
        {
            "env_id": ["G"] * 2,
            "condition": ["no_hint"] * 2,
            "episode_return": [0.0] * 2,
            "error_type": ["model_error"] * 2,
        }
    )
    envs = pd.DataFrame({"env_id": ["G"], "design_id": ["g"], "skill": ["optimization"], "valid": [True]})
    # an engine fault says nothing about the agent: no win rate of 0, no row (as the environment's faults)
    assert scoring.broken_env_ids(episodes) == ["G"]
    assert score_environments(episodes, envs, CFG).empty


def test_an_invalid_env_scores_zero() -> None:
    row = score_environments(_episodes(), _envs(), CFG).iloc[3]
    assert row[["win_rate", "r_hint", "r_no_hint", "regret"]].tolist() == [0.0] * 4
    assert not row["hint_leaked"]


def test_score_environments_with_no_episodes_and_only_invalid_envs() -> None:
    episodes = _episodes().iloc[:0]
    scores = score_environments(episodes, _envs().iloc[3:4], CFG)
    to_arrow("env_scores", scores)
    assert scores[["win_rate", "regret"]].values.tolist() == [[0.0, 0.0]]


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda e, v: (e.assign(condition="hinted"), v), "unknown condition"),
        (lambda e, v: (e, v[v.env_id != "D"]), "not in the envs frame"),
        (lambda e, v: (e[e.env_id != "B"], v), "'B' has no no_hint episodes"),
        (lambda e, v: (e.assign(episode_return=float("inf")), v), "non-finite"),
        (lambda e, v: (e.drop(columns="error_type"), v), "error_type"),
        (lambda e, v: (e, v.drop(columns="valid")), "valid"),
    ],
)
def test_unscorable_input_is_an_error_naming_the_problem(mutate, message: str) -> None:  # type: ignore[no-untyped-def]
    episodes, envs = mutate(_episodes(), _envs())
    with pytest.raises(ScoringError, match=message):
        score_environments(episodes, envs, CFG)
