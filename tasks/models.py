"""Generators for tasks: loaded at most once per worker process, and only when a stage really runs.

A stage asks for the model through a *lease* (:data:`spade_core.pipeline.stage.GeneratorLease`); the lease
resolves the model a step plays with (checkpoint ``step``, the newest complete one at or before it, downloaded
or merged once by :mod:`spade_core.checkpoints`), loads it on first use and keeps it for the next stage
in the same process. An in-process model (``transformers``) serves one stage at a time — shards of a
stage then run one after another at full batch size, each finishing (and being kept) on its own —
while server backends (``openai``, ``vllm``) take concurrent stages. Before training, the flow releases
every model so the trainer gets the memory (and the GPU).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

from spade_core.llm.base import Generator
from spade_core.pipeline.stage import GeneratorLease
from spade_core.store import Store

_LOCK = threading.Lock()
_LOADED: dict[str, tuple[Generator, threading.Lock | None]] = {}


def _load(model_cfg: Any) -> tuple[Generator, threading.Lock | None]:
    key = model_cfg.model_dump_json()
    with _LOCK:
        if key not in _LOADED:
            from spade_core.llm import make_generator

            in_process = model_cfg.backend == "transformers"
            _LOADED[key] = (make_generator(model_cfg), threading.Lock() if in_process else None)
        return _LOADED[key]


@contextlib.contextmanager
def _leased(model_cfg: Any) -> Iterator[Generator]:
    generator, exclusive = _load(model_cfg)
    if exclusive is None:
        yield generator
        return
    with exclusive:
        yield generator


def lease_for(cfg: Any, store: Store, run_id: str, step: int) -> GeneratorLease:
    """The lease of the model global step ``step`` plays with: checkpoint ``step`` (nothing is resolved
    until it is used)."""

    def lease() -> contextlib.AbstractContextManager[Generator]:
        from spade_core.checkpoints import model_cfg_for_step

        return _leased(model_cfg_for_step(cfg, store, run_id, step))

    return lease


def release_models() -> int:
    """Close every model this process holds (before training; at the end of a flow run)."""
    with _LOCK:
        held = list(_LOADED.values())
        _LOADED.clear()
    for generator, exclusive in held:
        if exclusive is not None:
            with exclusive:  # wait for a stage still using it
                generator.close()
        else:
            generator.close()
    if held:
        import gc

        gc.collect()
    return len(held)
