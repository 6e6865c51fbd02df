"""The starter environments: real environments (all 8 checks in the jail) that the embedded model wins
sometimes, each stating its measured base win rate; the pool adds them and the memory leaves them out."""

from __future__ import annotations

import re

import pytest

from spade_core.config import GAME_SKILLS, TOOL_SKILLS
from spade_core.envs.seeds import load_starter_envs
from spade_core.validate import validate_file

STARTERS = load_starter_envs()
pytestmark = pytest.mark.usefixtures("jail_processes_checked")


def test_there_are_starters_named_by_skill() -> None:
    assert len(STARTERS) >= 3
    assert all(env.skill in GAME_SKILLS + TOOL_SKILLS for env in STARTERS)
    assert load_starter_envs(2) == STARTERS[:2]


@pytest.mark.parametrize("env", STARTERS, ids=[e.path.stem for e in STARTERS])
def test_starter_passes_every_check_in_the_jail(env) -> None:  # type: ignore[no-untyped-def]
    result = validate_file(env.path)
    assert result.ok, (result.error_type, result.message)
    assert all(result.checks.values()) and len(result.checks) == 8


@pytest.mark.parametrize("env", STARTERS, ids=[e.path.stem for e in STARTERS])
def test_starter_states_a_measured_base_win_rate_between_10_and_50_percent(env) -> None:  # type: ignore[no-untyped-def]
    found = re.search(r"Measured base win rate: (\d+)/(\d+) = (0\.\d+)", env.code)
    assert found, "the docstring must state the measured base win rate as 'W/N = 0.xx'"
    wins, plays, rate = int(found[1]), int(found[2]), float(found[3])
    assert plays >= 64 and abs(wins / plays - rate) < 0.005 and 0.10 <= rate <= 0.50
