"""The ``vllm`` backend's supervision against real faults of the engine (vLLM's CPU build, the tiny model): its
EngineCore process stopped mid-batch (a hang that ``/health`` does not see), killed under a stream of episodes,
and killed with a replacement that cannot start. ``generate`` never raises, a fault is replaced once and recorded
as a ``restart`` swap with its cause, and no process of a replaced engine is left behind. (A killed API server
mid-batch, whose requests then complete on the restarted one: ``tests/test_vllm_engine.py``.)

One engine for the module (a start costs ~60 s here): each test replaces it, the last one leaves it down."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from spade_core.config import RolloutConfig, load_config
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import Completion, GenerationRequest, SamplingParams
from spade_core.llm.vllm_server import VLLMGenerator
from spade_core.pipeline.stage import LazyGenerator, fixed_lease
from spade_core.play.rollout import EpisodeSpec, RolloutEngine
from spade_core.train.data import agent_samples

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.usefixtures("jail_processes_checked")]
STORY = [{"role": "user", "content": "Write a long story about a cat who travels the world."}]
LONG = SamplingParams(temperature=0.6, max_new_tokens=64, logprobs=True)
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=8)


@pytest.fixture(scope="module")
def engine(tiny_model_dir: str) -> Iterator[VLLMGenerator]:
    """One fp32 engine on the tiny model for the module; every test's fault replaces it."""
    overrides = [f"model.name_or_path={tiny_model_dir}", "model.backend=vllm", "model.device=cpu"]
    cfg = load_config("tiny", overrides=[*overrides, "model.dtype=float32", "model.engine_dtype=float32"]).model
    generator = VLLMGenerator(cfg, startup_timeout_s=600)
    yield generator
    generator.close()


def group_of(engine: VLLMGenerator) -> list[int]:
    """The processes of the engine's process group (the guard, the API server, the EngineCore, helpers)."""
    assert engine.server is not None and engine.server.proc is not None
    return processes_in(engine.server.proc.pid)


def processes_in(group: int) -> list[int]:
    out = subprocess.run(["pgrep", "-g", str(group)], capture_output=True, text=True).stdout
    return [int(pid) for pid in out.split()]


def engine_core(engine: VLLMGenerator) -> int:
    """The pid of the engine's EngineCore process (vLLM names it ``VLLM::EngineCore``)."""
    for pid in group_of(engine):
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if "EngineCore" in command:
            return pid
    raise AssertionError(f"no EngineCore process among {group_of(engine)}")


def generated_tokens(engine: VLLMGenerator) -> float:
    """The engine's count of generated tokens so far (its Prometheus ``/metrics``)."""
    assert engine.server is not None
    text = engine.server.request("GET", "/metrics", timeout_s=10, raw=True)
    found = re.findall(r"^vllm:generation_tokens_total\{[^}]*\} ([0-9.e+]+)$", text, re.MULTILINE)
    return sum(float(x) for x in found)


def wait_until_decoding(engine: VLLMGenerator, before: float, tokens: int = 16, timeout_s: float = 120.0) -> None:
    """Return once the batch in flight has generated ``tokens`` tokens (so the fault strikes mid-batch)."""
    deadline = time.monotonic() + timeout_s
    while generated_tokens(engine) < before + tokens:
        assert time.monotonic() < deadline, "the batch generated nothing"
        time.sleep(0.2)


def fresh_window(engine: VLLMGenerator) -> None:
    """As if the engine's last replacement was long ago: this test's fault may replace it again."""
    engine._last_restart = -math.inf


def good_or_failed(completions: list[Completion]) -> bool:
    return all((c.error is None and len(c.token_ids) > 0) or (c.error and not c.token_ids) for c in completions)


def batch_with_fault(engine: VLLMGenerator, fault: Any, size: int = 8) -> tuple[list[Completion], str]:
    """``size`` long requests in flight, ``fault(engine)`` once they decode; returns their completions and how
    long, from the fault, the engine took to find it (its replacement began), to replace it and to end the
    batch."""
    before = generated_tokens(engine)
    requests = [GenerationRequest(messages=STORY, seed=s) for s in range(size)]
    with ThreadPoolExecutor(max_workers=1) as pool:
        batch = pool.submit(engine.generate, requests, LONG)
        wait_until_decoding(engine, before)
        struck = time.monotonic()
        fault(engine)
        out = batch.result(timeout=800)
    seconds = engine.swaps[-1].seconds if engine.swaps else math.nan
    found = engine._last_restart - struck
    return (
        out,
        f"found after {found:.1f} s, replaced in {seconds:.1f} s, batch back after {time.monotonic() - struck:.1f} s",
    )


