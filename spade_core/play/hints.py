"""Hints (docs/DESIGN.md §7 step 5): the same model reads an environment's source and writes a short hint.

Rules given to the model: at most ``rollout.hint_max_words`` words [100]; the key insight and the answer
format, never the answer itself; for tool use a value-free procedural plan (which tools, in which order).

A hint that contains a reference solution (or a specific value of one, :func:`leaked_values`) leaks it. The
hint stage then asks the model to rewrite it, up to ``rollout.hint_rewrites`` [1] times, with
:func:`rewrite_messages`: the conversation so far plus a turn that quotes what leaked and asks for a hint
that does not give the answer away. The last hint is stored with ``leaks_solution`` of that last hint, so
the leak rate stays visible; an environment whose stored hint still leaks is still played with it (the data
is kept), but gets no regret term (:mod:`spade_core.method.scoring`, ``env_scores.hint_leaked``). The authors check
no leak at all (docs/DESIGN.md §7 step 5; their prompt only asks the model not to reveal the answer).

``rollout.hint_prompt`` picks the request. ``ours``: a one-line system prompt, the rules and the code in
the user message, the reply cut to ``rollout.hint_max_words``. ``authors`` (their
``spade/core/hint_generator.py:23-74``, here in our words): a long system prompt per kind — what the player
sees, what to work out from the code, what the hint must hold, rules (1-3 sentences under 100 words for a
game, 2-3 value-free sentences for tool use), one good and one bad example — and a user message that is the
code alone (``Environment code:`` and a fenced block); the reply is stripped, a fenced JSON object's ``hint``
taken when there is one, and never cut (:func:`authors_hint`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

from spade_core.envs.contract import parse_answer, parse_boxed, parse_tool_calls, split_actions

HINT_SYSTEM = "You write short, precise hints for players of text environments."

# The authors' hint system prompts (hint_generator.py:23-48 games, :51-74 tool use): their layout, our words.
AUTHORS_GAME_HINT_SYSTEM = """You read the source code of a game and write a hint that helps an LLM player solve it.

SETTING: The player only sees the game's text observations and answers with \\boxed{answer}. It never sees the code; you do. Your hint is added to the player's first observation.

WORK OUT, from the code:
1. The puzzle as the player experiences it (not as the code implements it)
2. How the right answer follows from the state (follow reset() and the check in step())
3. The form the answer must take (a number, a word, a list, ...)

YOUR HINT GIVES:
- The key idea or method for this particular puzzle
- The form of the answer (for example "reply with one integer" or "reply with a comma-separated list")

RULES:
- 1-3 sentences, under 100 words
- Speak only of what the player can see in the observation, never of code internals
- Be specific to this game; no generic advice such as "be careful" or "consider every option"
- Do NOT give the answer itself; DO explain how to reach it

A GOOD hint: "Each number is twice the previous one minus one. Apply that rule to the last number shown. Reply with a single integer."
A BAD hint: "The answer is kept in self.target, set in reset(). Try to figure out its value."

Reply with the hint text ONLY: no JSON, no markdown, no labels."""  # noqa: E501

AUTHORS_TOOL_HINT_SYSTEM = """You read the source code of a MULTI-TURN tool-use environment and write a PROCEDURAL strategy hint for the LLM agent that will play it.

SETTING: The agent works turn by turn. It sees ONE user instruction at a time, calls tools with <tool_call>{"name": "...", "arguments": {...}}</tool_call>, reads every tool result, and replies <answer>done</answer> ONLY once every instruction is met. It never sees the code; you do. Your hint is added to the agent's FIRST observation.

AIM: Help the agent get UNSTUCK without DOING the task for it. Give the shape of the approach, never the answer. Finding the concrete values by calling tools is the SKILL under test: a hint the agent can copy to win is worthless, and it teaches the designer to build games that cannot be won WITHOUT the leaked answer.

