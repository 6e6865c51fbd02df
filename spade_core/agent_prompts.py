"""The agent's prompts per environment kind (docs/DESIGN.md §7 step 6)."""

from __future__ import annotations

import json
from typing import Any

GAME_SYSTEM = (
    "You are playing a text game. Each message from the user is the game's observation. Think step by "
    "step briefly, then end your reply with exactly one action written inside \\boxed{...}, for example "
    "\\boxed{42}. Only the last \\boxed{...} in your reply counts."
)

TOOL_SYSTEM = (
    "You solve tasks by calling tools. Call a tool by writing "
    '<tool_call>{{"name": "<tool name>", "arguments": {{...}}}}</tool_call>; the result comes back as '
    "the next message. When you know the final result, reply with <answer>...</answer>.\n"
    "Available tools (JSON schemas):\n{tools}"
)


def system_prompt(kind: str, tools: list[dict[str, Any]] | None, tools_in_template: bool) -> str:
    if kind == "tool":
        # One compact schema per line: the embedded 135M model's context is small.
        listed = (
            "(given to you by the system)"
            if tools_in_template
            else "\n".join(json.dumps(t.get("function", t), separators=(",", ":")) for t in tools or [])
        )
        return TOOL_SYSTEM.format(tools=listed)
    return GAME_SYSTEM


def first_observation(observation: str, hint: str | None) -> str:
    """The hinted condition appends the hint as a separate ``HINT:`` paragraph."""
    return f"{observation}\n\nHINT: {hint}" if hint else observation
