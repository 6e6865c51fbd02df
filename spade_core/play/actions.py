"""What a game's ``step`` receives from an agent's reply (``rollout.action``).

With ``boxed`` the game gets ``\\boxed{X}`` for the reply's answer ``X``, as the authors'
``parse_action`` (``spade/core/utils/parsing.py:7-79``): ``X`` is the first ``\\boxed{...}`` whose content
has no braces; failing that, the brace-balanced content of the *last* ``\\boxed{`` with at most two outer
brace pairs stripped; a reply without one is passed whole (stripped). ``reply`` passes the reply as it is
(the environment parses it). Tool-use environments always get the reply: their calls are not boxed.
"""

from __future__ import annotations

import re

# The authors' three patterns, tried in order: \boxed{X}, \boxed{{X}}, \boxed{{{X}}} with X brace-free.
_FLAT = [re.compile(r"\\boxed" + r"\{" * n + r"([^{}]+)" + r"\}" * n) for n in (1, 2, 3)]


def boxed_answer(reply: str) -> str | None:
    """The answer inside the reply's ``\\boxed{}``, or None.

    >>> boxed_answer(r"try \\boxed{3} then \\boxed{4}")
    '3'
    >>> boxed_answer(r"\\boxed{\\frac{1}{2}}")
    '\\\\frac{1}{2}'
    >>> boxed_answer(r"\\boxed{{x}}"), boxed_answer("no answer"), boxed_answer(r"\\boxed{ }")
    ('x', None, None)
    """
    if not reply:
        return None
    for pattern in _FLAT:
        match = pattern.search(reply)
        if match and match.group(1).strip():
            return match.group(1).strip()
    start = reply.find("{", reply.rfind("\\boxed")) if "\\boxed" in reply else -1
    if start < 0:
        return None
    depth = 0
    for index in range(start, len(reply)):
        depth += {"{": 1, "}": -1}.get(reply[index], 0)
        if depth == 0:
            content = reply[start + 1 : index].strip()
            for _ in range(2):
                if content.startswith("{") and content.endswith("}"):
                    content = content[1:-1].strip()
            return content or None
    return None


def game_action(reply: str, mode: str) -> str:
    """The action a game's ``step`` receives for ``reply`` under ``rollout.action`` = ``mode``.

    >>> game_action(r"I think \\boxed{left}. Or \\boxed{right}", "boxed")
    '\\\\boxed{left}'
    >>> game_action("  no box  ", "boxed"), game_action(r"say \\boxed{a}", "reply")
    ('no box', 'say \\\\boxed{a}')
    """
    if mode == "reply":
        return reply
    answer = boxed_answer(reply)
    return f"\\boxed{{{answer}}}" if answer else reply.strip()
