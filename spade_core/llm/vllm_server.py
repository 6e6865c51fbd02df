"""The ``vllm`` backend: start and supervise a ``vllm serve`` process on the current checkpoint and talk
to it through the ``openai`` backend.

Supervision: the server runs in its own process group with its log in the cache dir; startup waits on
``GET /health`` (failing with the log's last line if the process dies or the wait times out); a new
checkpoint restarts it (:meth:`VLLMGenerator.load_checkpoint`); ``close`` stops it (SIGTERM, then
SIGKILL). The launch command is a template (``model.server_command``) so any OpenAI-compatible server can
stand in for ``vllm serve`` — the tests use ``transformers serve``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from spade_core.llm.base import Completion, GenerationRequest, ModelError, SamplingParams
from spade_core.llm.embedded import cache_dir, resolve_model
from spade_core.llm.openai_api import OpenAIGenerator

VLLM_COMMAND = ("vllm", "serve", "{model}", "--host", "{host}", "--port", "{port}", "--dtype", "{dtype}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ServerProcess:
    """One supervised OpenAI-compatible server process on loopback."""

    def __init__(
        self, command: list[str], port: int, startup_timeout_s: float = 600.0, env: dict[str, str] | None = None
    ) -> None:
        self.command = command
        self.port = port
        self.startup_timeout_s = startup_timeout_s
        self.env = env
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = cache_dir() / "servers" / f"server-{port}.log"

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base_url}/health", timeout=2) as resp:
                return 200 <= resp.status < 300
        except (urllib.error.URLError, OSError):
            return False

    def log_tail(self, lines: int = 1) -> str:
        try:
            text = self.log_path.read_text(errors="replace").strip().splitlines()
        except OSError:
            return ""
        return " | ".join(text[-lines:])[-300:]

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "wb") as log:
            try:
                self.proc = subprocess.Popen(
                    self.command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    env={**os.environ, **(self.env or {})},
                )
            except FileNotFoundError:
                raise ModelError(f"server command {self.command[0]!r} not found") from None
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.proc = None
                raise ModelError(f"model server exited with code {code} during startup: {self.log_tail()}")
            if self.healthy():
                return
            time.sleep(0.5)
        self.stop()
        raise ModelError(f"model server not healthy after {self.startup_timeout_s:.0f}s: {self.log_tail()}")

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class VLLMGenerator:
    """Generation through a supervised ``vllm serve`` (or stand-in) process on the current checkpoint."""

    supports_token_prompts = False

    def __init__(
        self, model_cfg: Any, server_command: list[str] | None = None, startup_timeout_s: float = 600.0
    ) -> None:
        template = list(server_command or model_cfg.server_command or VLLM_COMMAND)
        if template[0] == "vllm" and importlib.util.find_spec("vllm") is None:
            raise ModelError(
                "model.backend 'vllm' needs vLLM, which is not installed: "
                "pip install 'spade[vllm]' on a GPU machine, or use backend=transformers/openai"
            )
        self.cfg = model_cfg
        self.template = template
        self.startup_timeout_s = startup_timeout_s
        self.server: ServerProcess | None = None
        self.client: OpenAIGenerator | None = None
        self.model_path = ""
        self.model_ref = ""
        self.load_checkpoint(model_cfg.name_or_path)

    def _command(self, model_path: str, port: int) -> list[str]:
        dtype = "auto" if self.cfg.dtype == "auto" else self.cfg.dtype
        values = {"model": model_path, "host": "127.0.0.1", "port": str(port), "dtype": dtype}
        return [part.format(**values) for part in self.template]

    def load_checkpoint(self, name_or_path: str) -> None:
        """(Re)start the server on ``name_or_path`` (a new checkpoint after a training step)."""
        path = resolve_model(name_or_path)
        if self.client is not None:
            self.client.close()
        if self.server is not None:
            self.server.stop()
        port = free_port()
        self.server = ServerProcess(
            self._command(path, port),
            port,
            self.startup_timeout_s,
            env={"HF_HUB_OFFLINE": os.environ.get("HF_HUB_OFFLINE", "1")},
        )
        self.server.start()
        self.model_path = path
        self.model_ref = f"vllm:{Path(path).name}"
        self.client = OpenAIGenerator(
            f"{self.server.base_url}/v1", path, timeout_s=self.cfg.request_timeout_s, max_retries=self.cfg.max_retries
        )

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        if self.server is None or self.client is None or not self.server.running:
            self.load_checkpoint(self.model_path)  # the server died: restart it once, then serve
        assert self.client is not None
        return self.client.generate(requests, params)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
        if self.server is not None:
            self.server.stop()
