"""The validator: every seed env passes (like Gymnasium's checker over registered envs); each check
fails on an environment built to break it, with a message that shows the actual value."""

from __future__ import annotations

from textwrap import dedent

import pytest
from conftest import FIXTURES

from sandbox.runtime import host
from spade_core.config import GAME_SKILLS, TOOL_SKILLS, ValidationConfig
from spade_core.envs.contract import REWARD_RANGE, env_id_for
from spade_core.envs.seeds import load_seed_envs
from spade_core.envs.validate import CHECK_NAMES, SMOKE_REWARD_RANGE, validate_code, validate_many

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


@pytest.mark.parametrize("penalty", [-0.5, -1.0, -0.1])
def test_negative_rewards_down_to_minus_one_are_accepted(penalty: float) -> None:
    # A wrong guess is penalised; a lost game may even terminate with a negative reward.
    step = GOOD_STEP.replace('return "no", 0.0,', f'return "no", {penalty},')
    assert step != GOOD_STEP
    result = validate_code(make_env(step=step), FAST)
    assert result.ok, result.message
    lost = GOOD_STEP.replace('return "no", 0.0, False,', f'return "lost", {penalty}, self.turns >= 3,')
    result = validate_code(make_env(step=lost), FAST)
    assert result.ok, result.message


def test_the_host_limit_is_the_smoke_range_and_the_contract_range_is_inside_it() -> None:
    assert (-host.REWARD_LIMIT, host.REWARD_LIMIT) == SMOKE_REWARD_RANGE
    assert SMOKE_REWARD_RANGE[0] < REWARD_RANGE[0] < REWARD_RANGE[1] < SMOKE_REWARD_RANGE[1]


