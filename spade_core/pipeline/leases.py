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

The models belong to a :class:`ModelPool` that the runner makes and passes down: the local runner makes one
per run (scripts and tests make their own). A Prefect task takes only serialisable arguments and runs in
whatever process its task runner picked, so the Prefect seam (``tasks/stages.py``, ``flows/generation.py``)
asks for the pool of its process, :func:`process_pool`, the one such instance, made on first use.
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


class ModelPool:
    """The generators one runner has loaded for its stages, lent out as leases (see the module doc)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # notified when a lease ends or a device turn ends
        self._loaded: dict[str, tuple[Generator, threading.Lock | None]] = {}
        self._in_use: dict[str, int] = {}  # leases currently held, per model
        self._turns = 0  # stages that have the shared device to themselves (the trainer): no model loads meanwhile

    def loaded(self) -> list[str]:
        """The settings (``model_dump_json``) of the models loaded now."""
        with self._lock:
            return list(self._loaded)

    def adopt(self, model_cfg: Any, generator: Generator) -> None:
        """Take an already loaded server-backend ``generator`` of ``model_cfg`` into the pool, as if loaded here."""
        with self._lock:
            self._loaded[model_cfg.model_dump_json()] = (generator, None)

    def _idle(self, key: str) -> bool:
        return not self._in_use.get(key)

    def _evict(self, keep: str | None = None) -> list[tuple[Generator, threading.Lock | None]]:
        """Take every loaded model no lease holds (but ``keep``) out of the pool; the caller closes them."""
        return [self._loaded.pop(k) for k in list(self._loaded) if k != keep and self._idle(k)]

    def _load(
        self, model_cfg: Any, one_at_a_time: bool, devices: list[int] | None
    ) -> tuple[str, Generator, threading.Lock | None]:
        """The model of ``model_cfg``, loaded once. Loading a new one first closes the models no lease holds
        (an older checkpoint). ``one_at_a_time`` (a GPU): it also waits until no stage holds another model, so
        two servers never share the device — stages on different checkpoints then take turns."""
        key = model_cfg.model_dump_json()
        with self._lock:
            self._changed.wait_for(lambda: self._turns == 0)  # the trainer has the shared device: wait for it
            if one_at_a_time:
                self._changed.wait_for(
                    lambda: self._turns == 0 and all(self._idle(k) for k in self._loaded if k != key)
                )
            if key not in self._loaded:
                reloadable = self._reloadable(key)
                if reloadable is not None:  # the same server, the next checkpoint: its weights swap in place
                    self._loaded[key] = self._loaded.pop(reloadable)
                    _close(self._evict(keep=key))
                    self._loaded[key][0].load_checkpoint(model_cfg.name_or_path)  # type: ignore[attr-defined]
                else:
                    _close(self._evict(keep=key))  # idle: nobody waits on their locks
                    in_process = model_cfg.backend == "transformers"
                    self._loaded[key] = (make_generator(model_cfg, devices), threading.Lock() if in_process else None)
            self._in_use[key] = self._in_use.get(key, 0) + 1
            generator, exclusive = self._loaded[key]
        return key, generator, exclusive

    def _reloadable(self, key: str) -> str | None:
        """A loaded model no lease holds that can take ``key``'s checkpoint in place: a server backend that
        reloads weights (``load_checkpoint``) whose settings equal ``key``'s but for the checkpoint."""
        wanted = json.loads(key)
        wanted.pop("name_or_path")
        for loaded in self._loaded:
            settings = json.loads(loaded)
            settings.pop("name_or_path")
            if settings == wanted and self._idle(loaded) and self._reloads(loaded):
                return loaded
        return None

    def _reloads(self, key: str) -> bool:
        return callable(getattr(self._loaded[key][0], "load_checkpoint", None))

    @contextlib.contextmanager
    def leased(self, model_cfg: Any, one_at_a_time: bool, devices: list[int] | None = None) -> Iterator[Generator]:
        """The model of ``model_cfg`` on ``devices`` for the length of the ``with`` block (an in-process one:
        this block alone)."""
        key, generator, exclusive = self._load(model_cfg, one_at_a_time, devices)
        try:
            if exclusive is None:
                yield generator
                return
            with exclusive:
                yield generator
        finally:
            with self._lock:
                self._in_use[key] -= 1
                self._changed.notify_all()

    def lease_for(self, cfg: Any, store: Store, run_id: str, step: int) -> GeneratorLease:
        """The lease of the model global step ``step`` plays with: checkpoint ``step`` (nothing is resolved
        until it is used). On a GPU one model is loaded at a time."""

        def lease() -> contextlib.AbstractContextManager[Generator]:
            model_cfg = model_cfg_for_step(cfg, store, run_id, step)
            return self.leased(model_cfg, cfg.model.device != "cpu", cfg.orchestration.generation_devices)

        return lease

    def release(self, wait: bool = True, keep_reloadable: bool = False) -> int:
        """Close the models of this pool: all of them once no stage uses one (``wait``), or only those no
        stage holds now. ``keep_reloadable`` keeps the servers that take the next checkpoint in place (a vLLM
        engine on the CPU: its own process, reloaded in a second instead of restarted in a minute). Returns
        how many were closed."""
        with self._lock:
            if wait:
                self._changed.wait_for(lambda: all(self._idle(k) for k in self._loaded))
            held = [
                self._loaded.pop(k)
                for k in list(self._loaded)
                if self._idle(k) and not (keep_reloadable and self._reloads(k))
            ]
        _close(held)
        return len(held)

    @contextlib.contextmanager
    def device_turn(self, shared: bool) -> Iterator[None]:
        """Around a stage that needs the machine to itself (the trainer, the evaluator).

        ``shared`` (the generator and the trainer share a GPU): no model loads from now until the stage ends;
        the stages holding one finish first, then every model is closed — the two take turns, and the
        generator is reloaded (a vLLM server restarted) afterwards. Otherwise (CPU, or separate devices) only
        idle models are closed, so that a stage of the next generation running beside keeps its model, and a
        server that reloads weights in place stays up for the next checkpoint.
        """
        if not shared:
            self.release(wait=False, keep_reloadable=True)
            yield
            return
        with self._lock:
            self._turns += 1
        try:
            self.release(wait=True)
            yield
        finally:
            with self._lock:
                self._turns -= 1
                self._changed.notify_all()


def _close(held: list[tuple[Generator, threading.Lock | None]]) -> None:
    for generator, _exclusive in held:
        generator.close()
    if held:
        gc.collect()


_PROCESS_POOL: list[ModelPool] = []  # the one pool of this process for the Prefect seam (module doc)
_PROCESS_POOL_LOCK = threading.Lock()


def process_pool() -> ModelPool:
    """The model pool of this process, for Prefect tasks and flows (see the module doc); made on first use."""
    with _PROCESS_POOL_LOCK:
        if not _PROCESS_POOL:
            _PROCESS_POOL.append(ModelPool())
        return _PROCESS_POOL[0]
