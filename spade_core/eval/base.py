"""The contract of a held-out evaluation suite, and the answer-extraction helpers the suites share.

A suite selects items deterministically from a seed (:meth:`Suite.items`), each with chat ``messages`` and
a stable, traceable ``item_id``; the runner generates the model's replies; :meth:`Suite.score` turns the
final response into ``(score in [0, 1], passed)``. Garbage never raises: it scores 0.

Multi-turn suites (BFCL multi-turn) also implement :meth:`Suite.follow_up_many`: after each reply, the
next messages to append (tool results, the next user turn), or ``None`` when the episode is over; then
:meth:`Suite.final_response` packs the replies into the one ``response`` string that is stored and scored.

A suite whose dialogue has a second party played by the same model (τ²-bench's simulated user) answers a
:class:`SimulatedTurn` instead of messages, from :meth:`Suite.first_turn` or a follow-up: the runner
generates that party's reply in the same batched call as the agents' replies, keeps it out of the agent's
conversation and hands it to :meth:`Suite.simulated_reply_many`, which answers like a follow-up.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from spade_core.config import ConfigError

Message = dict[str, str]


@dataclass
class SimulatedTurn:
    """A reply the runner asks of the model in another role (a simulated user): ``messages`` is that role's
    whole view of the dialogue, system prompt included. The reply goes to :meth:`Suite.simulated_reply_many`,
    not into the agent's conversation."""

    messages: list[Message]


FollowUp = list[Message] | SimulatedTurn | None


class UnknownSuiteError(ConfigError):
    """An evaluation suite name that is not in the registry; the message names it and the allowed names."""


@dataclass
class EvalItem:
    """One held-out item: the prompt, the gold answer (for oracles and debugging) and what scoring needs."""

    suite: str
    item_id: str
    messages: list[Message]
    answer: Any = None
    data: dict[str, Any] = field(default_factory=dict)


class Suite(ABC):
    """One evaluation suite: deterministic items by seed, a prompt per item, a scorer of responses."""

    name: ClassVar[str]
    max_new_tokens: ClassVar[int] = 512  # per reply; the runner may cap it
    # Sampling of the suite's replies: greedy unless a suite samples as its benchmark does.
    temperature: ClassVar[float] = 0.0
    top_p: ClassVar[float] = 1.0
    top_k: ClassVar[int | None] = None

    @abstractmethod
    def items(self, limit: int, seed: int) -> list[EvalItem]:
        """Up to ``limit`` items, the same for the same ``seed`` on any machine."""

    @abstractmethod
    def item(self, item_id: str) -> EvalItem:
        """The item an ``item_id`` names (as stored in ``evals``), rebuilt; KeyError for an unknown id."""

    @abstractmethod
    def score(self, item: EvalItem, response: str) -> tuple[float, bool]:
        """``(score in [0, 1], passed)`` of ``response``; malformed responses score ``(0.0, False)``."""

    @abstractmethod
    def gold_response(self, item: EvalItem) -> str:
        """A response in the requested format that carries the reference answer (it must score 1)."""

    def score_many(self, items: Sequence[EvalItem], responses: Sequence[str]) -> list[tuple[float, bool]]:
        """Score a batch (suites that execute code override this to run jails in parallel)."""
        return [self.score(item, response) for item, response in zip(items, responses, strict=True)]

    def new_state(self, item: EvalItem) -> dict[str, Any]:
        """Per-episode state handed to :meth:`follow_up_many` (multi-turn suites only)."""
        return {}

    def first_turn(self, item: EvalItem, state: dict[str, Any]) -> SimulatedTurn | None:
        """A turn of the other role that opens the episode before the agent's first reply (default: none)."""
        return None

    def follow_up_many(
        self, items: Sequence[EvalItem], replies: Sequence[list[str]], states: Sequence[dict[str, Any]]
    ) -> Sequence[FollowUp]:
        """For each live episode, the messages to append after its latest reply, a :class:`SimulatedTurn`,
        or None when it is over.

        Single-turn suites end after the first reply.
        """
        return [None] * len(items)

    def simulated_reply_many(
        self, items: Sequence[EvalItem], texts: Sequence[str], states: Sequence[dict[str, Any]]
    ) -> Sequence[FollowUp]:
        """For each episode that was asked a :class:`SimulatedTurn`, what follows the model's reply ``text``
        in that role: messages for the agent, another simulated turn, or None when the episode is over."""
        raise NotImplementedError(f"suite {self.name} asks for no simulated turns")

    def final_response(self, item: EvalItem, replies: list[str], state: dict[str, Any]) -> str:
        """The stored and scored response of a finished episode (single turn: the reply itself)."""
        return replies[-1] if replies else ""


# -- answer extraction ------------------------------------------------------------------------------------

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL)


def last_boxed(text: str) -> str | None:
    r"""The content of the last ``\boxed{...}`` in ``text`` (balanced braces), or None.

    >>> last_boxed(r"so \boxed{x} then \boxed{\frac{1}{2}}")
    '\\frac{1}{2}'
    >>> last_boxed("no box") is None
    True
    """
    start = text.rfind("\\boxed{")
    while start != -1:
        depth, i = 0, start + len("\\boxed")
        for j in range(i, len(text)):
            if text[j] == "{":
                depth += 1
            elif text[j] == "}":
                depth -= 1
                if depth == 0:
                    return text[i + 1 : j]
        start = text.rfind("\\boxed{", 0, start)  # unbalanced: try an earlier one
    return None


def extract_final_answer(text: str) -> str | None:
    r"""The final answer: the last ``<answer>...</answer>`` or ``\boxed{...}``, whichever comes later.

    >>> extract_final_answer("think... <answer> 42 </answer>")
    '42'
    >>> extract_final_answer(r"<answer>1</answer> no wait \boxed{2}")
    '2'
    >>> extract_final_answer("42") is None
    True
    """
    tags = list(_ANSWER_TAG.finditer(text))
    tag_pos, tag = (tags[-1].start(), tags[-1].group(1)) if tags else (-1, None)
    box_pos = text.rfind("\\boxed{")
    boxed = last_boxed(text) if box_pos != -1 else None
    if boxed is not None and box_pos > tag_pos:
        return boxed.strip()
    return tag.strip() if tag is not None else None


def code_blocks(text: str) -> list[tuple[str, str]]:
    """Fenced code blocks as ``(language, code)``, in order; an unterminated last fence runs to the end.

    >>> code_blocks("hi\\n```python\\nx = 1\\n```\\nbye")
    [('python', 'x = 1\\n')]
    """
    return [(m.group(1).lower(), m.group(2)) for m in _FENCE.finditer(text)]
