"""Token budgets against the model's context window, checked before a run writes anything (docs/DESIGN.md §4).

Every config field bounded by ``TOKEN_LIMIT`` is a token budget (a conversation limit or a number of new
tokens); none of those in use may exceed the model's context window, ``max_position_embeddings`` in its
``config.json``. The window is read from a local model directory, the converted embedded model, or the
Hugging Face cache, and never from the network: a hub model not cached here is not checked (its engine
refuses the request later).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from annotated_types import Le
from pydantic import BaseModel

from spade_core.config import TOKEN_LIMIT, ConfigError, SpadeConfig
from spade_core.llm.embedded import EMBEDDED, EMBEDDED_DIRNAME, cache_dir

# SmolLM2-135M-Instruct's max_position_embeddings, for when its converted directory is not built yet.
EMBEDDED_CONTEXT = 8192
# Budgets of a feature that may be off: checked only when it is on.
_IN_USE: dict[str, Callable[[SpadeConfig], bool]] = {
    "validation.llm_validator_max_new_tokens": lambda cfg: cfg.validation.llm_validator,
}


def local_model_file(name_or_path: str, filename: str) -> Path | None:
    """Where the model's ``filename`` lies on this machine (the converted embedded model, a local directory or
    the Hugging Face cache; it may not exist there), or None for a hub model not in the cache."""
    if name_or_path == EMBEDDED:
        return cache_dir() / "models" / EMBEDDED_DIRNAME / filename
    local = Path(name_or_path).expanduser()
    if local.is_dir():
        return local / filename
    try:
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(name_or_path, filename)
    except ValueError:  # not a hub id either: resolving the model names the bad value later
        return None
    return Path(cached) if isinstance(cached, str) else None


def context_window(name_or_path: str) -> int | None:
    """The model's context window in tokens, or None when its ``config.json`` is not on this machine.

    >>> context_window("embedded")
    8192
    >>> context_window("no-such-org/no-such-model") is None
    True
    """
    path = local_model_file(name_or_path, "config.json")
    if path is None or not path.is_file():
        return EMBEDDED_CONTEXT if name_or_path == EMBEDDED else None
    try:
        data: Any = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    config = data.get("text_config", data) if isinstance(data, dict) else {}  # multimodal configs nest it
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and value > 0 else None


def token_budgets(section: BaseModel, prefix: str = "") -> Iterator[tuple[str, int]]:
    """``(key, value)`` of every set field of ``section`` (recursively) bounded by ``TOKEN_LIMIT``.

    >>> dict(token_budgets(SpadeConfig()))["rollout.max_context_tokens"]
    4096
    """
    for name, field in type(section).model_fields.items():
        value = getattr(section, name)
        if isinstance(value, BaseModel):
            yield from token_budgets(value, f"{prefix}{name}.")
        elif isinstance(value, int) and any(isinstance(m, Le) and m.le == TOKEN_LIMIT for m in field.metadata):
            yield f"{prefix}{name}", value


def check_token_budgets(cfg: SpadeConfig) -> None:
    """Refuse a config with a token budget beyond the model's context window, naming key, value and window.

    >>> check_token_budgets(SpadeConfig())  # doctest: +ELLIPSIS
    >>> check_token_budgets(SpadeConfig.model_validate({"rollout": {"max_context_tokens": 9000}}))
    Traceback (most recent call last):
    ...
    spade_core.config.ConfigError: rollout.max_context_tokens=9000 exceeds the context window of model 'embedded' ...
    """
    window = context_window(cfg.model.name_or_path)
    if window is None:
        return
    for key, value in token_budgets(cfg):
        if value > window and _IN_USE.get(key, lambda _: True)(cfg):
            raise ConfigError(
                f"{key}={value} exceeds the context window of model {cfg.model.name_or_path!r} "
                f"({window} tokens, max_position_embeddings in its config.json); lower it or use a longer-context model"
            )
