"""Pure functions of the contract: action parsing, solution splitting, ToolEnv dispatch and schemas."""

from __future__ import annotations

import pytest

from sandbox.runtime.spade_env import (
    FORMAT_ERROR,
    INCORRECT,
    ToolEnv,
    parse_answer,
    parse_boxed,
    parse_tool_calls,
    split_actions,
    tool_schemas,
)
from spade_core.envs.contract import CONTRACT, FORMAT_ERROR_REWARD, NUMERIC_TOLERANCE, REWARD_RANGE, answers_match


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("I move \\boxed{north}", "north"),
        ("\\boxed{a} then \\boxed{ b }", "b"),
        ("\\boxed{f({1,2})}", "f({1,2})"),
        ("\\boxed{unclosed", None),
        ("no box", None),
        ("", None),
    ],
)
def test_parse_boxed(action: str, expected: str | None) -> None:
    assert parse_boxed(action) == expected


def test_split_actions_game_and_tool() -> None:
    assert split_actions("\\boxed{1} and \\boxed{2}") == ["\\boxed{1}", "\\boxed{2}"]
    tool = '<tool_call>{"name": "a", "arguments": {}}</tool_call>\n<answer>\\boxed{x}</answer>'
    assert split_actions(tool) == [
        '<tool_call>{"name": "a", "arguments": {}}</tool_call>',
        "<answer>\\boxed{x}</answer>",
    ]
    assert split_actions("42") == [] and split_actions("") == []


def test_parse_tool_calls_reports_malformed_calls() -> None:
    calls = parse_tool_calls(
        '<tool_call>{"name": "x", "arguments": {"k": 1}}</tool_call><tool_call>{bad</tool_call>'
        "<tool_call>[1]</tool_call>"
    )
    assert calls[0] == ("x", {"k": 1})
    assert calls[1][0] is None and "invalid JSON" in calls[1][1]
    assert calls[2][0] is None
    assert parse_answer("<answer> 7 </answer>") == "7"


class Lookup(ToolEnv):
    def reset(self, seed=None):  # type: ignore[no-untyped-def]
        self.expected_answer = "blue"
        return "Find the colour of key k.", {}

    def tool_get(self, key: str, default: int = 0) -> str:
        """Read one key.

        More text that is not part of the description."""
        return {"k": "blue"}.get(key, "error: unknown key")

    def solution(self):  # type: ignore[no-untyped-def]
        return '<tool_call>{"name": "get", "arguments": {"key": "k"}}</tool_call> <answer>blue</answer>'


def test_tool_env_schema_from_signature_and_docstring() -> None:
    (schema,) = tool_schemas(Lookup)
    assert schema["function"]["name"] == "get"
    assert schema["function"]["description"] == "Read one key."
    assert schema["function"]["parameters"]["properties"] == {"key": {"type": "string"}, "default": {"type": "integer"}}
    assert schema["function"]["parameters"]["required"] == ["key"]


def test_tool_env_dispatch_answer_and_errors() -> None:
    env = Lookup(max_turns=3)
    assert env.step("hello")[:3] == (FORMAT_ERROR, -0.1, False)
    obs, reward, terminated, truncated, _ = env.step('<tool_call>{"name": "nope", "arguments": {}}</tool_call>')
    assert obs.startswith("Unknown tool 'nope'. Available: get") and (reward, terminated, truncated) == (
        0,
        False,
        False,
    )
    assert env.step('<tool_call>{"name": "get", "arguments": {"wrong": 1}}</tool_call>')[3] is True  # truncated
    env.reset(seed=0)
    assert env.turn_count == 0
    obs, reward, terminated, _, _ = env.step('<tool_call>{"name": "get", "arguments": {"key": "k"}}</tool_call>')
    assert (obs, reward, terminated) == ("blue", 0.0, False)
    assert env.step("<answer>Blue </answer>")[1:3] == (1.0, True)


