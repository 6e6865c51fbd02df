"""Generation backends behind one protocol (docs/DESIGN.md §8): transformers (default), openai, vllm."""

from __future__ import annotations

from typing import Any

from spade_core.llm.base import Completion, GenerationRequest, Generator, ModelError, SamplingParams

__all__ = ["Completion", "GenerationRequest", "Generator", "ModelError", "SamplingParams", "make_generator"]


def make_generator(model_cfg: Any, devices: list[int] | None = None) -> Generator:
    """The configured backend, on ``devices`` (``orchestration.generation_devices``; None: what this process
    sees); heavy imports happen only for the one chosen."""
    if model_cfg.backend == "transformers":
        from spade_core.llm.hf import TransformersGenerator  # only the chosen backend's dependencies load

        return TransformersGenerator.from_config(model_cfg, devices)
    if model_cfg.backend == "openai":
        from spade_core.llm.openai_api import OpenAIGenerator  # only the chosen backend's dependencies load

        return OpenAIGenerator.from_config(model_cfg)
    from spade_core.llm.vllm_server import VLLMGenerator  # only the chosen backend's dependencies load

    return VLLMGenerator(model_cfg, devices=devices)
