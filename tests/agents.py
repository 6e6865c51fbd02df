"""Scripted agents for tests: they exercise the engine's and the trainer's bookkeeping independently of
what the tiny model happens to say."""

from __future__ import annotations

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


def oracle_answers(envs, seed: int, max_turns: int = 8) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    """First observation -> the reference solution's actions, for each environment at ``seed``."""
    answers = {}
    for env in envs:
        with EnvSession(env.code, max_turns=max_turns) as session:
            session.open()
            obs = session.reset(seed).data["obs"]
            answers[obs] = split_actions(session.solution().data["solution"])
    return answers
