"""The designer (docs/DESIGN.md §7 steps 1–4): skills, the design prompt, code extraction, repair rounds.

One document prompt yields ``designer.group_size`` designs (G), which form one GRPO group for the
designer. The prompt quotes the environment contract from its single source
(:data:`spade_core.envs.contract.CONTRACT`), the target skill and difficulty, memory examples (positive:
same skill, in-band win rate, high regret; negative: too easy or too hard) and asks for a *different*
environment. Code is taken from the reply's ```python block; validation happens in the jail.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

from spade_core.config import GAME_SKILLS, TOOL_SKILLS, DesignerConfig, skill_kind
from spade_core.envs.contract import CONTRACT, env_id_for
from spade_core.hashing import short_hash

SKILL_TEXT = {skill: skill.replace("_", " ") for skill in GAME_SKILLS + TOOL_SKILLS}

DESIGNER_SYSTEM = (
    "You are an expert designer of multi-turn text environments that train and test a language-model "
    "agent. You write complete, self-contained Python code that follows the contract exactly."
)

_FENCE = re.compile(r"```[ \t]*(?P<lang>[\w+-]*)[ \t]*\n(?P<body>.*?)(?:```|\Z)", re.S)


class MemoryExample(Protocol):
    """An environment from memory shown to the designer, with what the agent did on it
    (:class:`spade_core.memory.MemoryEntry` is one)."""

    @property
    def skill(self) -> str: ...

    @property
    def code(self) -> str: ...

    @property
    def win_rate(self) -> float: ...

    @property
    def regret(self) -> float: ...


def skills_for_generation(gen: int, cfg: DesignerConfig) -> list[str]:
    """Round-robin subset of ``skills_per_generation`` skills per kind (docs/DESIGN.md §7 step 1).

    >>> from spade_core.config import DesignerConfig
    >>> skills_for_generation(1, DesignerConfig(kind="game", skills_per_generation=3))
    ['mathematical_reasoning', 'logical_deduction', 'spatial_reasoning']
    >>> skills_for_generation(2, DesignerConfig(kind="game", skills_per_generation=3))
    ['pattern_recognition', 'optimization', 'causal_inference']
    """
    pools = {"game": [GAME_SKILLS], "tool": [TOOL_SKILLS], "both": [GAME_SKILLS, TOOL_SKILLS]}[cfg.kind]
    chosen: list[str] = []
    for pool in pools:
        start = ((gen - 1) * cfg.skills_per_generation) % len(pool)
        chosen += [pool[(start + i) % len(pool)] for i in range(cfg.skills_per_generation)]
    return chosen


def _example_block(example: MemoryExample, label: str) -> str:
    return (
        f"### {label} (skill: {SKILL_TEXT.get(example.skill, example.skill)}; agent win rate "
        f"{example.win_rate:.2f}; regret {example.regret:+.2f})\n```python\n{example.code.strip()}\n```"
    )


def design_messages(
    document: str | None,
    skill: str,
    difficulty: str,
    positives: Sequence[MemoryExample] = (),
    negatives: Sequence[MemoryExample] = (),
) -> list[dict[str, str]]:
    """The chat prompt of one design (docs/DESIGN.md §7 step 3)."""
    kind = skill_kind(skill)
    parts = []
    if document:
        parts.append(
            "Here is a document. Ground the environment in its subject matter (entities, facts, "
            f"processes), so that playing it exercises knowledge or reasoning about it.\n\n<document>\n"
            f"{document.strip()}\n</document>"
        )
    parts.append(f"Environment contract:\n\n{CONTRACT}")
    kind_text = (
        "a GAME environment (actions are \\boxed{...} commands)"
        if kind == "game"
        else "a TOOL-USE environment (subclass spade_env.ToolEnv; tools are tool_* methods)"
    )
    parts.append(
        f"Target skill: {SKILL_TEXT[skill]}. Difficulty: {difficulty}. Write {kind_text}. It should be "
        "solvable by a careful agent within the turn budget, but not by guessing."
    )
    if positives:
        parts.append(
            "Environments at the right level for the agent (learn from their style):\n\n"
            + "\n\n".join(_example_block(e, f"Good example {i + 1}") for i, e in enumerate(positives))
        )
    if negatives:
        parts.append(
            "Environments at the wrong level (the agent almost always or almost never wins):\n\n"
            + "\n\n".join(_example_block(e, f"Bad example {i + 1}") for i, e in enumerate(negatives))
        )
    parts.append(
        "Create a NEW environment that is different from the examples. Reply with a one-sentence "
        "summary, then the complete module in a single ```python block."
    )
    return [{"role": "system", "content": DESIGNER_SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def repair_messages(messages: list[dict[str, str]], reply: str, error_type: str, message: str) -> list[dict[str, str]]:
    """A repair round: the failed reply and the validator's message, asking for the full corrected module."""
    return [
        *messages,
        {"role": "assistant", "content": reply},
        {
            "role": "user",
            "content": f"The environment failed validation ({error_type}): {message}\n"
            "Fix it. Reply with the complete corrected module in one ```python block.",
        },
    ]


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
) -> dict[str, Any]:
    """One ``designs`` row (``prompt`` = the chat messages as JSON); ``code`` / ``env_id`` are None when the
    reply holds no code."""
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
    }
