"""The generated-environment contract (docs/DESIGN.md §5): the single source that the README documents, the
designer prompt quotes and the validator checks.
"""

from __future__ import annotations

import re

from sandbox.outcome import RETURN_RANGE
from sandbox.runtime.spade_env import (
    FORMAT_ERROR_REWARD,
    NUMERIC_TOLERANCE,
    answers_match,
    parse_answer,
    parse_boxed,
    parse_tool_calls,
    split_actions,
)
from spade_core.hashing import short_hash

__all__ = [
    "CONTRACT",
    "ENV_KINDS",
    "FORMAT_ERROR_REWARD",
    "NUMERIC_TOLERANCE",
    "REWARD_RANGE",
    "answers_match",
    "env_id_for",
    "normalise_code",
    "parse_answer",
    "parse_boxed",
    "parse_tool_calls",
    "split_actions",
]

ENV_KINDS = ("game", "tool")
# Every reward a step returns lies here (the full validator checks it); returns are clamped to it.
REWARD_RANGE: tuple[float, float] = RETURN_RANGE

CONTRACT = r"""
An environment is ONE Python module that uses only the standard library and defines exactly ONE class:

    class MyEnv:
        def __init__(self, max_turns: int = 12, **kwargs): ...
        def reset(self, seed: int | None = None) -> tuple[str, dict]:
            # the first observation (the task, the rules, the answer format) and an info dict
        def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
            # observation, reward, terminated, truncated, info
        def solution(self) -> str:
            # the reference actions that solve the CURRENT episode, one after another

Rules:
- Everything is determined by `seed`: use `rng = random.Random(seed)`, never the global `random`.
  The same seed must give the same first observation.
- `step` must accept ANY string (empty, garbage, very long) and never raise: answer a malformed action
  with an explanatory observation and reward 0 (or a small penalty such as -0.1).
- reward is a finite float in [-1, 1]: 1.0 exactly when the goal is reached (terminated=True), partial
  progress strictly below 1; a lost game may end with terminated=True and a reward <= 0. The episode's
  return is its LAST reward if it terminated, else 0 (truncated, or out of turns). The episode ends
  (terminated or truncated) within `max_turns` steps.
- Empty or random actions must not reach reward 1. Playing `solution()` action by action from the same
  seed must reach reward 1.
- No files, network, subprocesses or threads: the environment runs in a sandbox where they fail.

Game environments: the agent ends each turn with its command in \boxed{...}; parse it with
`from spade_env import parse_boxed` (`parse_boxed(action)` returns the last boxed text or None).
`solution()` returns the commands, e.g. "\boxed{north} \boxed{open door}".

Tool-use environments subclass `spade_env.ToolEnv` and write only `reset`, `solution` and tools:
- each tool is a method `tool_<name>(self, arg: type, ...)` with a docstring (it becomes the tool's
  JSON schema); it returns a string.
- in `reset` set `self.expected_answer` (the value the final <answer> must equal; case-insensitive,
  numbers within 0.01), or leave it None and override `is_solved(self) -> bool` to judge success from
  the environment's state; optionally override `progress(self) -> float` (in [0, 1]) for partial reward.
- the agent makes ONE tool call per turn, <tool_call>{"name": "<name>", "arguments": {...}}</tool_call>
  (further calls in the same reply are ignored), and submits <answer>...</answer>. ToolEnv parses both
  and dispatches: a right answer ends the episode with reward 1; a wrong one scores 0 and the episode
  goes on ("Incorrect. Keep using tools."), so set the class attribute `max_answers` (e.g. 3) when the
  answer could be guessed from a short list; a reply with neither scores -0.1 (format error).
- `solution()` returns the tool calls then the answer, e.g.
  '<tool_call>{"name": "lookup", "arguments": {"key": "a"}}</tool_call> <answer>42</answer>'.

Example (game):

    import random
    from spade_env import parse_boxed

    class GuessParityEnv:
        def __init__(self, max_turns=12, **kwargs):
            self.max_turns = max_turns
            self.reset()

        def reset(self, seed=None):
            rng = random.Random(seed)
            self.numbers = [rng.randint(1, 99) for _ in range(5)]
            self.turns = 0
            return (f"Numbers: {self.numbers}. Is their sum odd or even? "
                    "Answer with \\boxed{odd} or \\boxed{even}."), {}

        def step(self, action):
            self.turns += 1
            guess = parse_boxed(action)
            answer = "odd" if sum(self.numbers) % 2 else "even"
            if guess == answer:
                return "Correct.", 1.0, True, False, {}
            truncated = self.turns >= self.max_turns
            return "Wrong or malformed; answer \\boxed{odd} or \\boxed{even}.", 0.0, False, truncated, {}

        def solution(self):
            return "\\boxed{" + ("odd" if sum(self.numbers) % 2 else "even") + "}"
""".strip()


def normalise_code(code: str) -> str:
    """Code normalised for identity: line endings, trailing whitespace, surrounding blank lines."""
    lines = [ln.rstrip() for ln in code.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def env_id_for(code: str) -> str:
    """``env_id`` = first 16 hex of sha256 of the normalised code (docs/DESIGN.md §4)."""
    return short_hash(normalise_code(code))
