"""The agent's prompts per environment kind (docs/DESIGN.md §7 step 6), under ``rollout.agent_prompt``.

``ours``: a game gets a system prompt that states which ``\\boxed{}`` the engine plays (the first under
``rollout.action: boxed``, as :func:`spade_core.play.actions.game_action` takes it; the last under ``reply``, as
the environments' ``parse_boxed`` takes it), then each observation as a user message.

``authors`` (the authors' ``qwen3_game`` template, ``spade/core/orchestrator.py:256-265``): no system
prompt; the first observation (with its hint, when hinted) is wrapped in one user message — a line saying
this is a language game, ``Observation: ...``, and a request to reason step by step and box the final
answer; later observations come as they are.

``authors_rlve`` (the authors' fixed-environment play of RLVE problems, ``spade/core/fixed_env_orchestrator.py:59-63``,
the fixed-RLVE baseline's): no system prompt; one user message, the observation, a blank line and their
instruction line as they send it, ``\\boxed{{}}`` with its doubled braces (a plain string literal beside an
f-string there, so the braces are never unescaped).

Tool use is the same under both: with the native protocol and a chat template that renders the tool
schemas, no system prompt and the observation as it is (the authors' ``orchestrator.py:801-815``);
otherwise the schemas and the call format in a system prompt.
"""

from __future__ import annotations

import json
from typing import Any

AGENT_PROMPTS = ("ours", "authors", "authors_rlve")

GAME_SYSTEM = (
    "You are playing a text game. Each message from the user is the game's observation. Think step by "
    "step briefly, then end your reply with exactly one action written inside \\boxed{{...}}, for example "
    "\\boxed{{42}}. Only the {which} \\boxed{{...}} in your reply counts."
)
# Which box the engine plays under each rollout.action (spade_core/play/actions.py; the environments' parse_boxed).
BOX_PLAYED = {"boxed": "first", "reply": "last"}

# The authors' actor template (orchestrator.py:256-265): its three lines, as the model sees them.
AUTHORS_GAME_USER = (
    "You are playing a language game. Make valid actions to win.\n"
    "Observation: {observation}\n"
    "Please reason step by step, and put your final answer within \\boxed{{}}."
)

# The authors' fixed-environment RLVE prompt (fixed_env_orchestrator.py:59-63) after the observation: the
# doubled braces are what the model sees (their line is no f-string), so they are kept.
AUTHORS_RLVE_INSTRUCTION = "\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."

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


def game_system(action: str = "reply") -> str:
    """Our game system prompt, naming the box the engine plays under ``rollout.action``.

    >>> "Only the first" in game_system("boxed"), "Only the last" in game_system("reply")
    (True, True)
    """
    return GAME_SYSTEM.format(which=BOX_PLAYED[action])


def system_prompt(
    kind: str,
    tools: list[dict[str, Any]] | None,
    tools_in_template: bool,
    tool_protocol: str = "user_messages",
    action: str = "reply",
    style: str = "ours",
) -> str | None:
    """The agent's system prompt, or None for none.

    A game has ours (:func:`game_system`) or, under either of the authors' prompts, none. Tool use with the native
    protocol has none when the chat template renders the tool schemas itself (the authors send one user
    message, orchestrator.py:801-815); a template that does not gets the schemas and the call format in a
    system prompt.

    >>> [system_prompt("game", None, False, style=s) is None for s in AGENT_PROMPTS]
    [False, True, True]
    """
    if kind != "tool":
        return game_system(action) if style == "ours" else None
    if tool_protocol == "native" and tools_in_template:
        return None
    # One compact schema per line: the embedded 135M model's context is small.
    listed = (
        "(given to you by the system)"
        if tools_in_template
        else "\n".join(json.dumps(t.get("function", t), separators=(",", ":")) for t in tools or [])
    )
    return TOOL_SYSTEM.format(how=TOOL_HOW[tool_protocol], tools=listed)


def first_observation(observation: str, hint: str | None, kind: str = "game", style: str = "ours") -> str:
    """The first user message: the observation, the hint (when hinted) as a separate ``HINT:`` paragraph
    (the authors' ``"{observation}\\n\\nHINT: {hint}"``), and, for a game under the authors' prompt, both
    wrapped in their template (:data:`AUTHORS_GAME_USER`), or under ``authors_rlve`` followed by their RLVE
    instruction (:data:`AUTHORS_RLVE_INSTRUCTION`).

    >>> first_observation("3 coins", "take one")
    '3 coins\\n\\nHINT: take one'
    >>> print(first_observation("3 coins", None, style="authors"))
    You are playing a language game. Make valid actions to win.
    Observation: 3 coins
    Please reason step by step, and put your final answer within \\boxed{}.
    >>> print(first_observation("Compute 6 * 7.", None, style="authors_rlve"))
    Compute 6 * 7.
    <BLANKLINE>
    Please reason step by step, and put your final answer within \\boxed{{}}.
    """
    text = f"{observation}\n\nHINT: {hint}" if hint else observation
    if kind == "tool" or style == "ours":
        return text
    return AUTHORS_GAME_USER.format(observation=text) if style == "authors" else text + AUTHORS_RLVE_INSTRUCTION
