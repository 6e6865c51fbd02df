"""Admission as the authors run it, each a setting and each both ways: the jail's loader held to their smoke
test's types (``validation.contract``), at validation and at play, and the designer's system prompt
(``designer.system_prompt``). Real jails."""

from __future__ import annotations

from textwrap import dedent

import pytest
from agents import Scripted
from test_validator import SMOKE, make_env

from spade_core.config import RolloutConfig
from spade_core.designer.design import design_messages, mutation_messages
from spade_core.designer.prompt_text import AUTHORS_GAME_DESIGNER_SYSTEM, DESIGNER_SYSTEM
from spade_core.envs.contract import env_id_for
from spade_core.envs.validate import validate_code
from spade_core.llm.base import SamplingParams
from spade_core.play.rollout import EpisodeSpec, RolloutEngine

pytestmark = pytest.mark.usefixtures("jail_processes_checked")

AUTHORS = SMOKE.model_copy(update={"contract": "authors"})

# No solution() method, and reset returns the observation alone: the authors' smoke test takes both.
BARE = dedent("""
    class Bare:
        def __init__(self, max_turns=12, **kwargs):
            self.max_turns = max_turns

        def reset(self, seed=None):
            self.turns = 0
            return "seed %s: say a" % seed

        def step(self, action):
            self.turns += 1
            won = action == "\\\\boxed{a}"
            return "got " + action, 1.0 if won else 0.0, won, self.turns >= self.max_turns, {}
""")
INT_FLAGS = make_env(step='return "no", 0.0, 0, 0, {}')  # 0/1 as flags: ours takes them, theirs needs bools
BOOL_REWARD = make_env(step='return "no", False, False, True, {}')  # a bool reward: theirs is an int


def test_the_authors_smoke_test_admits_an_env_without_solution_and_with_a_bare_reset() -> None:
    theirs = validate_code(BARE, AUTHORS)
    assert theirs.ok and theirs.checks == dict.fromkeys(
        ["smoke_load", "smoke_reset", "smoke_steps", "smoke_reset_again"], True
    )
    ours = validate_code(BARE, SMOKE)
    assert (ours.ok, ours.error_type) == (False, "contract_error") and "no solution() method" in (ours.message or "")


def test_the_authors_smoke_test_wants_real_bool_flags_and_takes_a_bool_reward() -> None:
    ours, theirs = validate_code(INT_FLAGS, SMOKE), validate_code(INT_FLAGS, AUTHORS)
    assert ours.ok and (theirs.ok, theirs.error_type) == (False, "contract_error")
    assert "terminated=0 (int), expected a bool" in (theirs.message or "")
    assert validate_code(BOOL_REWARD, AUTHORS).ok and validate_code(BOOL_REWARD, SMOKE).error_type == "contract_error"


def test_an_env_admitted_by_the_authors_contract_is_played_under_it() -> None:
    cfg = RolloutConfig(max_turns=3, max_tokens_per_turn=16, max_context_tokens=2048)
    specs = [EpisodeSpec(env_id_for(BARE), BARE, 0)]
    engine = RolloutEngine(
        Scripted({0: ["\\boxed{a}"]}), cfg, SamplingParams(seed=0), call_timeout_s=3.0, contract="authors"
    )
    (row,) = engine.run(specs)
    assert (row["error_type"], row["episode_return"]) == (None, 1.0)
    engine = RolloutEngine(
        Scripted({0: ["\\boxed{a}"]}),
        cfg.model_copy(update={"env_retries": 0}),
        SamplingParams(seed=0),
        call_timeout_s=3.0,
    )
    (row,) = engine.run(specs)
    assert row["error_type"] == "contract_error"  # ours: refused at load


def test_the_designer_system_prompt_is_theirs_per_kind_or_ours() -> None:
    game, tool = (
        design_messages(None, "optimization", "easy", system="authors"),
        design_messages(None, "data_retrieval", "easy", system="authors"),
    )
    assert game[0] == {"role": "system", "content": AUTHORS_GAME_DESIGNER_SYSTEM} and len(game) == 2
    assert [m["role"] for m in tool] == ["user"]  # tool use: no system prompt
    assert (
        tool[0]["content"] == design_messages(None, "data_retrieval", "easy")[1]["content"]
    )  # the user prompt is ours
    assert design_messages(None, "optimization", "easy")[0] == {"role": "system", "content": DESIGNER_SYSTEM}
    mutated = mutation_messages(None, "optimization", "easy", BARE, 0.5, "authors")
    assert mutated[0]["content"] == AUTHORS_GAME_DESIGNER_SYSTEM
