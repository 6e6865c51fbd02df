"""Generators for stages: loaded at most once per process, and only when a stage really runs (the Prefect
tasks' worker processes and the local runner alike).

A stage asks for the model through a *lease* (:data:`spade_core.pipeline.stage.GeneratorLease`); the lease
resolves the model a step plays with (checkpoint ``step``, the newest complete one at or before it, downloaded
or merged once by :mod:`spade_core.store.checkpoints`), loads it on first use and keeps it for the next stage
in the same process. An in-process model (``transformers``) serves one stage at a time — shards of a
stage then run one after another at full batch size, each finishing (and being kept) on its own —
while server backends (``openai``, ``vllm``) take concurrent stages. Loading a newer checkpoint closes the
models no stage holds — except an idle vLLM server, which takes the new weights in place
(:meth:`~spade_core.llm.vllm_server.VLLMGenerator.load_checkpoint`). Before training on a device the
generator shares (one GPU), the flow releases every model so the trainer gets the memory: the two take
turns, the server restarting after the update.
"""

from __future__ import annotations

import contextlib
import gc
import json
import threading
from collections.abc import Iterator
from typing import Any

from spade_core.llm import make_generator
from spade_core.llm.base import Generator
from spade_core.pipeline.stage import GeneratorLease
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import model_cfg_for_step

_LOCK = threading.Lock()
_CHANGED = threading.Condition(_LOCK)  # notified when a lease ends or a device turn ends
_LOADED: dict[str, tuple[Generator, threading.Lock | None]] = {}
_IN_USE: dict[str, int] = {}  # leases currently held, per model
_TURNS = [0]  # stages that have the shared device to themselves (the trainer): no model loads meanwhile


def _idle(key: str) -> bool:
    return not _IN_USE.get(key)


def _evict(keep: str | None = None) -> list[tuple[Generator, threading.Lock | None]]:
    """Take every loaded model no lease holds (but ``keep``) out of the cache; the caller closes them."""
    return [_LOADED.pop(k) for k in list(_LOADED) if k != keep and _idle(k)]


def _load(model_cfg: Any, one_at_a_time: bool) -> tuple[str, Generator, threading.Lock | None]:
    """The model of ``model_cfg``, loaded once. Loading a new one first closes the models no lease holds
    (an older checkpoint). ``one_at_a_time`` (a GPU): it also waits until no stage holds another model, so
    two servers never share the device — stages on different checkpoints then take turns."""
    key = model_cfg.model_dump_json()
    with _LOCK:
        _CHANGED.wait_for(lambda: _TURNS[0] == 0)  # the trainer has the shared device: wait for it
        if one_at_a_time:
            _CHANGED.wait_for(lambda: _TURNS[0] == 0 and all(_idle(k) for k in _LOADED if k != key))
        if key not in _LOADED:
            reloadable = _reloadable(key)
            if reloadable is not None:  # the same server, the next checkpoint: its weights are swapped in place
                _LOADED[key] = _LOADED.pop(reloadable)
                _close(_evict(keep=key))
                _LOADED[key][0].load_checkpoint(model_cfg.name_or_path)  # type: ignore[attr-defined]
            else:
                _close(_evict(keep=key))  # idle: nobody waits on their locks
                in_process = model_cfg.backend == "transformers"
                _LOADED[key] = (make_generator(model_cfg), threading.Lock() if in_process else None)
        _IN_USE[key] = _IN_USE.get(key, 0) + 1
        generator, exclusive = _LOADED[key]
    return key, generator, exclusive


def _reloadable(key: str) -> str | None:
    """A loaded model no lease holds that can take ``key``'s checkpoint in place: a server backend that
    reloads weights (``load_checkpoint``) whose settings equal ``key``'s but for the checkpoint."""
    wanted = json.loads(key)
    wanted.pop("name_or_path")
    for loaded in _LOADED:
        settings = json.loads(loaded)
        settings.pop("name_or_path")
        if settings == wanted and _idle(loaded) and _reloads(loaded):
            return loaded
    return None


def _reloads(key: str) -> bool:
    return callable(getattr(_LOADED[key][0], "load_checkpoint", None))


def _close(held: list[tuple[Generator, threading.Lock | None]]) -> None:
    for generator, _exclusive in held:
        generator.close()
    if held:
        gc.collect()


@contextlib.contextmanager
def _leased(model_cfg: Any, one_at_a_time: bool) -> Iterator[Generator]:
    key, generator, exclusive = _load(model_cfg, one_at_a_time)
    try:
        if exclusive is None:
            yield generator
            return
        with exclusive:
            yield generator
    finally:
        with _LOCK:
            _IN_USE[key] -= 1
            _CHANGED.notify_all()


def lease_for(cfg: Any, store: Store, run_id: str, step: int) -> GeneratorLease:
    """The lease of the model global step ``step`` plays with: checkpoint ``step`` (nothing is resolved
    until it is used). On a GPU one model is loaded at a time."""

    def lease() -> contextlib.AbstractContextManager[Generator]:

        return _leased(model_cfg_for_step(cfg, store, run_id, step), cfg.model.device != "cpu")

    return lease


def release_models(wait: bool = True, keep_reloadable: bool = False) -> int:
    """Close the models this process holds: all of them once no stage uses one (``wait``), or only those no
    stage holds now. ``keep_reloadable`` keeps the servers that take the next checkpoint in place (a vLLM
    engine on the CPU: its own process, reloaded in a second instead of restarted in a minute). Returns how
    many were closed."""
    with _LOCK:
        if wait:
            _CHANGED.wait_for(lambda: all(_idle(k) for k in _LOADED))
        held = [_LOADED.pop(k) for k in list(_LOADED) if _idle(k) and not (keep_reloadable and _reloads(k))]
    _close(held)
    return len(held)


@contextlib.contextmanager
def device_turn(shared: bool) -> Iterator[None]:
    """Around a stage that needs the machine to itself (the trainer, the evaluator).

    ``shared`` (the generator and the trainer share a GPU): no model loads from now until the stage ends;
    the stages holding one finish first, then every model is closed — the two take turns, and the
    generator is reloaded (a vLLM server restarted) afterwards. Otherwise (CPU, or separate devices) only
    idle models are closed, so that a stage of the next generation running beside keeps its model, and a
    server that reloads weights in place stays up for the next checkpoint.
    """
    if not shared:
        release_models(wait=False, keep_reloadable=True)
        yield
        return
    with _LOCK:
        _TURNS[0] += 1
    try:
        release_models(wait=True)
        yield
    finally:
        with _LOCK:
            _TURNS[0] -= 1
            _CHANGED.notify_all()