def test_a_wrong_answer_continues_the_episode_and_a_later_right_one_wins() -> None:
    env = Lookup(max_turns=5)
    assert env.step("<answer>red</answer>") == (INCORRECT, 0.0, False, False, {"solved": False})
    assert INCORRECT == "Incorrect. Keep using tools."
    assert env.step('<tool_call>{"name": "get", "arguments": {"key": "k"}}</tool_call>')[:3] == ("blue", 0.0, False)
    assert env.step("<answer>blue</answer>")[1:4] == (1.0, True, False)


def test_a_wrong_answer_on_the_last_turn_truncates_and_max_answers_terminates() -> None:
    env = Lookup(max_turns=2)
    env.step("<answer>red</answer>")
    assert env.step("<answer>green</answer>")[1:4] == (0.0, False, True)

    class Capped(Lookup):
        max_answers = 2

    capped = Capped(max_turns=8)
    assert capped.step("<answer>red</answer>")[1:4] == (0.0, False, False)
    assert capped.step("<answer>green</answer>")[1:4] == (0.0, True, False)  # answers used up: ends, return 0
    capped.reset(seed=1)
    assert capped.wrong_answers == 0 and capped.step("<answer>blue</answer>")[1:3] == (1.0, True)


@pytest.mark.parametrize(
    ("action", "obs_start"),
    [
        ("I think the answer is blue.", "Format error"),
        ("", "Format error"),
        ("<tool_call>{not json</tool_call>", "Format error: the tool call is not a JSON object"),
        ("<tool_call>[1, 2]</tool_call>", "Format error: the tool call is not a JSON object"),
    ],
)
def test_a_format_error_scores_minus_a_tenth_except_on_the_last_turn(action: str, obs_start: str) -> None:
    env = Lookup(max_turns=2)
    obs, reward, terminated, truncated, _ = env.step(action)
    assert obs.startswith(obs_start) and (reward, terminated, truncated) == (FORMAT_ERROR_REWARD, False, False)
    assert FORMAT_ERROR_REWARD == -0.1
    assert env.step(action)[1:4] == (0.0, False, True)  # the authors: the last turn is "time up", reward 0


def test_one_tool_call_per_turn_and_an_answer_comes_first() -> None:
    class Counter(Lookup):
        calls = 0

        def tool_get(self, key: str, default: int = 0) -> str:
            """Read one key."""
            type(self).calls += 1
            return "blue"

    env = Counter(max_turns=5)
    call = '<tool_call>{"name": "get", "arguments": {"key": "k"}}</tool_call>'
    obs = env.step(call * 3)[0]
    assert Counter.calls == 1 and obs.startswith("blue") and "2 more tool call(s)" in obs
    assert env.step(call + "<answer>blue</answer>")[1:3] == (1.0, True) and Counter.calls == 1


@pytest.mark.parametrize(
    ("expected", "answer", "right"),
    [
        ("1234", "1234.005", True),
        ("1234", "$1,234", True),
        ("3.14159", "3.14", True),
        ("3.14159", "3.13", False),
        ("0.5", "0.51", False),  # a difference of 0.01 is not within 0.01
        ("42", "forty-two", False),
        ("Ann Lee", " ann   LEE ", True),
        ("nan", "nan", True),  # equal text; as numbers NaN never matches
        ("1", "nan", False),
    ],
)
def test_numeric_answers_match_within_a_hundredth(expected: str, answer: str, right: bool) -> None:
    assert answers_match(answer, expected) is right
    assert NUMERIC_TOLERANCE == 0.01

    class Numeric(Lookup):
        def reset(self, seed=None):  # type: ignore[no-untyped-def]
            self.expected_answer = expected
            return "Give the number.", {}

    assert Numeric(max_turns=3).step(f"<answer>{answer}</answer>")[1:3] == ((1.0, True) if right else (0.0, False))


def test_contract_text_is_the_single_documented_source() -> None:
    for phrase in ("reset(self, seed", "\\boxed{", "<tool_call>", "ToolEnv", "solution()", "max_turns"):
        assert phrase in CONTRACT
    for phrase in ("[-1, 1]", "LAST reward if it terminated", "ONE tool call per turn", "-0.1", "within 0.01"):
        assert phrase in CONTRACT
    assert REWARD_RANGE == (-1.0, 1.0)
