"""The ``model`` section (the model, its backend and sampling) and a request's sampling cut."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from spade_core.config.base import TOKEN_LIMIT, _Section


class ModelConfig(_Section):
    name_or_path: str = Field("embedded", description="'embedded' (SmolLM2-135M-Instruct), a local HF dir or hub id.")
    backend: Literal["transformers", "openai", "vllm"] = Field("transformers", description="Generation backend.")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL (backend=openai).")
    api_key_env: str = Field("OPENAI_API_KEY", description="Variable holding the API key (never stored).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Device for the transformers backend.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Weights dtype.")
    temperature: float = Field(0.6, ge=0.0, le=2.0, description="Sampling temperature [paper: 0.6].")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="Nucleus sampling [0.95].")
    top_k: int | None = Field(
        20,
        ge=1,
        description="Top-k sampling [20]; None = off. The openai backend sends it as vLLM/SGLang's extra "
        "`top_k` field: set None for a server that rejects it.",
    )
    max_new_tokens: int = Field(1024, gt=0, le=TOKEN_LIMIT, description="Tokens per generation call.")
    enable_thinking: bool | None = Field(
        None,
        description="Passed as enable_thinking to a chat template that reads it (Qwen3's), wherever this project "
        "renders a chat [None = not passed; false in the paper presets, as the authors' "
        "--apply-chat-template-kwargs '{\"enable_thinking\":false}'].",
    )
    batch_size: int = Field(32, gt=0, description="Max sequences per batched generate call.")
    threads: int | None = Field(
        None,
        ge=1,
        description="CPU threads for torch (transformers backend, trainer); None = the CPUs idle when the "
        "model loads (another busy process costs a core, not a spinning barrier).",
    )
    request_timeout_s: float = Field(120.0, gt=0, description="Per-request timeout (openai/vllm).")
    max_retries: int = Field(3, ge=0, description="Retries with backoff on transient model errors.")
    health_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="backend=vllm: seconds the engine's health probe (a one-token request) may take before the "
        "engine counts as hung and is replaced; a request that times out asks for the probe first.",
    )
    server_command: list[str] | None = Field(
        None,
        description="backend=vllm: server launch template with {python} {model} {host} {port} {dtype} {seed} "
        "(None = vLLM's OpenAI server from the engine's environment, built by 'make vllm-env').",
    )
    engine_kv_cache_gib: float = Field(
        1.0,
        ge=0.125,
        le=1024,
        description="backend=vllm on a CPU: the engine's KV cache in GiB (--kv-cache-memory-bytes); 1 GiB holds "
        "~45k tokens of the 135M model in bf16, ~23k in fp32, and it must hold one request of max_model_len.",
    )
    max_model_len: int | None = Field(
        None,
        gt=0,
        le=TOKEN_LIMIT,
        description="backend=vllm: the engine's context length (--max-model-len; None = the model's window).",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description="backend=vllm on GPUs: GPUs per engine replica (--tensor-parallel-size); a replica's share of "
        "orchestration.generation_devices must hold it.",
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="backend=vllm on GPUs: the share of each GPU's memory the engine takes (None = vLLM's 0.9).",
    )
    reload_timeout_s: float = Field(
        600.0,
        gt=0,
        le=86400,
        description="backend=vllm: seconds a weight reload, a sleep or a wake may take (a large model's reload "
        "outlasts a request's timeout); one that fails restarts the engine on the checkpoint.",
    )
    engine_sleep: bool | None = Field(
        None,
        description="backend=vllm: at the trainer's turn on a shared device the engine sleeps (level 1: weights to "
        "host memory, KV cache freed; --enable-sleep-mode) and wakes after, instead of a restart; None = on a GPU "
        "only (vLLM's CPU build has no sleep mode: there the engine is stopped and started again).",
    )
    engine_eager: bool | None = Field(
        None,
        description="backend=vllm: run without CUDA graphs / torch.compile (--enforce-eager); None = on a CPU "
        "only, where the compile cache does not load and every start would recompile for minutes.",
    )
    engine_dtype: Literal["auto", "float32", "bfloat16", "float16"] | None = Field(
        None,
        description="backend=vllm: the engine's dtype (--dtype); None = model.dtype. The trainer keeps the "
        "checkpoint's dtype: the difference is in the TIS weights and the log-prob mismatch of the train metrics.",
    )


def sampling_cut(model: ModelConfig, top_p: float | None, top_k: int | None) -> dict[str, Any]:
    """``top_p`` and ``top_k`` of a request that may set its own: None keeps the model's, top_k 0 = no cut.

    >>> m = ModelConfig()
    >>> sampling_cut(m, None, None), sampling_cut(m, 0.9, 0)
    ({'top_p': 0.95, 'top_k': 20}, {'top_p': 0.9, 'top_k': None})
    """
    return {
        "top_p": model.top_p if top_p is None else top_p,
        "top_k": model.top_k if top_k is None else (top_k or None),
    }
