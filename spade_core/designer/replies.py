"""A designer's reply as a ``designs`` row: the code taken from it, a reply lost at its deadline, the ids.

Code is taken from the reply's ```python block (:func:`extract_code`); with ``designer.mode: parameters`` the
code is the parent with the parameter values the reply sets. A reply past its deadline is stored without
code (:func:`late_reply`) and validated as a ``deadline``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from spade_core.config import skill_kind
from spade_core.designer.parameters import MAX_ITEMS, variant_code
from spade_core.envs.contract import env_id_for
from spade_core.hashing import short_hash

_FENCE = re.compile(r"```[ \t]*(?P<lang>[\w+-]*)[ \t]*\n(?P<body>.*?)(?:```|\Z)", re.S)


def extract_code(reply: str) -> str | None:
    """The environment code in a model reply, or None.

    Prefers a fenced block (```python, ```py or bare ```; an unclosed final fence counts) that defines a
    class with ``reset`` and ``step``; else the longest fenced block; else the reply itself when it looks
    like a module with such a class.

    >>> extract_code("Here:\\n```python\\nclass E:\\n    def reset(self): ...\\n    def step(self, a): ...\\n```")
    'class E:\\n    def reset(self): ...\\n    def step(self, a): ...\\n'
    >>> extract_code("no code here") is None
    True
    """
    if not isinstance(reply, str) or not reply.strip():
        return None
    blocks = [
        m.group("body") for m in _FENCE.finditer(reply) if m.group("lang").lower() in ("", "python", "py", "python3")
    ]
    blocks = [b.strip("\n") + "\n" for b in blocks if b.strip()]
    env_like = [b for b in blocks if _looks_like_env(b)]
    if env_like:
        return max(env_like, key=len)
    if blocks:
        return max(blocks, key=len)
    return reply.strip() + "\n" if _looks_like_env(reply) else None


def _looks_like_env(text: str) -> bool:
    return bool(
        re.search(r"^class\s+\w+", text, re.M) and "def reset" in text and ("def step" in text or "ToolEnv" in text)
    )


# The stored completion of a design attempt whose reply did not come back by its deadline (designer.attempt_deadline_s
# or batch_deadline_s): no code, and its verdict is a ``deadline`` (spade_core.designer.retries).
LATE_REPLY = "[deadline] "


def late_reply(error: str) -> str:
    """The completion stored for a reply abandoned at its deadline (``error``: the completion's error).

    >>> late_reply("deadline: no reply within 300 s (designer.attempt_deadline_s)")
    '[deadline] no reply within 300 s (designer.attempt_deadline_s)'
    """
    return LATE_REPLY + error.removeprefix("deadline:").strip()


def is_late_reply(completion: Any, completion_ids: Any) -> bool:
    """Whether a design row's reply was abandoned at its deadline (:func:`late_reply`; such a row has no tokens).

    >>> is_late_reply(late_reply("deadline: x"), None), is_late_reply("[deadline] x", [1, 2]), is_late_reply("hi", None)
    (True, False, False)
    """
    no_tokens = completion_ids is None or (not isinstance(completion_ids, str) and len(completion_ids) == 0)
    return isinstance(completion, str) and completion.startswith(LATE_REPLY) and no_tokens


def design_id_for(run_id: str, gen: int, doc_id: str | None, skill: str, index: int) -> str:
    key = f"{run_id}:{gen}:{doc_id}:{skill}:{index}"
    return short_hash(key)


def design_row(
    *,
    design_id: str,
    doc_id: str | None,
    group_id: str,
    skill: str,
    messages: list[dict[str, str]],
    completion: str,
    model_ref: str,
    parent_env_id: str | None = None,
    parent_code: str | None = None,
    parameters: bool = False,
    max_items: int = MAX_ITEMS,
) -> dict[str, Any]:
    """One ``designs`` row (``prompt`` = the chat messages as JSON); ``code`` / ``env_id`` are None when the
    reply holds no code; ``parent_env_id`` names the environment a mutation rewrote (None: written anew).
    ``parameters`` (``designer.mode: parameters``): the code is the parent (``parent_code``) with the
    parameter values the reply sets (:func:`spade_core.designer.parameters.variant_code`), None when it sets none, a
    value is beyond the bounds, or the parent is unknown (never a whole module of the reply's)."""
    if parameters or parent_code is not None:
        code = None if parent_code is None else variant_code(parent_code, completion, max_items)
    else:
        code = extract_code(completion)
    prompt = json.dumps(messages)  # the exact chat messages, so the trainer re-renders the same prompt
    return {
        "design_id": design_id,
        "doc_id": doc_id,
        "group_id": group_id,
        "skill": skill,
        "kind": skill_kind(skill),
        "prompt": prompt,
        "completion": completion,
        "code": code,
        "env_id": env_id_for(code) if code else None,
        "model_ref": model_ref,
        "parent_env_id": parent_env_id,
    }
