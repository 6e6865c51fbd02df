"""Generators for tasks: loaded at most once per worker process, and only when a stage really runs.

A stage asks for the model through a *lease* (:data:`spade_core.pipeline.stage.GeneratorLease`); the lease
resolves the model a step plays with (checkpoint ``step``, the newest complete one at or before it, downloaded
or merged once by :mod:`spade_core.checkpoints`), loads it on first use and keeps it for the next stage
in the same process. An in-process model (``transformers``) serves one stage at a time — shards of a
stage then run one after another at full batch size, each finishing (and being kept) on its own —
while server backends (``openai``, ``vllm``) take concurrent stages. Loading a newer checkpoint closes the
models no stage holds. Before training on a device the generator shares (one GPU), the flow releases every
model so the trainer gets the memory: the two take turns, the server restarting after the update.
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
_IN_USE: dict[str, int] = {}  # leases currently held, per model
_TURN = threading.Condition(_LOCK)  # held by the trainer while it has a device the generator shares
_TRAINING = threading.Event()


def _load(model_cfg: Any) -> tuple[str, Generator, threading.Lock | None]:
    """The model of ``model_cfg``, loaded once; loading a new one first closes the models no lease holds
    (an older checkpoint: with overlapping stages two checkpoints may be in use at once, never more)."""
    key = model_cfg.model_dump_json()
    stale: list[tuple[Generator, threading.Lock | None]] = []
    with _LOCK:
        _TURN.wait_for(lambda: not _TRAINING.is_set())  # the trainer has the shared device: wait for it
        if key not in _LOADED:
            from spade_core.llm import make_generator

            stale = [_LOADED.pop(k) for k in list(_LOADED) if not _IN_USE.get(k)]
            in_process = model_cfg.backend == "transformers"
            _LOADED[key] = (make_generator(model_cfg), threading.Lock() if in_process else None)
        _IN_USE[key] = _IN_USE.get(key, 0) + 1
        generator, exclusive = _LOADED[key]
    _close(stale)
    return key, generator, exclusive


def _close(held: list[tuple[Generator, threading.Lock | None]]) -> None:
    for generator, exclusive in held:
        if exclusive is not None:
            with exclusive:  # wait for a stage still using it
                generator.close()
        else:
            generator.close()
    if held:
        import gc

        gc.collect()


@contextlib.contextmanager
def _leased(model_cfg: Any) -> Iterator[Generator]:
    key, generator, exclusive = _load(model_cfg)
    try:
        if exclusive is None:
            yield generator
            return
        with exclusive:
            yield generator
    finally:
        with _LOCK:
            _IN_USE[key] -= 1


def lease_for(cfg: Any, store: Store, run_id: str, step: int) -> GeneratorLease:
    """The lease of the model global step ``step`` plays with: checkpoint ``step`` (nothing is resolved
    until it is used)."""

    def lease() -> contextlib.AbstractContextManager[Generator]:
        from spade_core.checkpoints import model_cfg_for_step

        return _leased(model_cfg_for_step(cfg, store, run_id, step))

    return lease


def release_models(wait: bool = True) -> int:
    """Close the models this process holds: all of them, waiting for stages still using one (``wait``), or
    only those no stage holds. Returns how many were closed."""
    with _LOCK:
        keys = [k for k in _LOADED if wait or not _IN_USE.get(k)]
        held = [_LOADED.pop(k) for k in keys]
    _close(held)
    return len(held)


@contextlib.contextmanager
def device_turn(shared: bool) -> Iterator[None]:
    """Around a stage that needs the machine to itself (the trainer, the evaluator).

    ``shared`` (the generator and the trainer share a GPU): every model is closed, waiting for a stage that
    uses one, and no model loads until the stage ends — the two take turns, and the generator is restarted
    (reloaded) afterwards. Otherwise (CPU, or separate devices) only idle models are closed, so that a stage
    of the next generation running beside keeps its model and its progress.
    """
    if not shared:
        release_models(wait=False)
        yield
        return
    with _LOCK:
        _TRAINING.set()
    try:
        release_models(wait=True)
        yield
    finally:
        with _LOCK:
            _TRAINING.clear()
            _TURN.notify_all()
