"""Generation backends, each exercised for real: transformers on the tiny model, the openai client
against real HTTP servers on loopback (`transformers serve`, and a scripted stdlib server for retries
and refusals), and the server supervisor. The vllm backend is tested against the real engine in
test_vllm_engine.py."""

from __future__ import annotations

import http.server
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from conftest import free_port

from spade_core.config import load_config
from spade_core.llm import make_generator
from spade_core.llm.base import GenerationRequest, ModelError, SamplingParams
from spade_core.llm.embedded import resolve_model
from spade_core.llm.openai_api import OpenAIGenerator
from spade_core.llm.server_process import ServerProcess

ASK = [{"role": "user", "content": "What is 2+3? Answer with \\boxed{}."}]
TRANSFORMERS_SERVE = [
    str(Path(sys.executable).parent / "transformers"),
    "serve",
    "{model}",
    "--host",
    "{host}",
    "--port",
    "{port}",
]


def test_transformers_batched_generation_returns_ids_text_and_logprobs(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    requests = [GenerationRequest(messages=ASK), GenerationRequest(messages=[{"role": "user", "content": "Hi"}])]
    out = tiny_generator.generate(requests, SamplingParams(max_new_tokens=12, seed=0, logprobs=True))
    assert len(out) == 2
    for completion in out:
        assert 0 < len(completion.token_ids) <= 12
        assert completion.text == tiny_generator.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
        assert completion.logprobs is not None and len(completion.logprobs) == len(completion.token_ids)
        assert all(lp <= 0.0 for lp in completion.logprobs)
        assert completion.finish_reason in {"stop", "length"} and completion.prompt_tokens > 0


def test_token_prompt_continues_exactly_like_the_chat_prompt(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=10)
    ids = tiny_generator.prompt_ids(GenerationRequest(messages=ASK))
    by_messages, by_ids = tiny_generator.generate(
        [GenerationRequest(messages=ASK), GenerationRequest(messages=[], prompt_ids=ids)], greedy
    )
    assert by_messages.token_ids == by_ids.token_ids


def test_left_padding_does_not_change_greedy_output(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    alone = tiny_generator.generate([GenerationRequest(messages=ASK)], greedy)[0]
    long_neighbour = [{"role": "user", "content": "Tell me a long story about a dragon. " * 8}]
    batched = tiny_generator.generate(
        [GenerationRequest(messages=ASK), GenerationRequest(messages=long_neighbour)], greedy
    )[0]
    assert batched.token_ids == alone.token_ids


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda tmp: str(tmp / "missing"), "does not exist"),
        (lambda tmp: str((tmp / "f.bin").write_bytes(b"x") and tmp / "f.bin"), "is a file"),
        (lambda tmp: str((tmp / "empty").mkdir() or tmp / "empty"), "has no config.json"),
    ],
    ids=["missing", "file", "no-config"],
)
def test_bad_model_path_fails_with_one_line(tmp_path: Path, make, message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ModelError, match=message) as err:
        resolve_model(make(tmp_path))
    assert "\n" not in str(err.value)


def test_hub_ids_pass_through_resolution() -> None:
    assert resolve_model("HuggingFaceTB/SmolLM2-135M-Instruct") == "HuggingFaceTB/SmolLM2-135M-Instruct"