def test_a_stopped_engine_core_fails_its_probe_and_is_replaced_without_leftovers(
    engine: VLLMGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    fresh_window(engine)
    monkeypatch.setattr(
        engine, "cfg", engine.cfg.model_copy(update={"request_timeout_s": 30.0, "health_timeout_s": 5.0})
    )
    group, swaps = engine.server.proc.pid, len(engine.swaps)  # type: ignore[union-attr]
    core = engine_core(engine)
    health: list[bool] = []

    def stop(e: VLLMGenerator) -> None:
        os.kill(core, signal.SIGSTOP)
        time.sleep(1.0)
        health.append(e.server is not None and e.server.healthy())  # /health does not see the hang

    out, timing = batch_with_fault(engine, stop)
    assert len(out) == 8 and good_or_failed(out), [c.error for c in out]
    (swap,) = engine.swaps[swaps:]
    print(f"\nSIGSTOP of the EngineCore (/health then {health}): {timing}; swap {swap}")
    assert swap.method == "restart" and swap.error == "the engine did not answer the health probe in 5 s", swap
    assert processes_in(group) == [] and not Path(f"/proc/{core}").exists()  # the stopped process too
    (after,) = engine.generate([GenerationRequest(messages=STORY, seed=2)], GREEDY)
    assert after.error is None and after.token_ids


def test_a_rollout_whose_engine_core_is_killed_keeps_its_failed_plays_out_of_training(
    engine: VLLMGenerator, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No retry of a request (``model.max_retries=0``) nor of a play (``rollout.model_retries=0``): the plays in
    flight when the EngineCore is killed fail as ``model_error`` rows, the engine is replaced, the later plays
    run on it, and no failed play becomes an agent sample."""
    fresh_window(engine)
    monkeypatch.setattr(engine, "cfg", engine.cfg.model_copy(update={"max_retries": 0}))
    env = {e.skill: e for e in load_seed_envs()}["pattern_recognition"]
    cfg = RolloutConfig(max_turns=3, max_tokens_per_turn=48, max_context_tokens=2048, max_in_flight=3, model_retries=0)
    specs = [EpisodeSpec(env.env_id, env.code, seed) for seed in range(6)]
    with ExitStack() as stack:  # as a stage holds its model: the restart is one of the stage's weight swaps
        model = LazyGenerator(lambda: fixed_lease(engine), stack)
        rollout = RolloutEngine(model, cfg, SamplingParams(temperature=0.6, seed=0), call_timeout_s=5.0)
        swaps, before, group = len(model.collect_swaps()), generated_tokens(engine), engine.server.proc.pid  # type: ignore[union-attr]
        with ThreadPoolExecutor(max_workers=1) as pool:
            played = pool.submit(rollout.run, specs)
            wait_until_decoding(engine, before, tokens=24)
            os.kill(engine_core(engine), signal.SIGKILL)
            rows = played.result(timeout=800)
        stage_swaps = model.collect_swaps()[swaps:]
    kinds = [r["error_type"] for r in rows]
    print(f"\nrollout: error types {kinds}; swaps {stage_swaps}")
    assert len(rows) == len(specs) and [r["seed"] for r in rows] == list(range(6))
    assert set(kinds) == {None, "model_error"}, kinds  # the plays in flight failed, the later ones played
    (swap,) = stage_swaps
    # the cause: the server found dead, or (its shutdown slower than the probe's 2 s grace, under load) the
    # probe answered with the EngineCore's own failure, or had its connection reset by the server going down
    assert swap["method"] == "restart" and re.search(
        r"the server died \(exit code 0\): .*EngineDeadError|HTTP 500: .*EngineCore encountered an issue"
        r"|the engine failed the health probe: ConnectionResetError",
        swap["error"],
    ), swap
    assert processes_in(group) == []  # the old engine's whole group is gone
    samples, skipped = agent_samples(pd.DataFrame(rows).assign(condition="no_hint"))
    failed = {r["episode_id"] for r in rows if r["error_type"] == "model_error"}
    assert skipped >= len(failed) and not failed & {s.source_id for s in samples}


def test_a_restart_that_cannot_start_fails_the_requests_as_data_and_is_tried_once(
    engine: VLLMGenerator, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The module's last test: the engine stays down. The replacement is handed a socket directory whose path
    # is too long for a Unix socket (as when it cannot bind): vLLM exits during its start.
    fresh_window(engine)
    unbindable = tmp_path / ("d" * 120)
    unbindable.mkdir()
    monkeypatch.setattr("spade_core.llm.vllm_server.engine_socket_dir", lambda: unbindable)
    starts: list[str] = []
    real_start = engine._start

    def counted_start(*args: Any, **kwargs: Any) -> None:
        starts.append(args[1])
        real_start(*args, **kwargs)

    monkeypatch.setattr(engine, "_start", counted_start)
    group, swaps, restarts = engine.server.proc.pid, len(engine.swaps), engine.restarts  # type: ignore[union-attr]
    out, _ = batch_with_fault(engine, lambda e: os.kill(engine_core(e), signal.SIGKILL), size=16)
    with ThreadPoolExecutor(max_workers=8) as pool:  # more callers at once, each with its own batch
        more = list(pool.map(lambda s: engine.generate([GenerationRequest(messages=STORY, seed=s)], GREEDY), range(8)))
    (late,) = engine.generate([GenerationRequest(messages=STORY)], GREEDY)
    errors = [c.error for c in out + [c for batch in more for c in batch] + [late]]
    print(f"\nfailed restart: errors {set(errors)}; swap {engine.swaps[swaps:]}")
    assert good_or_failed(out) and all("the restart failed" in (e or "") for e in errors[16:]), errors
    assert starts == ["restart"] and engine.restarts == restarts + 1  # one start for every caller
    (swap,) = engine.swaps[swaps:]
    assert swap.method == "restart" and swap.error and "the restart failed: model server exited" in swap.error
    assert late.error and "\n" not in late.error  # failed at once: no second start (starts above)
    assert processes_in(group) == []
