"""How a process reaches the run's engine service (:mod:`spade_core.llm.engine_service`): its address, the
wire format of a request, and :class:`EngineClient`, the generator a worker process uses in place of an
engine of its own (docs/operations.md, "Who owns the engine").

A service on this machine publishes ``<cache>/engines/<run_id>-<store hash>.json`` (mode 0600: its address,
its API key, its owner's process id); a worker of the same run, store and machine finds it there. A worker on
another machine is given the address (``orchestration.engine_address``) and the key (``$SPADE_ENGINE_KEY``).

Every call carries the key as a bearer token. A lease is asked for with ``POST /hold`` (answered once the
checkpoint is loaded, or ``202`` to ask again: the trainer has the device, or a stage holds another
checkpoint) and given back with ``POST /release``; a lease whose holder process has died is released by the
service.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from spade_core.hashing import short_hash
from spade_core.llm.base import CacheSlot, Completion, GenerationRequest, ModelError, SamplingParams, seeded
from spade_core.llm.embedded import cache_dir
from spade_core.llm.server_process import HTTPStatusError, http_request
from spade_core.processes import alive, holder_id

KEY_ENV = "SPADE_ENGINE_KEY"  # the service's API key, for workers on other machines (and its owner alike)
HOLD_POLL_S = 20.0  # how long one ``POST /hold`` waits before it is answered "ask again"
HOLD_TIMEOUT_S = 1800.0  # one ``POST /hold`` that starts the replicas may take their start (600 s each at most)
MAX_IN_FLIGHT = 64  # requests one client has in flight


def service_file(run_id: str, store: str) -> Path:
    """Where the service of run ``run_id`` of the store at ``store`` publishes its address and key on this
    machine (two stores may hold runs of one id)."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return cache_dir() / "engines" / f"{safe}-{short_hash(store)}.json"


def request_json(request: GenerationRequest) -> dict[str, Any]:
    """A request on the wire; its conversation key (``cache_slot``) routes its turns to one replica.

    >>> r = GenerationRequest(messages=[], prompt_ids=[1, 2], seed=3, cache_slot=CacheSlot("ep", 64))
    >>> request_from_json(request_json(r)) == r
    True
    """
    slot = request.cache_slot
    return {
        "messages": request.messages,
        "prompt_ids": request.prompt_ids,
        "tools": request.tools,
        "seed": request.seed,
        "cache_slot": None if slot is None else [slot.key, slot.max_tokens],
    }


def request_from_json(data: dict[str, Any]) -> GenerationRequest:
    slot = data.get("cache_slot")
    return GenerationRequest(
        messages=list(data.get("messages") or []),
        prompt_ids=data.get("prompt_ids"),
        tools=data.get("tools"),
        seed=data.get("seed"),
        cache_slot=None if slot is None else CacheSlot(str(slot[0]), int(slot[1])),
    )


def params_json(params: SamplingParams) -> dict[str, Any]:
    return {**asdict(params), "stop": list(params.stop)}


def params_from_json(data: dict[str, Any]) -> SamplingParams:
    known = {f.name for f in fields(SamplingParams)}
    values = {k: v for k, v in data.items() if k in known}
    values["stop"] = tuple(values.get("stop") or ())
    return SamplingParams(**values)


def completion_from_json(data: dict[str, Any]) -> Completion:
    known = {f.name for f in fields(Completion)}
    return Completion(**{k: v for k, v in data.items() if k in known})


