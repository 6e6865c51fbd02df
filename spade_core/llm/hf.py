"""The ``transformers`` backend (default; CPU or GPU): batched, left-padded generation.

Prompts are token ids (from the request, or the chat template applied to its messages); the batch is
left-padded so every sequence's last prompt token sits at the same position. Returns the sampled token
ids per sequence (trailing padding removed), their text, and optionally their log-probs under the
sampling distribution.

KV-cache reuse across turns (docs/DESIGN.md §8). A request with a ``cache_slot`` leaves its conversation's
keys and values behind under the slot's key (prompt and reply, at most ``max_tokens`` of them: a longer
conversation's cache is dropped, and its next turn is a full prefill). Its next request reuses them for the
longest prefix the new prompt shares with the tokens they cover, and prefills only the rest. In one batch,
row ``i`` reuses ``c_i`` tokens and prefills ``n_i``; the rows are laid out as

    [pad]*(C - c_i) + kept_i + [pad]*(N - n_i) + new_i        C = max c_i, N = max n_i

with the attention mask 0 on every pad, so ``generate`` (which derives position ids from the mask's cumsum)
gives each real token the position it had in a full prefill, and the batched cache is the kept ones
left-padded to ``C``. Afterwards each row's cache is cut back out, padding dropped. Rows that reuse a cache
and rows that prefill everything run as separate batches (padding a few new tokens up to a whole prompt
would prefill the padding). Only models whose every layer is plain full attention take part; for others
the slot is ignored.

Sampling is per request (spade_core/llm/seeded.py): each row draws from its own generator, seeded with the
request's seed (else the call's seed plus the row's index), so a reply depends on its prompt, its seed and
the weights only, never on the rest of the batch or on other threads drawing from torch meanwhile.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade_core.devices import in_process_device
from spade_core.llm.base import (
    SEED_BOUND,
    CacheSlot,
    Completion,
    GenerationRequest,
    ModelError,
    SamplingParams,
    seeded,
)
from spade_core.llm.chat_tokens import ChatTokens, template_kwargs
from spade_core.llm.embedded import resolve_model
from spade_core.threads import use_threads


def pick_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError("model.device is 'cuda' but no CUDA device is available; use device=auto or cpu")
    return device


def pick_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return getattr(torch, dtype)


_TOKENIZER_IMPORT = threading.Lock()  # transformers' lazy module is not safe to import from two threads at once


def load_tokenizer(path: str) -> Any:
    with _TOKENIZER_IMPORT:  # engine replicas start in threads of their own
        from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


def can_reuse_cache(model: Any) -> bool:
    """Whether a conversation's cache can be cut out of a batch and padded into another: only when every
    layer keeps plain full-attention keys/values (a sliding window or a recurrent state cannot be shifted)."""
    from transformers import DynamicCache
    from transformers.cache_utils import DynamicLayer

    config = model.config
    if getattr(config, "is_encoder_decoder", False) or not model._supports_default_dynamic_cache():
        return False
    try:
        probe = DynamicCache(config=config.get_text_config(decoder=True))
    except (ValueError, TypeError, KeyError):
        return False
    return bool(probe.layers) and all(type(layer) is DynamicLayer for layer in probe.layers)


@dataclass
class _KeptCache:
    """One conversation's keys/values, ``(layers, 2, heads, len(token_ids), head_dim)``, and their tokens."""

    token_ids: list[int]
    kv: Any


@dataclass
class _Row:
    """One request in a batch: its prompt, the first ``reused`` tokens of which come from a kept cache."""

    prompt: list[int]
    slot: CacheSlot | None
    seed: int = 0  # its sampling seed (spade_core/llm/seeded.py)
    reused: int = 0
    kv: Any = None  # the kept keys/values of those tokens, (layers, 2, heads, reused, head_dim)

    @property
    def new(self) -> list[int]:
        return self.prompt[self.reused :]


