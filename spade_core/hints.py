"""Hints (docs/DESIGN.md §7 step 5): the same model reads an environment's source and writes a short hint.

Rules given to the model: at most ``rollout.hint_max_words`` words [100]; the key insight and the answer
format, never the answer itself; for tool use a value-free procedural plan (which tools, in which order).

A hint that contains a reference solution (or a specific value of one, :func:`leaked_values`) leaks it. The
hint stage then asks the model to rewrite it, up to ``rollout.hint_rewrites`` [1] times, with
:func:`rewrite_messages`: the conversation so far plus a turn that quotes what leaked and asks for a hint
that does not give the answer away. The last hint is stored with ``leaks_solution`` of that last hint, so
the leak rate stays visible; an environment whose stored hint still leaks is still played with it (the data
is kept), but gets no regret term (:mod:`spade_core.scoring`, ``env_scores.hint_leaked``). The authors check
no leak at all (docs/DESIGN.md §7 step 5; their prompt only asks the model not to reveal the answer).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import pandas as pd

from spade_core.envs.contract import parse_answer, parse_boxed, parse_tool_calls, split_actions

HINT_SYSTEM = "You write short, precise hints for players of text environments."


def hint_messages(code: str, kind: str, max_words: int) -> list[dict[str, str]]:
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


def rewrite_messages(code: str, kind: str, max_words: int, hint: str, leaked: Iterable[str]) -> list[dict[str, str]]:
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
        *hint_messages(code, kind, max_words),
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
