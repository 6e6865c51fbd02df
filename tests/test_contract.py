"""Pure functions of the contract: action parsing, solution splitting, ToolEnv dispatch and schemas."""

from __future__ import annotations

import pytest

from sandbox.runtime.spade_env import ToolEnv, parse_answer, parse_boxed, parse_tool_calls, split_actions
from spade_core.envs.contract import CONTRACT


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
    (schema,) = Lookup.get_tool_schemas()
    assert schema["function"]["name"] == "get"
    assert schema["function"]["description"] == "Read one key."
    assert schema["function"]["parameters"]["properties"] == {"key": {"type": "string"}, "default": {"type": "integer"}}
    assert schema["function"]["parameters"]["required"] == ["key"]


def test_tool_env_dispatch_answer_and_errors() -> None:
    env = Lookup(max_turns=3)
    assert env.step("hello")[0].startswith("Format error")
    assert env.step('<tool_call>{"name": "nope", "arguments": {}}</tool_call>')[0].startswith("error: unknown tool")
    assert env.step('<tool_call>{"name": "get", "arguments": {"wrong": 1}}</tool_call>')[3] is True  # truncated
    env.reset(seed=0)
    assert env.turn_count == 0
    obs, reward, terminated, _, _ = env.step('<tool_call>{"name": "get", "arguments": {"key": "k"}}</tool_call>')
    assert (obs, reward, terminated) == ("blue", 0.0, False)
    assert env.step("<answer>Blue </answer>")[1:3] == (1.0, True)


def test_contract_text_is_the_single_documented_source() -> None:
    for phrase in ("reset(self, seed", "\\boxed{", "<tool_call>", "ToolEnv", "solution()", "max_turns"):
        assert phrase in CONTRACT
