"""The ``transformers`` backend (default; CPU or GPU): batched, left-padded generation.

Prompts are token ids (from the request, or the chat template applied to its messages); the batch is
left-padded so every sequence's last prompt token sits at the same position. Returns the sampled token
ids per sequence (trailing padding removed), their text, and optionally their log-probs under the
sampling distribution.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spade_core.llm.base import Completion, GenerationRequest, ModelError, SamplingParams
from spade_core.llm.embedded import resolve_model


def pick_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("model.device is 'cuda' but no CUDA device is available; use device=auto or cpu")
    return device


def pick_dtype(dtype: str, device: str) -> Any:
    import torch

    if dtype == "auto":
        return torch.bfloat16 if device == "cuda" else torch.float32
    return getattr(torch, dtype)


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    return tokenizer


class TransformersGenerator:
    """Batched generation with ``model.generate`` on a local HF directory (or hub id with internet)."""

    supports_token_prompts = True

    def __init__(
        self, name_or_path: str = "embedded", device: str = "auto", dtype: str = "auto", batch_size: int = 32
    ) -> None:
        import torch
        from transformers import AutoModelForCausalLM

        path = resolve_model(name_or_path)
        self.device = pick_device(device)
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

    @classmethod
    def from_config(cls, model_cfg: Any) -> TransformersGenerator:
        return cls(model_cfg.name_or_path, model_cfg.device, model_cfg.dtype, model_cfg.batch_size)

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        if request.prompt_ids is not None:
            return list(request.prompt_ids)
        ids = self.tokenizer.apply_chat_template(
            request.messages, add_generation_prompt=True, tokenize=True, tools=request.tools or None
        )
        return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        out: list[Completion] = []
        if params.seed is not None:  # once per call: later chunks continue the stream, never repeat it
            self._torch.manual_seed(params.seed)
        for start in range(0, len(requests), self.batch_size):
            out.extend(self._generate_batch(requests[start : start + self.batch_size], params))
        return out

    def _generate_batch(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        torch = self._torch
        prompts = [self.prompt_ids(r) for r in requests]
        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=self.device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        kwargs: dict[str, Any] = {
            "max_new_tokens": params.max_new_tokens,
            "do_sample": params.temperature > 0,
            "pad_token_id": pad,
            "return_dict_in_generate": True,
            "output_scores": params.logprobs,
        }
        if params.temperature > 0:
            kwargs.update(temperature=params.temperature, top_p=params.top_p, top_k=0)
        if params.stop:
            kwargs.update(stop_strings=list(params.stop), tokenizer=self.tokenizer)
        with torch.inference_mode():
            result = self.model.generate(input_ids=input_ids, attention_mask=attention, **kwargs)
        new_tokens = result.sequences[:, width:]
        scores = None
        if params.logprobs:
            scores = self.model.compute_transition_scores(result.sequences, result.scores, normalize_logits=True)
        eos = set(_as_list(self.model.generation_config.eos_token_id)) | {self.tokenizer.eos_token_id}
        completions = []
        for i, row in enumerate(new_tokens.tolist()):
            ids = _trim(row, eos, pad)
            finish = "stop" if (ids and ids[-1] in eos) or len(ids) < params.max_new_tokens else "length"
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            logprobs = [float(x) for x in scores[i, : len(ids)].tolist()] if scores is not None else None
            completions.append(
                Completion(
                    text=text, token_ids=ids, logprobs=logprobs, finish_reason=finish, prompt_tokens=len(prompts[i])
                )
            )
        return completions

    def close(self) -> None:
        self.model = None

    def __repr__(self) -> str:
        return f"TransformersGenerator({Path(self.path).name}, device={self.device})"


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
