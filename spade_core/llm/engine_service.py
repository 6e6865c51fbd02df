# Over 400 lines: one class, the run's engine service, whose state its methods share.
"""The run's engine service: one set of vLLM engine replicas per run, shared by every stage and every worker
process, woken instead of restarted (docs/operations.md, "Who owns the engine").

The run's owner (the flow's process, or the local runner) makes the service when the run starts; that costs
a listening socket, not an engine. The replicas — :class:`~spade_core.llm.vllm_server.VLLMGenerator`\\ s,
each supervised as before — start when the first stage asks for a checkpoint, so a run whose stages are all
reused never starts one. ``orchestration.generation_devices`` are split evenly among
``orchestration.engine_replicas`` replicas (on a CPU each replica is bound to a core of its own).

- **Requests** go to the replica with the fewest requests in flight; a request that continues a conversation
  (its ``cache_slot`` key: an episode's turns) goes to the replica that served the conversation before, whose
  prefix cache holds it. Every request carries its own seed (fixed by the caller's call), so the replica that
  serves it does not change what it samples.
- **Checkpoints**: a stage holds the checkpoint it plays with (:meth:`EngineService.hold`); a hold on another
  checkpoint waits until no stage holds the current one, then every replica reloads in place.
- **The trainer's turn** (:meth:`EngineService.turn`, where generation and training share a device): once no
  stage holds a checkpoint, each replica sleeps (level 1, on a GPU) or is stopped (a CPU has no sleep mode);
  the next hold wakes or starts it and reloads the new checkpoint.
- **Workers** reach the service over HTTP (:mod:`spade_core.llm.engine_client`), with the API key the
  service generated (or ``$SPADE_ENGINE_KEY``), on loopback unless ``orchestration.engine_address`` is set.
"""

from __future__ import annotations

import contextlib
import hmac
import http.server
import json
import os
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from spade_core.devices import visible_gpu_count
from spade_core.llm.base import Completion, GenerationRequest, ModelError, SamplingParams, seeded
from spade_core.llm.embedded import resolve_model
from spade_core.llm.engine_client import KEY_ENV, params_from_json, request_from_json, service_file
from spade_core.llm.server_process import free_port
from spade_core.processes import holder_gone, holder_id

MAX_SESSIONS = 100_000  # conversations whose replica is remembered (the oldest forgotten first)
PER_REPLICA_IN_FLIGHT = 64  # requests the service has in flight per replica (each replica's own cap)


def replica_devices(devices: list[int] | None, replicas: int, per_replica: int, on_cpu: bool) -> list[list[int] | None]:
    """The GPUs of each replica: ``devices`` (None: every visible GPU) in ``replicas`` equal blocks; on a CPU
    no GPUs (None each).

    >>> replica_devices([0, 1, 2, 3], 2, 1, False), replica_devices(None, 2, 1, True)
    ([[0, 1], [2, 3]], [None, None])

    Raises:
        ModelError: the devices cannot be split into ``replicas`` blocks of at least ``per_replica``.
    """
    if on_cpu:
        return [None] * replicas
    chosen = list(devices) if devices is not None else list(range(visible_gpu_count()))
    size = len(chosen) // replicas if replicas else 0
    if not chosen or len(chosen) % replicas or size < per_replica:
        raise ModelError(
            f"generation devices {chosen} cannot be split into orchestration.engine_replicas {replicas} of "
            f"model.tensor_parallel_size {per_replica} GPUs each"
        )
    return [chosen[i * size : (i + 1) * size] for i in range(replicas)]


def replica_cores(index: int, replicas: int) -> str | None:
    """The CPU core replica ``index`` of ``replicas`` is bound to (None: one replica, vLLM's own choice).

    >>> replica_cores(0, 1), replica_cores(1, 2)
    (None, '1')
    """
    return None if replicas == 1 else str(index % (os.cpu_count() or 1))


@dataclass
class Replica:
    index: int
    generator: Any  # a VLLMGenerator (or a stand-in with its methods)
    in_flight: int = 0
    served: int = 0


ReplicaFactory = Callable[[Any, str, list[int] | None, str | None], Any]


def vllm_replica(model_cfg: Any, path: str, devices: list[int] | None, cores: str | None) -> Any:
    from spade_core.llm.vllm_server import VLLMGenerator  # the engine's module: loaded when a replica starts

    return VLLMGenerator(model_cfg.model_copy(update={"name_or_path": path}), devices=devices, cpu_cores=cores)