# -- a scripted OpenAI-compatible server for retries and refusals ------------------------------------------
class _Scripted(http.server.BaseHTTPRequestHandler):
    """Answers POSTs with the statuses in ``script`` (then 200s, or ``always`` when set), counting them."""

    script: ClassVar[list[int]] = []
    always: ClassVar[int | None] = None
    headers_for: ClassVar[dict[int, dict[str, str]]] = {}  # extra response headers per status
    seen: ClassVar[list[dict]] = []

    def log_message(self, *args: object) -> None:
        pass

    def _reply(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in type(self).headers_for.get(status, {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._reply(200, {"object": "list", "data": [{"id": "m", "object": "model", "created": 0, "owned_by": "x"}]})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        type(self).seen.append(body)
        status = type(self).script.pop(0) if type(self).script else (type(self).always or 200)
        if status == 299:  # a server that parses tool calls: content None, structured tool_calls
            call = {"id": "t", "type": "function", "function": {"name": "lookup", "arguments": '{"key": "a"}'}}
            message = {"role": "assistant", "content": None, "tool_calls": [call]}
            self._reply(
                200,
                {
                    "id": "c",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "m",
                    "choices": [{"index": 0, "finish_reason": "tool_calls", "message": message}],
                },
            )
            return
        if status != 200:
            self._reply(status, {"error": {"message": f"scripted {status}", "type": "x"}})
            return
        self._reply(
            200,
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "\\boxed{5}"}}
                ],
                "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
            },
        )


@pytest.fixture
def scripted_server() -> Iterator[tuple[str, type[_Scripted]]]:
    handler = type("Handler", (_Scripted,), {"script": [], "always": None, "headers_for": {}, "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", free_port()), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1", handler
    server.shutdown()
    server.server_close()


def test_openai_backend_retries_transient_errors(scripted_server) -> None:  # type: ignore[no-untyped-def]
    url, handler = scripted_server
    handler.script = [503, 429]
    gen = OpenAIGenerator(url, "m", max_retries=3)
    out = gen.generate([GenerationRequest(messages=ASK)], SamplingParams(max_new_tokens=5, stop=("\n",), seed=3))
    assert (out[0].text, out[0].error, out[0].prompt_tokens) == ("\\boxed{5}", None, 7)
    assert len(handler.seen) == 3
    assert handler.seen[-1]["stop"] == ["\n"] and handler.seen[-1]["seed"] == 3 and handler.seen[-1]["max_tokens"] == 5


def test_openai_client_honours_retry_after_and_succeeds_on_the_retry(scripted_server) -> None:  # type: ignore[no-untyped-def]
    url, handler = scripted_server
    handler.script = [429]
    handler.headers_for = {429: {"Retry-After": "0"}}
    gen = OpenAIGenerator(url, "m", max_retries=2)
    out = gen.generate([GenerationRequest(messages=ASK)], SamplingParams(max_new_tokens=5))
    assert (out[0].text, out[0].error) == ("\\boxed{5}", None)
    assert len(handler.seen) == 2  # the 429, then the retry that succeeded


def test_openai_failure_after_max_retries_is_recorded_not_raised(scripted_server) -> None:  # type: ignore[no-untyped-def]
    url, handler = scripted_server
    handler.always = 500
    gen = OpenAIGenerator(url, "m", max_retries=2)
    out = gen.generate([GenerationRequest(messages=ASK)], SamplingParams(max_new_tokens=5))
    assert out[0].error is not None and out[0].error.startswith("HTTP 500") and out[0].finish_reason == "error"
    assert len(handler.seen) == 2 + 1  # the first attempt and max_retries retries, counted by the server


def test_openai_refusal_is_recorded_per_request_not_raised(scripted_server) -> None:  # type: ignore[no-untyped-def]
    url, handler = scripted_server
    handler.script = [400]
    gen = OpenAIGenerator(url, "m", max_retries=3)
    out = gen.generate([GenerationRequest(messages=ASK)], SamplingParams(max_new_tokens=5))
    assert out[0].error is not None and out[0].error.startswith("HTTP 400")
    assert len(handler.seen) == 1  # a refusal is not retried


def test_openai_unreachable_server_fails_at_once() -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    with pytest.raises(ModelError, match=re.escape(f"cannot reach the OpenAI-compatible server at {url}")):
        OpenAIGenerator(url, "m")


def test_openai_backend_needs_a_base_url() -> None:
    with pytest.raises(ModelError, match=r"needs model\.base_url"):
        make_generator(load_config("tiny", overrides=["model.backend=openai"]).model)


# -- real servers: transformers serve on loopback ------------------------------------------------------------
@pytest.mark.slow
def test_openai_backend_against_transformers_serve(tiny_model_dir: str) -> None:
    port = free_port()
    command = [part.format(model=tiny_model_dir, host="127.0.0.1", port=port) for part in TRANSFORMERS_SERVE]
    server = ServerProcess(command, port, startup_timeout_s=180, env={"HF_HUB_OFFLINE": "1"})
    server.start()
    try:
        gen = OpenAIGenerator(f"{server.base_url}/v1", tiny_model_dir)
        out = gen.generate([GenerationRequest(messages=ASK)] * 3, SamplingParams(max_new_tokens=8, seed=1))
        assert len(out) == 3 and all(c.error is None and c.text and c.prompt_tokens > 0 for c in out)
    finally:
        server.stop()
    assert not server.running


def test_server_that_dies_at_startup_reports_its_log() -> None:
    port = free_port()
    command = [sys.executable, "-c", "print('boom: no GPU found'); raise SystemExit(3)"]
    with pytest.raises(ModelError, match=r"exited with code 3 during startup: boom: no GPU found"):
        ServerProcess(command, port, startup_timeout_s=30).start()


HEALTH_SERVER = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""
OWNER = """
import sys, time
from spade_core.llm.server_process import ServerProcess
server = ServerProcess([sys.executable, "-c", sys.argv[2], sys.argv[1]], int(sys.argv[1]), startup_timeout_s=60)
server.start()
print(server.proc.pid, flush=True)
time.sleep(600)
"""


def _group_alive(group: int) -> bool:
    return subprocess.run(["pgrep", "-g", str(group)], capture_output=True).returncode == 0


def test_a_server_whose_owner_is_killed_goes_down_with_it() -> None:
    port = free_port()
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(port), HEALTH_SERVER], stdout=subprocess.PIPE, text=True)
    assert owner.stdout is not None
    group = int(owner.stdout.readline())  # the server is healthy and leads its own group
    assert _group_alive(group)
    owner.kill()  # no atexit, no stop(): the guard must notice
    owner.wait()
    deadline = time.monotonic() + 15
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _group_alive(group)


