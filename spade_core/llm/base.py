"""The generator protocol: batched chat generation returning text, token ids and log-probs.

A request carries chat ``messages`` and, for backends that accept them, the exact ``prompt_ids`` to
continue (the rollout engine keeps every episode as token ids so training sees exactly what the model saw).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


class ModelError(RuntimeError):
    """A model could not be loaded or reached; one line naming the model, path or URL."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.6
    top_p: float = 1.0
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False

    @classmethod
    def from_config(cls, model_cfg: Any, **overrides: Any) -> SamplingParams:
        base = {
            "temperature": model_cfg.temperature,
            "top_p": model_cfg.top_p,
            "max_new_tokens": model_cfg.max_new_tokens,
        }
        base.update(overrides)
        return cls(**base)


@dataclass
class GenerationRequest:
    messages: list[dict[str, str]]
    prompt_ids: list[int] | None = None
    tools: list[dict[str, Any]] | None = None
    seed: int | None = None  # per-request sampling seed (server backends); identical prompts must differ


@dataclass
class Completion:
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    finish_reason: str = "stop"  # "stop" (end of turn or stop string) | "length"
    prompt_tokens: int = 0
    error: str | None = None  # set when this one request failed (the batch still completes)


@runtime_checkable
class Generator(Protocol):
    """Batched generation. ``generate`` never raises for one bad request: it sets ``Completion.error``."""

    model_ref: str
    supports_token_prompts: bool

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]: ...

    def close(self) -> None: ...