class EngineService:
    """The run's engine: its replicas, the checkpoint they serve, who holds it (see the module doc)."""

    supports_token_prompts = True
    streams = True

    def __init__(
        self,
        model_cfg: Any,
        replicas: int = 1,
        devices: list[int] | None = None,
        address: str | None = None,
        key: str | None = None,
        factory: ReplicaFactory = vllm_replica,
    ) -> None:
        """``address``: ``host:port`` to listen on (None: loopback, a free port); ``key``: the API key (None:
        ``$SPADE_ENGINE_KEY``, else a new random one)."""
        self.cfg = model_cfg
        self.count = replicas
        self.devices = devices
        self.factory = factory
        self.key = key or os.environ.get(KEY_ENV) or secrets.token_urlsafe(32)
        self.replicas: list[Replica] = []
        self.model_path: str | None = None  # the checkpoint the replicas serve
        self.swaps: list[Any] = []  # weight swaps not yet taken by a stage
        self.turns_taken: list[str] = []  # what each replica did at each trainer's turn: slept | stopped
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._holds: dict[str, tuple[str, str]] = {}  # lease -> (checkpoint, holder)
        self._loading = False
        self._turns = 0
        self._sessions: OrderedDict[str, int] = OrderedDict()
        self._published: list[Path] = []
        self._resolvers: dict[str, Callable[[int], str]] = {}  # run id -> the checkpoint path of a global step
        self.router = Router(self, address)
        self.url = self.router.url

    # -- the replicas ------------------------------------------------------------------------------------
    @property
    def model_ref(self) -> str:
        return str(self.replicas[0].generator.model_ref) if self.replicas else "vllm:not-started"

    @property
    def tokenizer(self) -> Any:
        return self.replicas[0].generator.tokenizer if self.replicas else None

    def _serving(self, path: str) -> bool:
        return (
            self.model_path == path
            and bool(self.replicas)
            and all(r.generator.server is not None and r.generator.server.running for r in self.replicas)
            and not any(r.generator.asleep for r in self.replicas)
        )

    def _each(self, work: Callable[[Replica], Any], replicas: list[Replica]) -> list[Any]:
        """``work`` on every replica at once; the first failure is raised once all have finished."""
        with ThreadPoolExecutor(max_workers=max(1, len(replicas))) as pool:
            futures = [pool.submit(work, r) for r in replicas]
        errors = [f.exception() for f in futures if f.exception() is not None]
        if errors:
            raise errors[0]  # type: ignore[misc]
        return [f.result() for f in futures]

    def _load(self, path: str) -> None:
        """Every replica serving ``path``: started (the first load), else woken and reloaded in place."""
        if not self.replicas:
            per_replica = self.cfg.tensor_parallel_size
            # counted at the first start, not when the run starts (a run of reused stages imports no torch)
            on_cpu = self.cfg.device == "cpu" or (self.cfg.device == "auto" and not visible_gpu_count())
            blocks = replica_devices(self.devices, self.count, per_replica, on_cpu)
            slots = [Replica(i, None) for i in range(self.count)]

            def start(replica: Replica) -> None:
                cores = replica_cores(replica.index, self.count) if on_cpu else None
                replica.generator = self.factory(self.cfg, path, blocks[replica.index], cores)

            try:
                self._each(start, slots)
            except BaseException:
                for replica in slots:
                    if replica.generator is not None:
                        replica.generator.close()
                raise
            self.replicas = slots
        else:

            def swap(replica: Replica) -> None:
                replica.generator.wake()
                replica.generator.load_checkpoint(path)

            self._each(swap, self.replicas)
        self.model_path = resolve_model(path)
        for replica in self.replicas:
            self.swaps += [replace(s, replica=replica.index) for s in replica.generator.take_swaps()]

    # -- checkpoints -------------------------------------------------------------------------------------
    def _prune(self) -> None:
        """Release the leases of holders on this machine whose process has died."""
        for lease, (_path, holder) in list(self._holds.items()):
            if holder_gone(holder):
                del self._holds[lease]

    def _wait(self, ready: Callable[[], bool], deadline: float | None) -> bool:
        while not ready():
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            self._changed.wait(timeout=1.0 if left is None else min(left, 1.0))
            self._prune()
        return True

    def hold(self, path: str, holder: str, wait_s: float | None = None) -> str | None:
        """A lease on checkpoint ``path`` (a local directory or the base model) for ``holder``: once the trainer
        has no turn and no stage holds another checkpoint, the replicas serve ``path`` (loaded if need be).
        Returns the lease, or None when ``wait_s`` passed first.

        Raises:
            ModelError: a replica could not start or load the checkpoint.
        """
        path = resolve_model(path)
        deadline = None if wait_s is None else time.monotonic() + wait_s
        with self._changed:
            self._prune()

            def free() -> bool:
                same = all(p == path for p, _ in self._holds.values())
                return self._turns == 0 and not self._loading and (same or not self._holds)

            if not self._wait(free, deadline):
                return None
            lease = secrets.token_hex(8)
            self._holds[lease] = (path, holder)
            if self._serving(path):
                return lease
            self._loading = True
        try:
            self._load(path)
        except BaseException:
            with self._changed:
                self._holds.pop(lease, None)
            raise
        finally:
            with self._changed:
                self._loading = False
                self._changed.notify_all()
        return lease

    def unhold(self, lease: str) -> None:
        with self._changed:
            self._holds.pop(lease, None)
            self._changed.notify_all()

    @contextlib.contextmanager
    def leased(self, path: str) -> Iterator[EngineService]:
        """The service serving ``path`` for the length of the ``with`` block (this process's stages)."""
        lease = self.hold(path, holder_id())
        try:
            yield self
        finally:
            if lease is not None:
                self.unhold(lease)

    def take_swaps(self) -> list[Any]:
        with self._lock:
            swaps, self.swaps = self.swaps, []
        return swaps

    @contextlib.contextmanager
    def turn(self) -> Iterator[None]:
        """The trainer's turn on the device the replicas share with it: no hold from now until the block ends;
        once the held checkpoints are given back, each replica sleeps (or is stopped, see the module doc)."""
        with self._changed:
            self._turns += 1
            self._prune()
            self._wait(lambda: not self._holds and not self._loading, None)
        try:
            if self.replicas:
                self.turns_taken += self._each(lambda r: r.generator.sleep(), self.replicas)
            yield
        finally:
            with self._changed:
                self._turns -= 1
                self._changed.notify_all()

    def rest(self) -> int:
        """While the trainer runs beside a kept engine on a CPU: when no stage holds the engine, each replica
        gives its KV cache's pages back (:meth:`VLLMGenerator.release_cache`); no hold begins until they have.
        Skipped while a stage holds it (one of the next generation running beside). Returns the bytes given
        back."""
        with self._changed:
            self._prune()
            if self._holds or self._loading or self._turns or not self.replicas:
                return 0
            self._turns += 1
        try:
            return sum(self._each(lambda r: r.generator.release_cache(), self.replicas))
        finally:
            with self._changed:
                self._turns -= 1
                self._changed.notify_all()

    # -- generation --------------------------------------------------------------------------------------
    def _pick(self, session: str | None) -> Replica:
        with self._lock:
            index = self._sessions.get(session) if session is not None else None
            if index is None:
                index = min(self.replicas, key=lambda r: (r.in_flight, r.served, r.index)).index
                if session is not None:
                    self._sessions[session] = index
                    while len(self._sessions) > MAX_SESSIONS:
                        self._sessions.popitem(last=False)
            else:
                self._sessions.move_to_end(session)  # type: ignore[arg-type]
            replica = self.replicas[index]
            replica.in_flight += 1
        return replica

    def complete(self, request: GenerationRequest, params: SamplingParams) -> Completion:
        """One seeded request on the replica :meth:`_pick` chooses."""
        if not self.replicas:
            return Completion(text="", finish_reason="error", error="the engine service has no checkpoint loaded")
        replica = self._pick(request.cache_slot.key if request.cache_slot else None)
        try:
            return replica.generator.generate([request], params)[0]
        finally:
            with self._lock:
                replica.in_flight -= 1
                replica.served += 1

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        requests = seeded(requests, params)
        if len(requests) <= 1:
            return [self.complete(r, params) for r in requests]
        width = min(len(requests), PER_REPLICA_IN_FLIGHT * max(1, self.count))
        with ThreadPoolExecutor(max_workers=width) as pool:
            return list(pool.map(lambda r: self.complete(r, params), requests))

    def release(self, keys: Any) -> None:
        """The conversations ``keys`` are over: forget their replicas."""
        with self._lock:
            for key in keys:
                self._sessions.pop(key, None)

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {
                "url": self.url,
                "model_ref": self.model_ref,
                "model_path": self.model_path,
                "holds": len(self._holds),
                "replicas": [
                    {
                        "index": r.index,
                        "in_flight": r.in_flight,
                        "served": r.served,
                        "server": r.generator.server.base_url if r.generator.server is not None else None,
                        "restarts": r.generator.restarts,
                        "asleep": r.generator.asleep,
                    }
                    for r in self.replicas
                ],
            }

    # -- publishing and closing --------------------------------------------------------------------------
    def resolve(self, run_id: str, step: int) -> str:
        """The checkpoint of global step ``step`` of run ``run_id`` on this machine (a worker asks by step: its
        own copy of a checkpoint may be on another machine)."""
        resolver = self._resolvers.get(run_id)
        if resolver is None:
            raise ModelError(f"the engine service does not serve run {run_id!r}")
        return resolver(step)

    def publish(self, run_id: str, store: str, resolver: Callable[[int], str]) -> Path:
        """Serve run ``run_id`` of the store at ``store`` (``resolver``: the checkpoint path of a global step)
        and write this service's address and key where the run's local workers look
        (:func:`~spade_core.llm.engine_client.service_file`; readable by this user alone)."""
        self._resolvers[run_id] = resolver
        path = service_file(run_id, store)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            json.dump({"url": self.url, "key": self.key, "pid": os.getpid(), "replicas": self.count}, out)
        os.replace(tmp, path)
        if path not in self._published:
            self._published.append(path)
        return path

    def close(self) -> None:
        """Stop every replica (their whole process groups) and the router; withdraw the published files."""
        self.router.close()
        for replica in self.replicas:
            replica.generator.close()
        self.replicas = []
        self.model_path = None
        for path in self._published:
            with contextlib.suppress(OSError):
                info = json.loads(path.read_text())
                if info.get("pid") == os.getpid():
                    path.unlink()
        self._published = []


