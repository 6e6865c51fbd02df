"""The starter environments: real environments (all 8 checks in the jail) that the embedded model wins
sometimes, each stating its measured base win rate; the pool adds them and the memory leaves them out."""

from __future__ import annotations

import random
import re

import pytest

from sandbox.session import EnvSession
from spade_core.config import GAME_SKILLS, TOOL_SKILLS
from spade_core.envs.contract import split_actions
from spade_core.envs.seeds import load_starter_envs
from spade_core.envs.validate import garbage_actions, validate_code

STARTERS = load_starter_envs()
pytestmark = pytest.mark.usefixtures("jail_processes_checked")


def test_there_are_starters_named_by_skill() -> None:
    assert len(STARTERS) >= 3
    assert all(env.skill in GAME_SKILLS + TOOL_SKILLS for env in STARTERS)
    assert load_starter_envs(2) == STARTERS[:2]


@pytest.mark.parametrize("env", STARTERS, ids=[e.path.stem for e in STARTERS])
def test_starter_passes_every_check_in_the_jail(env) -> None:  # type: ignore[no-untyped-def]
    result = validate_code(env.path.read_text())
    assert result.ok, (result.error_type, result.message)
    assert all(result.checks.values()) and len(result.checks) == 8


@pytest.mark.parametrize("env", STARTERS, ids=[e.path.stem for e in STARTERS])
def test_starter_states_a_measured_base_win_rate_between_10_and_50_percent(env) -> None:  # type: ignore[no-untyped-def]
    found = re.search(r"Measured base win rate: (\d+)/(\d+) = (0\.\d+)", env.code)
    assert found, "the docstring must state the measured base win rate as 'W/N = 0.xx'"
    wins, plays, rate = int(found[1]), int(found[2]), float(found[3])
    assert plays >= 64 and abs(wins / plays - rate) < 0.005 and 0.10 <= rate <= 0.50


def test_starter_files_obey_the_naming_rule() -> None:
    for env in STARTERS:
        assert re.fullmatch(r"[a-z_]+__[a-z0-9_]+", env.path.stem), env.path.name
        assert env.path.stem == f"{env.skill}__{env.name}"
        assert f"Skill: {env.skill}. Kind: {env.kind}." in env.code  # the docstring says what it is


@pytest.mark.parametrize("env", STARTERS, ids=[e.path.stem for e in STARTERS])
def test_solution_wins_and_random_actions_lose(env) -> None:  # type: ignore[no-untyped-def]
    """In the jail, on seeds the validator does not use: the reference solution always reaches reward 1,
    and random strings (empty, malformed tags, random printable text) never do."""
    rng = random.Random(7)
    with EnvSession(env.code, max_turns=4) as session:
        opened = session.open()
        assert opened.ok, opened.message
        assert session.kind == env.kind
        for seed in range(100, 110):
            assert session.reset(seed).ok
            actions = split_actions(session.solution().data["solution"])
            replay = session.replay(seed, actions)
            assert replay.terminated and replay.episode_return == 1.0, (seed, actions, replay.observations)
            garbage = garbage_actions(rng, 4)
            for start in range(0, len(garbage), 4):
                replay = session.replay(seed, garbage[start : start + 4])
                assert replay.error_type is None, replay.message
                assert max(replay.rewards, default=0.0) < 1.0 and replay.episode_return < 1.0, garbage[start:]
