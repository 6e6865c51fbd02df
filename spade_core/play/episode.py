"""An episode's state while the rollout engine plays it (:mod:`spade_core.play.rollout`).

:class:`EpisodeSpec` says what to play; :class:`Episode` is one attempt at it: its jail, the conversation as
messages and as token ids with a loss mask (1 on the agent's sampled tokens, 0 on the rest) and behaviour
log-probs, the rewards, and how it ended; :class:`Turn` is one agent reply to play in the jail;
:class:`RolloutStats` counts what an engine did over all its runs. The episode return is that of
DESIGN.md §5 (:func:`sandbox.outcome.episode_return`): the last reward clamped to [-1, 1] if the episode
terminated, else 0; a play with an ``error_type`` returns 0.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from typing import Any

from sandbox.outcome import episode_return
from sandbox.session import EnvSession


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: an environment, a seed and a condition (with its hint)."""

    env_id: str
    code: str
    seed: int
    condition: str = "no_hint"
    hint: str | None = None
    play: int = 0  # index among the plays of the same (env, seed, condition)

    @property
    def episode_id(self) -> str:
        key = f"{self.env_id}:{self.condition}:{self.seed}:{self.play}"
        return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass
class Episode:
    """One attempt at playing a spec, in its own jail."""

    spec: EpisodeSpec
    session: EnvSession
    messages: list[dict[str, str]] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    # the behaviour policy's log-prob of each agent token (0 on environment tokens, NaN when unknown)
    logprobs: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    done: bool = False
    error_type: str | None = None
    error: str | None = None
    generated_tokens: int = 0
    cache_key: str | None = None  # the slot its KV cache is kept under, until released
    attempt: int = 0  # 0 = the first play; k = the k-th retry after the environment broke it
    model_attempt: int = 0  # k = the k-th retry after a model call failed (rollout.model_retries)
    reply_start: int = 0  # where the last reply's tokens begin in token_ids
    env_steps: int = 0  # replies that went to the environment's step (tool-call turns do not)
    # rollout.hinted_play_rules=authors on a hinted play: a failure scores 0 (kept), and no episode rule cuts a game
    authors_hinted: bool = False
    started: float = field(default_factory=time.monotonic)  # when this attempt began (rollout.play_deadline_s)

    def fail(self, error_type: str, message: str | None) -> None:
        if self.authors_hinted:  # the authors' hinted arm: a failed play is a 0 (orchestrator.py:1783-1917)
            self.messages.append({"role": "user", "content": f"[play failed: {error_type}] {message or ''}".strip()})
            self.error, self.terminated, self.done = message, False, True
            return
        self.error_type, self.error, self.done = error_type, message, True

    @property
    def free_of_rules(self) -> bool:
        """A hinted game play under the authors' rules: no end-of-turn or context-margin rule cuts it. Their
        tool-use hinted plays go through the no-hint tool path and keep both (``orchestrator.py:1839-1850``)."""
        return self.authors_hinted and self.session.kind != "tool"

    @property
    def episode_return(self) -> float:
        """clamp(last reward, -1, 1) if the episode terminated cleanly, else 0 (:func:`episode_return`)."""
        return episode_return(self.rewards, self.terminated) if self.error_type is None else 0.0


@dataclass(frozen=True)
class Turn:
    """An agent reply to play: the action for ``step``, or the tool calls to run outside it."""

    episode: Episode
    action: str
    calls: list[tuple[str, dict[str, Any]]]
    eos: bool  # the reply ended with the end-of-turn token
    malformed: bool = False  # a <tool_call> was written and none parsed (native protocol)


@dataclass
class RolloutStats:
    episodes: int = 0
    turns: int = 0
    generate_calls: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0  # summed over every request: what a full prefill of each turn would feed
    cached_tokens: int = 0  # of those, served from a kept KV cache instead of prefilled
    errors: dict[str, int] = field(default_factory=dict)  # error_type -> rows that kept it (after retries)
    messages: dict[str, str] = field(default_factory=dict)  # error_type -> the first such row's message
    retries: int = 0  # plays started again because the environment broke them
    model_retries: int = 0  # plays started again because a model call failed