class TransformersGenerator:
    """Batched generation with ``model.generate`` on a local HF directory (or hub id with internet)."""

    supports_token_prompts = True

    def __init__(
        self,
        name_or_path: str = "embedded",
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 32,
        threads: int | None = None,
        enable_thinking: bool | None = None,
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        path = resolve_model(name_or_path)
        self.device = pick_device(device)
        if self.device == "cpu":
            self.threads = use_threads(threads)
        self.batch_size = batch_size
        self.model_ref = name_or_path if name_or_path != "embedded" else "embedded:smollm2-135m-instruct"
        try:
            self.tokenizer = load_tokenizer(path)
            model: Any = AutoModelForCausalLM.from_pretrained(path, dtype=pick_dtype(dtype, self.device))
        except (OSError, ValueError) as exc:
            raise ModelError(f"cannot load model {name_or_path!r}: {str(exc).splitlines()[0]}") from None
        self.model: Any = model.to(self.device).eval()
        self.path = path
        self._torch = torch
        self.reuses_cache = can_reuse_cache(self.model)
        self._kept: dict[str, _KeptCache] = {}
        # model.enable_thinking, passed to a chat template that reads it (as the rollout's own rendering does)
        self.template_extra = ChatTokens(self.tokenizer, None, template_kwargs(enable_thinking)).extra

    @classmethod
    def from_config(cls, model_cfg: Any, devices: list[int] | None = None) -> TransformersGenerator:
        return cls(
            model_cfg.name_or_path,
            in_process_device(pick_device(model_cfg.device), devices),
            model_cfg.dtype,
            model_cfg.batch_size,
            model_cfg.threads,
            model_cfg.enable_thinking,
        )

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        if request.prompt_ids is not None:
            return list(request.prompt_ids)
        ids = self.tokenizer.apply_chat_template(
            request.messages,
            add_generation_prompt=True,
            tokenize=True,
            tools=request.tools or None,
            **self.template_extra,
        )
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    # -- kept caches -------------------------------------------------------------------------------------
    def release(self, keys: Iterable[str]) -> None:
        """Free the caches kept under ``keys`` (their conversations are over); unknown keys are ignored."""
        for key in keys:
            self._kept.pop(key, None)

    @property
    def kept_tokens(self) -> int:
        """Tokens whose keys/values are held between calls, over every kept conversation."""
        return sum(len(kept.token_ids) for kept in self._kept.values())

    def _row(self, request: GenerationRequest) -> _Row:
        """The request's prompt, with the kept cache of its slot taken out of the store for the longest
        prefix it shares with the prompt (at least one prompt token is always left to prefill)."""
        row = _Row(self.prompt_ids(request), request.cache_slot if self.reuses_cache else None)
        kept = self._kept.pop(row.slot.key, None) if row.slot is not None else None
        if kept is not None:
            row.reused = max(0, min(common_prefix(kept.token_ids, row.prompt), len(row.prompt) - 1))
            row.kv = kept.kv[:, :, :, : row.reused] if row.reused > 0 else None
        return row

    def _keep(self, rows: list[_Row], completions: list[Completion], cache: Any, width: int) -> None:
        """Cut each slotted row's keys/values out of the batch's cache (padding dropped) and keep them."""
        if cache is None:
            return
        torch = self._torch
        fed = cache.get_seq_length() - width  # sampled tokens fed back (the last one sampled never is)
        past = width - max(len(r.new) for r in rows)
        for i, (row, completion) in enumerate(zip(rows, completions, strict=True)):
            generated = min(len(completion.token_ids), fed)
            covered = row.prompt + completion.token_ids[:generated]
            if row.slot is None or len(covered) > row.slot.max_tokens:
                continue
            positions = torch.cat(
                [
                    torch.arange(past - row.reused, past),
                    torch.arange(width - len(row.new), width + generated),
                ]
            ).to(self.device)
            kv = torch.stack(
                [torch.stack([layer.keys[i][:, positions], layer.values[i][:, positions]]) for layer in cache.layers]
            )
            self._kept[row.slot.key] = _KeptCache(covered, kv)

    # -- generation --------------------------------------------------------------------------------------
    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        out: list[Completion | None] = [None] * len(requests)
        rows = [self._row(r) for r in requests]
        for row, request in zip(rows, seeded(requests, params), strict=True):
            row.seed = request.seed if request.seed is not None else random.SystemRandom().randrange(SEED_BOUND)
        for batch in batches(rows, self.batch_size):
            for i, completion in zip(batch, self._generate_batch([rows[i] for i in batch], params), strict=True):
                out[i] = completion
        return [c for c in out if c is not None]

    def _batch_inputs(self, rows: list[_Row]) -> tuple[Any, Any, Any]:
        """Input ids, attention mask and (when rows reuse kept caches) the batched cache, laid out as the
        module docstring draws: kept tokens right-aligned at ``C``, new tokens right-aligned at ``C + N``."""
        torch = self._torch
        pad = self.tokenizer.pad_token_id
        past, new = max(r.reused for r in rows), max(len(r.new) for r in rows)
        ids, mask = [], []
        for r in rows:
            gap_past, gap_new = [pad] * (past - r.reused), [pad] * (new - len(r.new))
            ids.append(gap_past + r.prompt[: r.reused] + gap_new + r.new)
            mask.append([0] * len(gap_past) + [1] * r.reused + [0] * len(gap_new) + [1] * len(r.new))
        input_ids = torch.tensor(ids, device=self.device)
        attention = torch.tensor(mask, device=self.device)
        return input_ids, attention, self._batched_cache(rows, past) if past else None

    def _batched_cache(self, rows: list[_Row], past: int) -> Any:
        """The rows' kept caches as one ``DynamicCache``, each left-padded with zeros to ``past`` tokens
        (masked out, so the zeros are never attended to)."""
        from transformers import DynamicCache

        torch = self._torch
        layers, _, heads, _, head_dim = next(r.kv for r in rows if r.kv is not None).shape
        merged = torch.zeros((layers, 2, len(rows), heads, past, head_dim), dtype=self.model.dtype, device=self.device)
        for i, r in enumerate(rows):
            if r.reused:
                merged[:, :, i, :, past - r.reused :] = r.kv
            r.kv = None  # the merged copy is the only one now
        return DynamicCache(
            ddp_cache_data=[(merged[layer, 0], merged[layer, 1]) for layer in range(layers)],
            config=self.model.config.get_text_config(decoder=True),
        )

    def _generate_batch(self, rows: list[_Row], params: SamplingParams) -> list[Completion]:
        with self._torch.inference_mode():  # kept caches are built, used and cut out without autograd
            return self._generate_rows(rows, params)

    def _generate_rows(self, rows: list[_Row], params: SamplingParams) -> list[Completion]:
        input_ids, attention, cache = self._batch_inputs(rows)
        width = input_ids.shape[1]
        pad = self.tokenizer.pad_token_id
        kwargs: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "do_sample": False,  # greedy, or the seeded sampler's one choice per row
            "pad_token_id": pad,
            "return_dict_in_generate": True,
            "output_logits": params.logprobs,
        }
        if cache is not None:
            kwargs["cache"] = cache
        if params.temperature > 0:
            from transformers import LogitsProcessorList  # heavy, as torch in __init__: loaded when it generates

            from spade_core.llm.seeded import SeededSampler, request_generators  # torch, likewise

            generators = request_generators([r.seed for r in rows])
            sampler = SeededSampler(generators, params.temperature, params.top_k, params.top_p)
            kwargs["logits_processor"] = LogitsProcessorList([sampler])
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        result = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        new_tokens = result.sequences[:, width:]
        scores = None
        if params.logprobs:
            # The raw distribution's log-probs (temperature 1, no top-k/top-p), as vLLM returns by default and
            # as the trainer computes them: on-policy, the importance ratio is 1 (docs/DESIGN.md §7.2).
            scores = self.model.compute_transition_scores(result.sequences, result.logits, normalize_logits=True)
        eos = set(_as_list(self.model.generation_config.eos_token_id)) | {self.tokenizer.eos_token_id}
        completions = []
        for i, row in enumerate(new_tokens.tolist()):
            ids = _trim(row, eos, pad)
            finish = "stop" if (ids and ids[-1] in eos) or len(ids) < params.max_new_tokens else "length"
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            logprobs = [float(x) for x in scores[i, : len(ids)].tolist()] if scores is not None else None
            completions.append(
                Completion(
                    text=text,
                    token_ids=ids,
                    logprobs=logprobs,
                    finish_reason=finish,
                    prompt_tokens=len(rows[i].prompt),
                    cached_tokens=rows[i].reused,
                )
            )
        if any(r.slot is not None for r in rows):
            self._keep(rows, completions, getattr(result, "cache", None), width)
        return completions

    def close(self) -> None:
        self._kept.clear()
        self.model = None

    def __repr__(self) -> str:
        return f"TransformersGenerator({Path(self.path).name}, device={self.device})"


def batches(rows: list[_Row], size: int) -> list[list[int]]:
    """Indices of the rows to run together, at most ``size`` at a time: rows that prefill their whole
    prompt apart from rows that reuse a kept cache (in one batch, every row prefills as many positions as
    the longest new part)."""
    fresh = [i for i, r in enumerate(rows) if not r.reused]
    reusing = [i for i, r in enumerate(rows) if r.reused]
    return [group[s : s + size] for group in (fresh, reusing) for s in range(0, len(group), size)]


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix of two token lists.

    >>> common_prefix([1, 2, 3, 4], [1, 2, 5])
    2
    """
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _as_list(value: Any) -> list[int]:
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [int(value)]


def _trim(row: list[int], eos: set[int], pad: int) -> list[int]:
    """Sampled ids up to and including the first end-of-turn token; padding after it dropped."""
    for j, tok in enumerate(row):
        if tok in eos:
            return row[: j + 1]
    return row