@pytest.mark.parametrize(
    ("code", "check", "error_type", "shown"),
    [
        ("class Env:\n    def reset(self, seed=None:\n", "parses", "syntax_error", "line 2"),
        ("x = 1\n", "one_env_class", "contract_error", "found 0: none"),
        (make_env() + "\nclass Other(Env):\n    pass\n", "one_env_class", "contract_error", "found 2: Env, Other"),
        (make_env(reset='return "guess"'), "reset_types", "contract_error", "a str ('guess')"),
        (make_env(step='return "x", 1.5, False, False, {}'), "step_accepts_any_string", "contract_error", "1.5"),
        (make_env(step='return "x", -1.5, False, False, {}'), "step_accepts_any_string", "contract_error", "-1.5"),
        (
            make_env(step=GOOD_STEP.replace('"win", 1.0', '"win", 2.0')),
            "solution_reaches_goal",
            "contract_error",
            "gave reward 2.0, expected [-1, 1]",
        ),
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
        "reward-below-range",
        "win-reward-out-of-range",
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


# -- switches: validation.disabled_checks and validation.mode ---------------------------------------------------
FREE_WIN = make_env(step='return "win", 1.0, True, False, {}')  # fails not_trivial only
CRASHES = make_env(step='raise ValueError("bad action " + action[:5])')


def test_validator_docstring_examples_hold() -> None:
    import doctest

    from spade_core.envs import validate

    result = doctest.testmod(validate)
    assert result.attempted > 0 and result.failed == 0


def test_a_design_failing_only_not_trivial_passes_with_that_check_disabled() -> None:
    assert validate_code(FREE_WIN, FAST).error_type == "trivial"
    result = validate_code(FREE_WIN, FAST.model_copy(update={"disabled_checks": ["not_trivial"]}))
    assert result.ok and result.error_type is None, result.message
    assert list(result.checks) == [c for c in CHECK_NAMES if c != "not_trivial"] and all(result.checks.values())
    assert "not_trivial" not in result.checks  # skipped, not passed
    assert result.skipped == ["not_trivial"] and result.message == "[disabled checks: not_trivial]"
    assert result.as_row()["message"] == "[disabled checks: not_trivial]"


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_each_check_can_be_switched_off(name: str) -> None:
    result = validate_code(make_env(), FAST.model_copy(update={"disabled_checks": [name]}))
    assert result.ok, result.message
    assert list(result.checks) == [c for c in CHECK_NAMES if c != name] and result.skipped == [name]
    assert result.kind == "game"  # the jail was loaded even with one_env_class off


def test_a_failure_keeps_the_disabled_checks_in_its_message() -> None:
    cfg = FAST.model_copy(update={"disabled_checks": ["parses", "one_env_class"]})
    result = validate_code("class Env:\n    def reset(self, seed=None:\n", cfg)
    # the load still runs before the first jailed check, so the syntax error fails reset_types
    assert (result.ok, result.error_type, list(result.checks)) == (False, "syntax_error", ["reset_types"])
    assert result.message is not None and result.message.startswith("reset_types: loading the environment")
    assert result.message.endswith("[disabled checks: parses, one_env_class]")


def test_an_unknown_check_name_is_a_one_line_error_listing_the_checks() -> None:
    from spade_core.config import ConfigError

    cfg = FAST.model_copy(update={"disabled_checks": ["not_trivial", "not_trival"]})
    for call in (lambda: validate_code(make_env(), cfg), lambda: validate_many([make_env()], cfg)):
        with pytest.raises(ConfigError, match="unknown check 'not_trival'") as info:
            call()
        assert "\n" not in str(info.value) and ", ".join(CHECK_NAMES) in str(info.value)


SMOKE = FAST.model_copy(update={"mode": "smoke"})
SMOKE_CHECKS = ["smoke_load", "smoke_reset", "smoke_steps", "smoke_reset_again"]


@pytest.mark.parametrize("seed_env", SEEDS, ids=[e.path.stem for e in SEEDS])
def test_every_seed_env_passes_the_smoke_test(seed_env) -> None:  # type: ignore[no-untyped-def]
    result = validate_code(seed_env.code, SMOKE)
    assert result.ok, result.message
    assert result.checks == dict.fromkeys(SMOKE_CHECKS, True) and result.kind == seed_env.kind


@pytest.mark.parametrize(
    ("code", "full_error"),
    [
        (FREE_WIN, "trivial"),
        (make_env(solution='return "\\\\boxed{1}"'), "unsolvable"),
        (make_env(reset='return "guess %f" % random.random(), {}'), "nondeterministic"),
        (make_env(step='return "no", 0.0, False, False, {}'), "contract_error"),  # never ends
        (make_env(step='return "x", 1.5, False, False, {}'), "contract_error"),  # the authors' [-10, 10]
    ],
    ids=["free-win", "wrong-solution", "nondeterministic", "never-ends", "reward-1.5"],
)
def test_envs_the_smoke_test_passes_and_the_full_checks_reject(code: str, full_error: str) -> None:
    assert validate_code(code, FAST).error_type == full_error
    smoke = validate_code(code, SMOKE)
    assert smoke.ok and smoke.message is None and list(smoke.checks) == SMOKE_CHECKS, smoke.message


@pytest.mark.parametrize(
    ("code", "check", "error_type", "shown"),
    [
        ("class Env:\n    def reset(self, seed=None:\n", "smoke_load", "syntax_error", "SyntaxError"),
        (make_env(reset='return ("go" if seed != 42 else [][0]), {}'), "smoke_reset", "exception", "IndexError"),
        (make_env(reset='return "", {}'), "smoke_reset", "contract_error", "empty observation"),
        (CRASHES, "smoke_steps", "exception", "ValueError in step"),
        (make_env(step='return "x", 11.0, False, False, {}'), "smoke_steps", "contract_error", "11.0"),
        (
            make_env(reset='return ("go" if seed != 123 else 1 / 0), {}'),
            "smoke_reset_again",
            "exception",
            "ZeroDivisionError in reset",
        ),
    ],
    ids=["syntax", "reset-raises", "empty-observation", "step-crashes", "reward-out-of-range", "second-reset"],
)
def test_the_smoke_test_fails_a_broken_env(code: str, check: str, error_type: str, shown: str) -> None:
    result = validate_code(code, SMOKE)
    assert (result.ok, result.error_type, result.checks.get(check)) == (False, error_type, False), result.message
    assert result.message is not None and result.message.startswith(f"{check}: ") and shown in result.message
    ran = list(result.checks)
    assert ran[-1] == check and all(result.checks[c] for c in ran[:-1])


def test_the_smoke_test_stops_its_test_actions_when_the_episode_ends() -> None:
    # Wins on the first test action and raises on any later step: the smoke test sends no more actions.
    step = """
        self.turns += 1
        if self.turns > 1:
            raise RuntimeError("stepped after the end")
        return "done", 1.0, True, False, {}
    """
    result = validate_code(make_env(step=step), SMOKE)
    assert result.ok, result.message


def test_the_smoke_test_ignores_disabled_checks() -> None:
    result = validate_code(CRASHES, SMOKE.model_copy(update={"disabled_checks": ["step_accepts_any_string"]}))
    assert (result.error_type, result.skipped) == ("exception", [])
    assert "disabled" not in (result.message or "")
