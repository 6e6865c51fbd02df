"""Scripted agents for tests: they exercise the engine's and the trainer's bookkeeping independently of
what the tiny model happens to say."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sandbox.session import EnvSession
from spade_core.envs.contract import split_actions
from spade_core.llm.base import Completion, GenerationRequest, SamplingParams


@dataclass
class OracleAgent:
    """A scripted policy that replies with the reference solution's next action (tests the engine's
    bookkeeping of returns independently of what the tiny model happens to say)."""

    answers: dict[str, list[str]]
    model_ref: str = "scripted:oracle"
    supports_token_prompts: bool = False
    calls: list[int] = field(default_factory=list)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        self.calls.append(len(requests))
        out = []
        for r in requests:
            turn = sum(m["role"] == "assistant" for m in r.messages)
            out.append(Completion(text=self.answers[r.messages[1]["content"]][turn]))
        return out

    def close(self) -> None:
        pass


@dataclass
class Scripted:
    """A policy that plays a fixed script per environment seed (read off the first user message, which
    starts "seed N:"); ``fail`` names seeds whose model call fails. Replies that run past the script repeat
    its last line; a reply given as ``(text, "length")`` comes back as cut at the token limit. ``calls``
    counts the replies per seed, across retries."""

    scripts: dict[int, list[str | tuple[str, str]]]
    fail: frozenset[int] = frozenset()
    model_ref: str = "scripted:test"
    supports_token_prompts: bool = False
    calls: dict[int, int] = field(default_factory=dict)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        out = []
        for r in requests:
            first = next(m["content"] for m in r.messages if m["role"] == "user")
            seed = int(re.search(r"seed (\d+):", first).group(1))  # type: ignore[union-attr]
            n = self.calls.get(seed, 0)
            self.calls[seed] = n + 1
            if seed in self.fail:
                out.append(Completion(text="", error="the server said no"))
                continue
            script = self.scripts[seed]
            reply = script[min(n, len(script) - 1)]
            text, finish = reply if isinstance(reply, tuple) else (reply, "stop")
            out.append(Completion(text=text, finish_reason=finish))
        return out

    def close(self) -> None:
        pass


def oracle_answers(envs, seed: int, max_turns: int = 8) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """First observation -> the reference solution's actions, for each environment at ``seed``."""
    answers = {}
    for env in envs:
        with EnvSession(env.code, max_turns=max_turns) as session:
            session.open()
            obs = session.reset(seed).data["obs"]
            answers[obs] = split_actions(session.solution().data["solution"])
    return answers


@dataclass
class InOrder:
    """Each request gets the next of ``replies``, as written (a scripted designer); ``requests`` keeps what
    it was asked."""

    replies: list[str]
    model_ref: str = "scripted:in-order"
    supports_token_prompts: bool = False
    requests: list[GenerationRequest] = field(default_factory=list)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        out = []
        for r in requests:
            self.requests.append(r)
            out.append(Completion(text=self.replies[len(self.requests) - 1], token_ids=[1]))
        return out

    def close(self) -> None:
        pass


@dataclass
class FailFirst:
    """Another generator whose first ``failures`` requests fail as a server's would (``Completion.error``):
    a play whose model call failed, then a healthy engine."""

    inner: Scripted
    failures: int
    model_ref: str = "scripted:fail-first"
    supports_token_prompts: bool = False

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        failing, self.failures = min(self.failures, len(requests)), max(0, self.failures - len(requests))
        failed = [Completion(text="", finish_reason="error", error="HTTP 503: the engine restarts")] * failing
        return failed + (self.inner.generate(requests[failing:], params) if requests[failing:] else [])

    def close(self) -> None:
        pass