def test_a_stopped_server_leaves_no_process_of_its_group() -> None:
    port = free_port()
    server = ServerProcess([sys.executable, "-c", HEALTH_SERVER, str(port)], port, startup_timeout_s=60)
    server.start()
    assert server.proc is not None and server.healthy()
    group = server.proc.pid
    server.stop()
    assert not _group_alive(group) and not server.running


def test_a_missing_server_command_is_one_line() -> None:
    with pytest.raises(ModelError, match=r"server command 'no-such-server' not found"):
        ServerProcess(["no-such-server"], free_port(), startup_timeout_s=5).start()


def test_sampling_params_from_config() -> None:
    cfg = SimpleNamespace(temperature=0.3, top_p=0.9, top_k=20, max_new_tokens=77)
    expected = SamplingParams(temperature=0.3, top_p=0.9, top_k=20, max_new_tokens=77, seed=4)
    assert SamplingParams.from_config(cfg, seed=4) == expected


def test_no_server_left_running() -> None:
    out = subprocess.run(["pgrep", "-f", "transformers serve"], capture_output=True, text=True).stdout.strip()
    assert out == ""


def test_openai_structured_tool_calls_come_back_as_text(scripted_server) -> None:  # type: ignore[no-untyped-def]
    url, handler = scripted_server
    handler.script = [299]
    out = OpenAIGenerator(url, "m").generate([GenerationRequest(messages=ASK, seed=9)], SamplingParams())
    assert out[0].text == '<tool_call>{"name": "lookup", "arguments": {"key": "a"}}</tool_call>'
    assert handler.seen[-1]["seed"] == 9