class EngineClient:
    """The run's engine service over HTTP (a worker process's; the owner's process uses the service itself):
    its leases are the generators stages call (:class:`EngineLease`). ``generate`` never raises: a request
    the service cannot answer is a ``model_error`` completion. ``model_path``: the run's base model, whose
    tokenizer renders the token prompts here."""

    def __init__(self, url: str, key: str, model_path: str | None = None, request_timeout_s: float = 600.0) -> None:
        parts = urlsplit(url if "://" in url else f"http://{url}")
        if parts.hostname is None or parts.port is None:
            raise ModelError(f"engine service address {url!r} must be host:port")
        self.url, self.host, self.port, self.key = url, parts.hostname, parts.port, key
        self.model_path = model_path
        self.timeout_s = request_timeout_s
        self._tokenizer: Any = None

    @property
    def tokenizer(self) -> Any:
        if self._tokenizer is None and self.model_path is not None:
            from spade_core.llm.embedded import resolve_model  # converts the embedded model on first use
            from spade_core.llm.hf import load_tokenizer  # transformers: only once a prompt is rendered here

            self._tokenizer = load_tokenizer(resolve_model(self.model_path))
        return self._tokenizer

    def call(self, method: str, path: str, body: Any = None, timeout_s: float | None = None) -> Any:
        """One call to the service (raises what :func:`~spade_core.llm.server_process.http_request` raises)."""
        connection = http.client.HTTPConnection(self.host, self.port, timeout=timeout_s or self.timeout_s)
        return http_request(connection, method, path, body, self.key)

    def _failed(self, exc: Exception, doing: str) -> ModelError:
        if isinstance(exc, HTTPStatusError) and exc.code == 401:
            return ModelError(f"the engine service at {self.url} refused the API key (${KEY_ENV})")
        if isinstance(exc, HTTPStatusError):
            return ModelError(f"the engine service at {self.url} could not {doing}: {exc}")
        return ModelError(f"cannot reach the engine service at {self.url}: {exc}")

    def state(self) -> dict[str, Any]:
        """The service's state: its replicas, the checkpoint they serve, their loads."""
        try:
            return dict(self.call("GET", "/state", timeout_s=30))
        except (HTTPStatusError, OSError, ValueError) as exc:
            raise self._failed(exc, "answer") from None

    @contextlib.contextmanager
    def leased(self, run_id: str, step: int) -> Iterator[EngineLease]:
        """The service serving run ``run_id``'s checkpoint of global step ``step`` (resolved by the service's
        owner) for the length of the ``with`` block."""
        body = {"run_id": run_id, "step": step, "holder": holder_id(), "wait_s": HOLD_POLL_S}
        answer: dict[str, Any] = {}
        while not answer.get("lease"):
            try:
                answer = self.call("POST", "/hold", body, timeout_s=HOLD_TIMEOUT_S)
            except (HTTPStatusError, OSError, ValueError) as exc:
                raise self._failed(exc, f"load step {step} of run {run_id!r}") from None
        try:
            model_ref = str(answer.get("model_ref") or "vllm:service")
            yield EngineLease(self, model_ref, [_Swap(info) for info in answer.get("swaps") or []])
        finally:
            with contextlib.suppress(HTTPStatusError, OSError, ValueError):
                self.call("POST", "/release", {"lease": answer["lease"]}, timeout_s=30)

    def _one(self, request: GenerationRequest, params: SamplingParams) -> Completion:
        body = {"request": request_json(request), "params": params_json(params)}
        try:
            return completion_from_json(self.call("POST", "/generate", body))
        except (HTTPStatusError, OSError, ValueError) as exc:
            return Completion(text="", finish_reason="error", error=f"engine service {self.url}: {str(exc)[:300]}")

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        requests = seeded(requests, params)  # a call's seeds are fixed here, whichever replica serves each
        if len(requests) <= 1:
            return [self._one(r, params) for r in requests]
        with ThreadPoolExecutor(max_workers=min(len(requests), MAX_IN_FLIGHT)) as pool:
            return list(pool.map(lambda r: self._one(r, params), requests))

    def release(self, keys: Iterable[str]) -> None:
        """The conversations ``keys`` are over: the service forgets which replica served them."""
        with contextlib.suppress(HTTPStatusError, OSError, ValueError):
            self.call("POST", "/forget", {"keys": list(keys)}, timeout_s=30)

    def close(self) -> None:
        """Nothing to close: the service belongs to the run."""


class EngineLease:
    """One stage's lease of the service through a client: the generator the stage calls."""

    supports_token_prompts = True
    streams = True

    def __init__(self, client: EngineClient, model_ref: str, swaps: list[Any]) -> None:
        self.client, self.model_ref, self.swaps = client, model_ref, swaps

    @property
    def tokenizer(self) -> Any:
        return self.client.tokenizer

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        return self.client.generate(requests, params)

    def release(self, keys: Iterable[str]) -> None:
        self.client.release(keys)

    def take_swaps(self) -> list[Any]:
        swaps, self.swaps = self.swaps, []
        return swaps

    def close(self) -> None:
        """The lease ends with its ``with`` block."""


class _Swap:
    """A weight swap as the service reported it (``as_info`` as a stage records it)."""

    def __init__(self, info: dict[str, Any]) -> None:
        self.info = info

    def as_info(self) -> dict[str, Any]:
        return self.info


def find_service(
    run_id: str, store: str, address: str | None, model_path: str | None = None, request_timeout_s: float = 600.0
) -> EngineClient | None:
    """A client of the run's engine service: at ``address`` (``orchestration.engine_address``, the key from
    ``$SPADE_ENGINE_KEY``), else the one this machine's service of run ``run_id`` of ``store`` published, if
    its owner is alive and is not this process; None when there is none (this process then owns the run's
    engine).

    Raises:
        ModelError: an address is configured but ``$SPADE_ENGINE_KEY`` is not set.
    """
    if address:
        key = os.environ.get(KEY_ENV)
        if not key:
            raise ModelError(f"orchestration.engine_address {address!r} needs the service's API key in ${KEY_ENV}")
        return EngineClient(address, key, model_path, request_timeout_s)
    path = service_file(run_id, store)
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    owner = int(info.get("pid", 0))
    if owner == os.getpid() or not alive(owner):
        return None
    return EngineClient(str(info["url"]), str(info["key"]), model_path, request_timeout_s)
