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
    "You solve tasks by calling tools. {how} When you know the final result, reply with <answer>...</answer>.\n"
    "Available tools (JSON schemas):\n{tools}"
)
_CALL = '<tool_call>{"name": "<tool name>", "arguments": {...}}</tool_call>'
# How the agent calls tools under each rollout.tool_protocol.
TOOL_HOW = {
    "user_messages": f"Call a tool by writing {_CALL}; the result comes back as the next message.",
    "native": f"Call tools by writing one or more {_CALL} blocks; every call runs and each result comes back as "
    "a tool message.",
}


def system_prompt(
    kind: str, tools: list[dict[str, Any]] | None, tools_in_template: bool, tool_protocol: str = "user_messages"
) -> str | None:
    """The agent's system prompt, or None for none.

    Tool use with the native protocol has none when the chat template renders the tool schemas itself (the
    authors send one user message, orchestrator.py:801-815); a template that does not gets the schemas and the
    call format in a system prompt.
    """
    if kind != "tool":
        return GAME_SYSTEM
    if tool_protocol == "native" and tools_in_template:
        return None
    # One compact schema per line: the embedded 135M model's context is small.
    listed = (
        "(given to you by the system)"
        if tools_in_template
        else "\n".join(json.dumps(t.get("function", t), separators=(",", ":")) for t in tools or [])
    )
    return TOOL_SYSTEM.format(how=TOOL_HOW[tool_protocol], tools=listed)


def first_observation(observation: str, hint: str | None) -> str:
    """The hinted condition appends the hint as a separate ``HINT:`` paragraph."""
    return f"{observation}\n\nHINT: {hint}" if hint else observation