WORK OUT, from the code, the STRATEGY only: which KINDS of tools or operations matter, the order of the PHASES (which tool's output feeds which), and which tools are distractors or out of scope.

YOUR HINT:
- Describes the approach and the order of PHASES by tool ROLE (for example "first find the record, then change it, then file it away"), NOT a filled-in sequence of calls.
- Tells the agent to go turn by turn and reply <answer>done</answer> ONLY when every step is done, never to jump to a final answer.
- Tells the agent to FIND the exact arguments with lookup or listing tools and by reading each instruction, never to assume them.
- Says to ASK when an instruction leaves out a required argument (do not guess), and to DECLINE a request the tools cannot serve.

HARD RULES (they stop the answer from leaking, the most common failure):
- NEVER write concrete values from the code or the hidden state: no IDs, names, file names, paths, amounts, dates or status strings. Write placeholders such as <order_id> or <amount>, or phrases such as "the account the user names". About to type a specific value? Replace it with a placeholder.
- Do NOT write a complete call-by-call walkthrough with every argument filled in.
- Speak only of tool behaviour the agent can observe, never of code internals (state variable names, exact criterion expressions).
- 2-3 sentences, under 100 words: specific to THIS environment's tools and goal, but free of values.
- Do NOT tell the agent to "answer with one integer or word" or to answer at once: this is a multi-turn task to carry out.

A GOOD hint (strategy and placeholders; the agent must still find the specifics):
"Take one instruction at a time. Use the account lookup tool to find the account the user means, then the transfer tool to move the amount; after that, use the report tools to create the summary and send it where the instruction says. Read every tool result and the next instruction for the exact arguments; don't assume IDs. Reply <answer>done</answer> only after the last instruction is done."

A BAD hint (it GIVES THE ANSWER AWAY, never do this): "call get_account(account_id='ACC-771'), then transfer(src='ACC-771', dst='SAV-12', amount=250), then send_report(to='audit@bank.example'). Reply <answer>done</answer>." It spells out the exact IDs and amounts, so the agent wins by copying instead of doing the task.

Reply with the hint text ONLY: no JSON, no markdown, no labels."""  # noqa: E501


def hint_messages(code: str, kind: str, max_words: int, style: str = "ours") -> list[dict[str, str]]:
    """The hint request for an environment's ``code`` under ``rollout.hint_prompt`` = ``style``.

    >>> m = hint_messages("class E: ...", "game", 100, "authors")
    >>> m[0]["content"] == AUTHORS_GAME_HINT_SYSTEM, m[1]["content"]
    (True, 'Environment code:\\n```python\\nclass E: ...\\n```')
    """
    if style == "authors":
        system = AUTHORS_TOOL_HINT_SYSTEM if kind == "tool" else AUTHORS_GAME_HINT_SYSTEM
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": f"Environment code:\n```python\n{code}\n```"},
        ]
    rules = (
        "Give a value-free procedural plan: which tools to call, in which order, and what to look for. "
        "Never state concrete values, ids or the final answer."
        if kind == "tool"
        else "State the key insight and the exact answer format. Never state the answer or the moves themselves."
    )
    return [
        {"role": "system", "content": HINT_SYSTEM},
        {
            "role": "user",
            "content": f"Here is the source of an environment:\n```python\n{code.strip()}\n```\n\n"
            f"Write a hint for a player, at most {max_words} words. {rules} "
            "Reply with the hint only.",
        },
    ]


def authors_hint(reply: str) -> str:
    """The hint in a reply, as the authors parse it (hint_generator.py:101-126): the stripped reply, or the
    ``hint`` of a fenced JSON object when the reply holds one; no length cut.

    >>> authors_hint("  Add the two numbers. Reply with one integer.  ")
    'Add the two numbers. Reply with one integer.'
    >>> authors_hint('```json\\n{"hint": "Sort them first."}\\n```')
    'Sort them first.'
    """
    text = reply.strip()
    match = re.search(r"```json\s*\n?(.*?)\n?```", text, re.DOTALL)
    if match:
        try:
            data = json.loads(match.group(1).strip())
        except json.JSONDecodeError:
            return text
        if isinstance(data, dict) and "hint" in data:
            return str(data["hint"])
    return text


def read_hint(reply: str, max_words: int, style: str = "ours") -> str:
    """The hint in a model reply under ``rollout.hint_prompt``: :func:`clean_hint` or :func:`authors_hint`."""
    return authors_hint(reply) if style == "authors" else clean_hint(reply, max_words)


def clean_hint(reply: str, max_words: int) -> str:
    """The hint text: fences and a leading 'Hint:' dropped, whitespace collapsed, cut to ``max_words``."""
    text = re.sub(r"```.*?(```|$)", " ", reply, flags=re.S)
    text = re.sub(r"^\s*hint\s*:\s*", "", text, flags=re.I)
    words = text.split()
    return " ".join(words[:max_words])


def _normalise(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def solution_payloads(solution: str) -> list[str]:
    """What a leak would reveal: each \\boxed{} command, each <answer>, each tool call's argument values."""
    payloads: list[str] = []
    for action in split_actions(solution):
        boxed, answer = parse_boxed(action), parse_answer(action)
        payloads += [p for p in (boxed, answer) if p]
        for name, args in parse_tool_calls(action):
            if name is not None and isinstance(args, dict):
                payloads += [str(v) for v in args.values()]
    return payloads


def _specific(payload: str) -> bool:
    """A payload specific enough to be the answer: at least 3 characters, or a multi-digit number."""
    return len(payload) >= 3 or (payload.isdigit() and len(payload) >= 2)


def leaked_values(hint: str, solutions: Iterable[str]) -> list[str]:
    """What of ``solutions`` the hint gives away: each reference solution it contains, and each specific
    payload (:func:`solution_payloads`; at least 3 characters, or a multi-digit number) it contains as a
    whole token; normalised (lower case, whitespace collapsed), without repeats, in the order found.

    >>> leaked_values("The code is 417, box it.", ["\\\\boxed{417}", "\\\\boxed{9}"])
    ['417']
    >>> leaked_values("Compare digits one at a time.", ["\\\\boxed{417}"])
    []
    """
    text = _normalise(hint)
    found: list[str] = []
    for solution in solutions:
        whole = _normalise(solution)
        if whole and whole in text and whole not in found:
            found.append(whole)
        for payload in solution_payloads(solution):
            p = _normalise(payload)
            if p not in found and _specific(p) and re.search(rf"(?<![\w]){re.escape(p)}(?![\w])", text):
                found.append(p)
    return found


def leaks_solution(hint: str, solutions: Iterable[str]) -> bool:
    """True when the hint contains a reference solution, or a payload of one that is specific enough to
    be the answer (at least 3 characters, or a multi-digit number) as a whole token.

    >>> leaks_solution("The code is 417, box it.", ["\\\\boxed{417}"])
    True
    >>> leaks_solution("Compare digits one at a time.", ["\\\\boxed{417}"])
    False
    """
    return bool(leaked_values(hint, solutions))


MAX_QUOTED_LEAKS = 5  # values quoted back to the model in a rewrite request
MAX_QUOTED_CHARS = 80


def rewrite_messages(
    code: str, kind: str, max_words: int, hint: str, leaked: Iterable[str], style: str = "ours"
) -> list[dict[str, str]]:
    """The request for a rewrite of ``hint``, which gave away ``leaked``: the original hint conversation, the
    hint as the model's reply, and a turn that says what leaked and asks for a hint without the answer.

    >>> m = rewrite_messages("class E: ...", "game", 50, "Box 417.", ["417"])
    >>> [x["role"] for x in m], "'417'" in m[-1]["content"], "at most 50 words" in m[-1]["content"]
    (['system', 'user', 'assistant', 'user'], True, True)
    """
    values = [v[:MAX_QUOTED_CHARS] for v in leaked][:MAX_QUOTED_LEAKS]
    quoted = ", ".join(repr(v) for v in values) or "part of the solution"
    rules = (
        "a value-free plan: tool roles and their order, placeholders instead of concrete values or ids"
        if kind == "tool"
        else "the key insight and the exact answer format, never the answer or the moves themselves"
    )
    return [
        *hint_messages(code, kind, max_words, style),
        {"role": "assistant", "content": hint},
        {
            "role": "user",
            "content": f"That hint gives the answer away: it contains {quoted}, which is (part of) the solution "
            "the player has to find. Write a new hint that does not contain these values or any other part of "
            f"the solution, at most {max_words} words: {rules}. Reply with the hint only.",
        },
    ]


def hint_row(env_id: str, hint: str, solutions: Iterable[str], model_ref: str) -> dict[str, Any]:
    return {"env_id": env_id, "hint": hint, "leaks_solution": leaks_solution(hint, solutions), "model_ref": model_ref}


def leaked_env_ids(hints: pd.DataFrame) -> set[str]:
    """The environments whose stored (final) hint still leaks the solution: they get no regret term.

    >>> sorted(leaked_env_ids(pd.DataFrame({"env_id": ["a", "b"], "leaks_solution": [True, False]})))
    ['a']
    """
    if hints.empty:
        return set()
    return set(hints.loc[hints["leaks_solution"].astype(bool), "env_id"])
