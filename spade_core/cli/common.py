"""Options and error handling shared by the ``spade`` commands."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Annotated, Any

import typer

from sandbox.policy import SandboxUnavailable
from spade_core.config import ConfigError, SpadeConfig
from spade_core.designer.corpus import CorpusError
from spade_core.llm.base import ModelError
from spade_core.pipeline.run_config import resolve_config
from spade_core.store.artifacts import Store, StoreError
from spade_core.store.runlock import RunLocked
from spade_core.store.schemas import SchemaError

PresetOpt = Annotated[str, typer.Option("--preset", help="Config preset from data/configs/ (tiny, gpu-1x, gpu-8x).")]
ConfigOpt = Annotated[str | None, typer.Option("--config", help="YAML file applied on top of the preset.")]
SetOpt = Annotated[
    list[str] | None, typer.Option("--set", help="Dotted override, repeatable: --set rollout.plays_no_hint=4.")
]
StoreOpt = Annotated[
    str | None, typer.Option("--store", help="Store root (path or s3://bucket/prefix); overrides store.root.")
]


resolve = resolve_config  # every command resolves its config the one way (spade_core.pipeline.run_config)


def open_store(cfg: SpadeConfig) -> Store:
    return Store.from_config(cfg.store)


def clean_errors[F: Callable[..., Any]](fn: F) -> F:
    """Turn a bad config, path, store, missing sandbox or a run id in use into one line on stderr and exit
    code 2."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (
            ConfigError,
            StoreError,
            SchemaError,
            SandboxUnavailable,
            ModelError,
            CorpusError,
            FileNotFoundError,
            RunLocked,
        ) as exc:
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None

    return wrapper  # type: ignore[return-value]