class Router:
    """The service's HTTP face (one thread per connection): ``POST /generate``, ``/hold``, ``/release``,
    ``/forget`` and ``GET /state``, each with the service's key as bearer token."""

    def __init__(self, service: EngineService, address: str | None) -> None:
        if address:
            host, _, port = address.rpartition(":")
            bind = (host, int(port))
        else:
            bind = ("127.0.0.1", free_port())
        handler = _handler(service)
        try:
            self.server = http.server.ThreadingHTTPServer(bind, handler)
        except OSError as exc:
            raise ModelError(f"the engine service cannot listen on {bind[0]}:{bind[1]}: {exc}") from None
        self.server.daemon_threads = True
        self.url = f"http://{bind[0]}:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, name="engine-router", daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _handler(service: EngineService) -> type[http.server.BaseHTTPRequestHandler]:
    expected = f"Bearer {service.key}".encode()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, code: int, body: Any) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _authorised(self) -> bool:
            given = (self.headers.get("Authorization") or "").encode()
            if hmac.compare_digest(given, expected):
                return True
            self._answer(401, {"error": "unauthorized: the engine service's API key is required"})
            return False

        def do_GET(self) -> None:
            if not self._authorised():
                return
            if self.path == "/state":
                self._answer(200, service.state())
            else:
                self._answer(404, {"error": f"no such endpoint {self.path}"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            if not self._authorised():
                return
            try:
                body = json.loads(raw or b"{}")
                self._answer(*self._route(body))
            except ModelError as exc:
                self._answer(503, {"error": str(exc)})
            except (KeyError, TypeError, ValueError) as exc:
                self._answer(400, {"error": f"bad request to {self.path}: {type(exc).__name__}: {exc}"})

        def _route(self, body: dict[str, Any]) -> tuple[int, Any]:
            if self.path == "/generate":
                completion = service.complete(request_from_json(body["request"]), params_from_json(body["params"]))
                return 200, asdict(completion)
            if self.path == "/hold":
                path = service.resolve(str(body["run_id"]), int(body["step"]))
                lease = service.hold(path, str(body["holder"]), float(body.get("wait_s", 20.0)))
                if lease is None:
                    return 202, {"lease": None}
                swaps = [s.as_info() for s in service.take_swaps()]
                return 200, {"lease": lease, "model_ref": service.model_ref, "swaps": swaps}
            if self.path == "/release":
                service.unhold(str(body["lease"]))
                return 200, {}
            if self.path == "/forget":
                service.release(list(body["keys"]))
                return 200, {}
            return 404, {"error": f"no such endpoint {self.path}"}

    return Handler
