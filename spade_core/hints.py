"""Hints (docs/DESIGN.md §7 step 5): the same model reads an environment's source and writes a short hint.

Rules given to the model: at most ``rollout.hint_max_words`` words [100]; the key insight and the answer
format, never the answer itself; for tool use a value-free procedural plan (which tools, in which order).
A hint that contains the reference solution is flagged ``leaks_solution`` (it is still stored, so the
leak rate is visible; the pipeline decides what to do with leaking hints).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

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


def leaks_solution(hint: str, solutions: Iterable[str]) -> bool:
    """True when the hint contains a reference solution, or a payload of one that is specific enough to
    be the answer (at least 3 characters, or a multi-digit number) as a whole token.

    >>> leaks_solution("The code is 417, box it.", ["\\\\boxed{417}"])
    True
    >>> leaks_solution("Compare digits one at a time.", ["\\\\boxed{417}"])
    False
    """
    text = _normalise(hint)
    for solution in solutions:
        if solution.strip() and _normalise(solution) in text:
            return True
        for payload in solution_payloads(solution):
            p = _normalise(payload)
            specific = len(p) >= 3 or (p.isdigit() and len(p) >= 2)
            if specific and re.search(rf"(?<![\w]){re.escape(p)}(?![\w])", text):
                return True
    return False


def hint_row(env_id: str, hint: str, solutions: Iterable[str], model_ref: str) -> dict[str, Any]:
    return {"env_id": env_id, "hint": hint, "leaks_solution": leaks_solution(hint, solutions), "model_ref": model_ref}
