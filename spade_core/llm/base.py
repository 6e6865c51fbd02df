"""The generator protocol: batched chat generation returning text, token ids and log-probs.

A request carries chat ``messages`` and, for backends that accept them, the exact ``prompt_ids`` to
continue (the rollout engine keeps every episode as token ids so training sees exactly what the model saw).

A multi-turn caller may also name the conversation a request continues (``cache_slot``): a backend that
keeps KV caches (the ``transformers`` one) then prefills only the tokens added since that conversation's
previous call, and frees the cache on :meth:`KVCacheOwner.release`. Backends that cannot reuse caches
ignore the slot; the completion is the same either way (exact under greedy decoding, docs/DESIGN.md §8).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable


class ModelError(RuntimeError):
    """A model could not be loaded or reached; one line naming the model, path or URL."""


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.6
    top_p: float = 1.0
    top_k: int | None = None  # None: no top-k cut
    max_new_tokens: int = 256
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: bool = False

    @classmethod
    def from_config(cls, model_cfg: Any, **overrides: Any) -> SamplingParams:
        base = {
            "temperature": model_cfg.temperature,
            "top_p": model_cfg.top_p,
            "top_k": model_cfg.top_k,
            "max_new_tokens": model_cfg.max_new_tokens,
        }
        base.update(overrides)
        return cls(**base)


@dataclass(frozen=True)
class CacheSlot:
    """Where a backend may keep one conversation's KV cache between calls.

    ``key`` names the conversation (unique among those live at once on one generator); ``max_tokens`` bounds
    the cache kept under it: a conversation that grows past it loses its cache, and its next call is a full
    prefill.
    """

    key: str
    max_tokens: int


@dataclass
class GenerationRequest:
    messages: list[dict[str, str]]
    prompt_ids: list[int] | None = None
    tools: list[dict[str, Any]] | None = None
    seed: int | None = None  # per-request sampling seed (server backends); identical prompts must differ
    cache_slot: CacheSlot | None = None  # the conversation this prompt continues, for KV-cache reuse


@dataclass
class Completion:
    text: str
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    finish_reason: str = "stop"  # "stop" (end of turn or stop string) | "length"
    prompt_tokens: int = 0
    cached_tokens: int = 0  # prompt tokens served from a kept KV cache instead of prefilled again
    error: str | None = None  # set when this one request failed (the batch still completes)


@runtime_checkable
class Generator(Protocol):
    """Batched generation. ``generate`` never raises for one bad request: it sets ``Completion.error``."""

    model_ref: str
    supports_token_prompts: bool

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]: ...

    def close(self) -> None: ...


@runtime_checkable
class KVCacheOwner(Protocol):
    """A generator that keeps KV caches under :class:`CacheSlot` keys between calls.

    Contract: a cache is only ever reused for a prompt that starts with the tokens it was computed from
    (a key that names a different conversation costs a full prefill, never a wrong answer); a caller
    releases a key once its conversation is over, and the backend frees that memory at once. Releasing an
    unknown key is a no-op. A wrapper around such a generator defines ``release`` itself: the check looks at
    the class, so a method forwarded through ``__getattr__`` goes unseen (and the caches would leak).
    """

    def release(self, keys: Iterable[str]) -> None: ...


SEED_BOUND = 2**63  # a server's request seed is a signed int64; torch.Generator takes any seed below 2^64


def request_seed(own: int | None, call: int | None, index: int) -> int | None:
    """The seed a request samples with: its own; else the call's seed plus its index in the call (identical
    prompts in one seeded call must differ); None when neither is set (sampled afresh).

    >>> request_seed(7, 100, 3), request_seed(None, 100, 3), request_seed(None, None, 3)
    (7, 103, None)
    """
    if own is not None:
        return own % SEED_BOUND
    return None if call is None else (call + index) % SEED_BOUND


def seeded(requests: list[GenerationRequest], params: SamplingParams) -> list[GenerationRequest]:
    """The requests, each with the seed it samples with (:func:`request_seed`)."""
    return [replace(r, seed=request_seed(r.seed, params.seed, i)) for i, r in enumerate(requests)]
