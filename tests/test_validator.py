"""The validator: every seed env passes (like Gymnasium's checker over registered envs); each check
fails on an environment built to break it, with a message that shows the actual value."""

from __future__ import annotations

from textwrap import dedent

import pytest
from conftest import FIXTURES

from spade_core.config import GAME_SKILLS, TOOL_SKILLS, ValidationConfig
from spade_core.envs.contract import env_id_for
from spade_core.envs.seeds import load_seed_envs
from spade_core.validate import CHECK_NAMES, validate_code, validate_many

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
SEEDS = load_seed_envs()
FAST = ValidationConfig(call_timeout_s=3.0, max_turns=8)


def test_seed_library_covers_every_skill() -> None:
    assert {e.skill for e in SEEDS} >= set(GAME_SKILLS) | set(TOOL_SKILLS)
    assert len(SEEDS) >= 12


@pytest.mark.parametrize("seed_env", SEEDS, ids=[e.path.stem for e in SEEDS])
def test_every_seed_env_passes_the_validator(seed_env) -> None:  # type: ignore[no-untyped-def]
    result = validate_code(seed_env.code, ValidationConfig(), seeds=(0, 1, 2, 3))
    assert result.ok, result.message
    assert result.kind == seed_env.kind
    assert list(result.checks) == list(CHECK_NAMES) and all(result.checks.values())


@pytest.mark.parametrize("name", ["vault_code.py", "warehouse_tools.py"])
def test_reference_examples_pass(name: str) -> None:
    assert validate_code((FIXTURES / "envs" / name).read_text(), FAST).ok


GOOD_STEP = """
        import re
        self.turns += 1
        m = re.search(r"\\\\boxed\\{(.*?)\\}", action)
        if m and m.group(1) == str(self.secret):
            return "win", 1.0, True, False, {}
        return "no", 0.0, False, self.turns >= self.max_turns, {}
"""


def make_env(reset: str = "", step: str = GOOD_STEP, solution: str = 'return "\\\\boxed{%d}" % self.secret') -> str:
    return dedent(f"""
        import random

        class Env:
            def __init__(self, max_turns=12, **kwargs):
                self.max_turns = max_turns
                self.reset()

            def reset(self, seed=None):
                self.turns = 0
                self.secret = random.Random(seed).randint(100, 999)
                {reset or 'return "guess", {}'}

            def step(self, action):
                {dedent(step).strip().replace(chr(10), chr(10) + " " * 16)}

            def solution(self):
                {solution}
    """)


def test_baseline_env_is_valid() -> None:
    result = validate_code(make_env(), FAST)
    assert result.ok, result.message


@pytest.mark.parametrize(
    ("code", "check", "error_type", "shown"),
    [
        ("class Env:\n    def reset(self, seed=None:\n", "parses", "syntax_error", "line 2"),
        ("x = 1\n", "one_env_class", "contract_error", "found 0: none"),
        (make_env() + "\nclass Other(Env):\n    pass\n", "one_env_class", "contract_error", "found 2: Env, Other"),
        (make_env(reset='return "guess"'), "reset_types", "contract_error", "a str ('guess')"),
        (make_env(step='return "x", 1.5, False, False, {}'), "step_accepts_any_string", "contract_error", "1.5"),
        (make_env(step='return "x", 0.0, "no", False, {}'), "step_accepts_any_string", "contract_error", "'no'"),
        (
            make_env(step='raise ValueError("bad action " + action[:5])'),
            "step_accepts_any_string",
            "exception",
            "ValueError in step",
        ),
        (
            make_env(reset='return "guess %f" % random.random(), {}'),
            "deterministic_reset",
            "nondeterministic",
            "seed 0 gave 'guess",
        ),
        (make_env(step='return "no", 0.0, False, False, {}'), "ends_within_max_turns", "contract_error", "max_turns=8"),
        (make_env(solution='return "\\\\boxed{1}"'), "solution_reaches_goal", "unsolvable", "reward 0.0"),
        (make_env(solution="return str(self.secret)"), "solution_reaches_goal", "contract_error", "no \\boxed{}"),
        (make_env(solution="return 5"), "solution_reaches_goal", "contract_error", "solution() returned int"),
        (make_env(step='return "win", 1.0, True, False, {}'), "not_trivial", "trivial", "empty actions"),
    ],
    ids=[
        "syntax",
        "no-class",
        "two-classes",
        "reset-not-tuple",
        "reward-out-of-range",
        "flag-not-bool",
        "step-raises",
        "nondeterministic",
        "never-ends",
        "wrong-solution",
        "solution-not-actions",
        "solution-not-str",
        "free-win",
    ],
)
def test_each_check_names_the_actual_value(code: str, check: str, error_type: str, shown: str) -> None:
    result = validate_code(code, FAST)
    assert not result.ok
    assert (result.error_type, result.checks.get(check)) == (error_type, False), result.message
    assert shown in (result.message or ""), result.message
    ran = list(result.checks)
    assert ran[-1] == check and all(result.checks[c] for c in ran[:-1])


def test_validate_many_keeps_input_order() -> None:
    codes = [make_env(), "x = 1\n", make_env(solution='return "\\\\boxed{1}"')]
    results = validate_many(codes, FAST.model_copy(update={"parallel_jails": 2}))
    assert [r.error_type for r in results] == [None, "contract_error", "unsolvable"]
    assert [r.env_id for r in results] == [env_id_for(c) for c in codes]


def test_env_id_ignores_trailing_whitespace_and_line_endings() -> None:
    code = make_env()
    assert env_id_for(code) == env_id_for(code.replace("\n", "  \r\n") + "\n\n")
    assert env_id_for(code) != env_id_for(code + "# different\n")


def test_absurdly_nested_code_is_a_syntax_error_not_a_crash() -> None:
    result = validate_code("x = " + "1+" * 5000 + "1\n", FAST)
    assert (result.ok, result.error_type) == (False, "syntax_error")
    assert "RecursionError" in (result.message or "") or "too many" in (result.message or "")
