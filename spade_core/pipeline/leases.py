"""Generators for stages: loaded at most once per process, and only when a stage really runs (the Prefect
tasks' worker processes and the local runner alike).

A stage asks for the model through a *lease* (:data:`spade_core.pipeline.stage.GeneratorLease`); the lease
resolves the model a step plays with (checkpoint ``step``, the newest complete one at or before it, downloaded
or merged once by :mod:`spade_core.store.checkpoints`), loads it on first use and keeps it for the next stage
in the same process. An in-process model (``transformers``) serves one stage at a time — shards of a
stage then run one after another at full batch size, each finishing (and being kept) on its own —
while server backends (``openai``, ``vllm``) take concurrent stages. Loading a newer checkpoint closes the
models no stage holds. Before training on a device the generator shares (one GPU), the flow releases every
model so the trainer gets the memory: the two take turns.

A ``vllm`` model is the run's engine service (:mod:`spade_core.llm.engine_service`): the run's owner makes
it when the run starts (:meth:`ModelPool.serve`: a listening socket, no engine yet), and every stage of every
process leases it — this process's stages directly, a worker process's through its published address
(:func:`~spade_core.llm.engine_client.find_service`). Its replicas start at the first lease; a lease on
another checkpoint waits until no stage holds the current one, then the replicas reload in place; the
trainer's turn on a shared device puts them to sleep. A process that leases a ``vllm`` model of a run that no
one serves makes the service itself.

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
from spade_core.llm.engine_client import EngineClient, find_service
from spade_core.llm.engine_service import EngineService
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
        self._services: dict[str, EngineService] = {}  # the engine services this pool owns, by their settings
        self._clients: dict[str, EngineClient] = {}  # the services of other processes, by store and run id

    def loaded(self) -> list[str]:
        """The settings (``model_dump_json``) of the models loaded now."""
        with self._lock:
            return list(self._loaded)

    def _idle(self, key: str) -> bool:
        return not self._in_use.get(key)

    def _evict(self, keep: str | None = None) -> list[tuple[Generator, threading.Lock | None]]:
        """Take every loaded model no lease holds (but ``keep``) out of the pool; the caller closes them."""
        return [self._loaded.pop(k) for k in list(self._loaded) if k != keep and self._idle(k)]

    def _load(
        self, model_cfg: Any, one_at_a_time: bool, devices: list[int] | None
    ) -> tuple[str, Generator, threading.Lock | None]:
        """The model of ``model_cfg`` (a ``transformers`` or ``openai`` one), loaded once. Loading a new one
        first closes the models no lease holds (an older checkpoint). ``one_at_a_time`` (a GPU): it also waits
        until no stage holds another model, so two never share the device — stages on different checkpoints
        then take turns."""
        key = model_cfg.model_dump_json()
        with self._lock:
            self._changed.wait_for(lambda: self._turns == 0)  # the trainer has the shared device: wait for it
            if one_at_a_time:
                self._changed.wait_for(
                    lambda: self._turns == 0 and all(self._idle(k) for k in self._loaded if k != key)
                )
            if key not in self._loaded:
                _close(self._evict(keep=key))  # idle: nobody waits on their locks
                in_process = model_cfg.backend == "transformers"
                self._loaded[key] = (make_generator(model_cfg, devices), threading.Lock() if in_process else None)
            self._in_use[key] = self._in_use.get(key, 0) + 1
            generator, exclusive = self._loaded[key]
        return key, generator, exclusive

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

    def serve(self, cfg: Any, store: Store, run_id: str) -> EngineService | None:
        """The engine service of run ``run_id`` (``model.backend`` vllm; else None), made here and published
        for the run's workers if this pool has none of its settings yet. Its replicas start at the first lease."""
        if cfg.model.backend != "vllm":
            return None
        key = _service_key(cfg)
        with self._lock:
            service = self._services.get(key)
            if service is None:
                o = cfg.orchestration
                service = EngineService(cfg.model, o.engine_replicas, o.generation_devices, o.engine_address)
                self._services[key] = service
        service.publish(run_id, store.base, lambda step: str(model_cfg_for_step(cfg, store, run_id, step).name_or_path))
        return service

    def services(self) -> list[EngineService]:
        """The engine services this pool owns."""
        with self._lock:
            return list(self._services.values())

    def _engine(self, cfg: Any, store: Store, run_id: str) -> EngineService | EngineClient:
        """The run's engine service: this pool's, else the one another process serves, else a new one here."""
        with self._lock:
            own = self._services.get(_service_key(cfg))
            client = self._clients.get(f"{store.base}|{run_id}")
        if own is not None:
            return own
        if client is None:
            o = cfg.orchestration
            client = find_service(
                run_id, store.base, o.engine_address, cfg.model.name_or_path, cfg.model.request_timeout_s
            )
        if client is not None:
            with self._lock:
                self._clients[f"{store.base}|{run_id}"] = client
            return client
        service = self.serve(cfg, store, run_id)
        assert service is not None
        return service

    def lease_for(self, cfg: Any, store: Store, run_id: str, step: int) -> GeneratorLease:
        """The lease of the model global step ``step`` plays with: checkpoint ``step`` (nothing is resolved
        until it is used) — on the run's engine service for ``vllm``. On a GPU one model is loaded at a time."""

        def engine_lease() -> contextlib.AbstractContextManager[Any]:
            engine = self._engine(cfg, store, run_id)
            if isinstance(engine, EngineClient):
                return engine.leased(run_id, step)
            return engine.leased(str(model_cfg_for_step(cfg, store, run_id, step).name_or_path))

        if cfg.model.backend == "vllm":
            return engine_lease

        def lease() -> contextlib.AbstractContextManager[Generator]:
            model_cfg = model_cfg_for_step(cfg, store, run_id, step)
            return self.leased(model_cfg, cfg.model.device != "cpu", cfg.orchestration.generation_devices)

        return lease

    def release(self, wait: bool = True, keep_reloadable: bool = False, services: bool | None = None) -> int:
        """Close the models of this pool: all of them once no stage uses one (``wait``), or only those no
        stage holds now. ``keep_reloadable`` keeps the engine services, which take the next checkpoint in
        place (reloaded in a second instead of restarted in a minute); ``services`` says it explicitly.
        Returns how many were closed."""
        close_services = not keep_reloadable if services is None else services
        with self._lock:
            if wait:
                self._changed.wait_for(lambda: all(self._idle(k) for k in self._loaded))
            held = [self._loaded.pop(k) for k in list(self._loaded) if self._idle(k)]
            closing = [self._services.pop(k) for k in list(self._services)] if close_services else []
            if close_services:
                self._clients.clear()
        _close(held)
        for service in closing:
            service.close()
        return len(held) + len(closing)

    @contextlib.contextmanager
    def device_turn(self, shared: bool) -> Iterator[None]:
        """Around a stage that needs the machine to itself (the trainer).

        ``shared`` (the generator and the trainer share a GPU): no model loads from now until the stage ends;
        the stages holding one finish first, then every in-process model is closed and every engine service
        sleeps (:meth:`~spade_core.llm.engine_service.EngineService.turn`) — the two take turns, and the
        generator is woken or loaded again afterwards. Otherwise (CPU, or separate devices) only idle models
        are closed, so that a stage of the next generation running beside keeps its model, and the engine
        services stay up for the next checkpoint; an idle one on a CPU gives its KV cache's pages back
        (:meth:`~spade_core.llm.engine_service.EngineService.rest`).
        """
        if not shared:
            self.release(wait=False, keep_reloadable=True)
            for service in self.services():
                service.rest()
            yield
            return
        with self._lock:
            self._turns += 1
        try:
            self.release(wait=True, services=False)  # the engine services sleep instead of closing
            with contextlib.ExitStack() as turns:
                for service in self.services():
                    turns.enter_context(service.turn())
                yield
        finally:
            with self._lock:
                self._turns -= 1
                self._changed.notify_all()


def _service_key(cfg: Any) -> str:
    """What an engine service is made of: the run's model settings and how its replicas are laid out."""
    o = cfg.orchestration
    return json.dumps([cfg.model.model_dump(mode="json"), o.engine_replicas, o.generation_devices, o.engine_address])


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
