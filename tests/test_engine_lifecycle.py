"""The engine service's life around a stand-in engine: the trainer's turn on a device the engine shares (it
sleeps and wakes instead of restarting, or, without sleep mode, stops and starts), a run that fails (its
engine stops with it), and a service on a configured address for workers on other machines.

vLLM's CPU build has no sleep mode, so the real engine is not what these tests run: a stand-in server
(``tests/fixtures/standin_engine.py``) speaks the endpoints a GPU engine has and records the order of the
calls the project makes through the real :class:`~spade_core.llm.vllm_server.VLLMGenerator` and the real
:class:`~spade_core.llm.engine_service.EngineService`. The device check (``benchmarks/device_check.sh``) runs
the GPU paths that need no vLLM; the real engine's service is tests/test_vllm_engine.py's.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from spade_core.config import load_config
from spade_core.llm.base import GenerationRequest, SamplingParams
from spade_core.llm.engine_service import EngineService

STANDIN = Path(__file__).parent / "fixtures" / "standin_engine.py"


def checkpoint_copy(source: str, dest: Path) -> str:
    """A checkpoint directory of ``source``'s files (linked: a new path, the same weights)."""
    dest.mkdir()
    for entry in Path(source).iterdir():
        if entry.is_file():
            os.symlink(entry.resolve(), dest / entry.name)
    return str(dest)


@pytest.fixture
def standin_cfg(tmp_path: Path, tiny_model_dir: str):  # type: ignore[no-untyped-def]
    log = tmp_path / "calls.log"
    command = [sys.executable, str(STANDIN), "{port}", str(log), "--model", "{model}"]
    overrides = [
        f"model.name_or_path={tiny_model_dir}",
        "model.backend=vllm",
        "model.device=cpu",
        "model.engine_sleep=true",
        "model.max_retries=0",
    ]
    cfg = load_config("tiny", overrides=overrides).model.model_copy(update={"server_command": command})
    return cfg, log


def calls(log: Path) -> list[str]:
    return [line for line in log.read_text().splitlines() if not line.startswith("argv")]


def test_the_trainers_turn_sleeps_the_engine_then_wakes_and_reloads_it(standin_cfg, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg, log = standin_cfg
    service = EngineService(cfg, replicas=1)  # its replica: the real VLLMGenerator on the stand-in
    try:
        step1 = checkpoint_copy(cfg.name_or_path, tmp_path / "step-1")
        with service.leased(cfg.name_or_path) as engine:
            (out,) = engine.generate([GenerationRequest(messages=[], prompt_ids=[1])], SamplingParams())
            assert out.error is None and out.token_ids == [64]
        assert "--enable-sleep-mode" in log.read_text().splitlines()[0]  # the engine was started with it
        with service.turn():
            assert calls(log)[-1] == "POST /sleep?level=1" and service.replicas[0].generator.asleep
        assert service.turns_taken == ["slept"]
        with service.leased(step1):  # the next lease wakes the engine, then the new weights go in place
            pass
        assert calls(log)[-4:] == [
            "POST /sleep?level=1",
            "POST /wake_up",
            "POST /collective_rpc",
            "POST /reset_prefix_cache",
        ]
        methods = [s.method for s in service.take_swaps()]
        assert methods == ["start", "reload"]  # one start in all: no restart after the turn
    finally:
        service.close()
    assert not service.replicas


def test_without_sleep_mode_the_turn_stops_the_engine_and_the_next_lease_starts_it(standin_cfg) -> None:  # type: ignore[no-untyped-def]
    cfg, log = standin_cfg
    cfg = cfg.model_copy(update={"engine_sleep": False})
    service = EngineService(cfg, replicas=1)  # its replica: the real VLLMGenerator on the stand-in
    try:
        with service.leased(cfg.name_or_path):
            pass
        assert "--enable-sleep-mode" not in log.read_text().splitlines()[0]
        with service.turn():
            server = service.replicas[0].generator.server
            assert server is not None and not server.running
        with service.leased(cfg.name_or_path):
            pass
        swaps = service.take_swaps()
        assert [(s.method, s.error) for s in swaps] == [("start", None), ("restart", None)]  # planned: no fault
        assert "POST /sleep?level=1" not in calls(log)
    finally:
        service.close()


def test_a_run_that_fails_stops_its_engine_service_and_leaves_no_process(standin_cfg, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from flows.spade import run_engine
    from spade_core.config import SpadeConfig
    from spade_core.llm.engine_client import service_file
    from spade_core.pipeline.leases import process_pool
    from spade_core.store.artifacts import Store

    model, _log = standin_cfg
    cfg = SpadeConfig.model_validate({"model": model.model_dump(mode="json")})
    store = Store(str(tmp_path / "store"))
    groups: list[int] = []
    with pytest.raises(RuntimeError, match="a stage failed"), run_engine(cfg, store, "failing"):
        assert service_file("failing", store.base).is_file()  # published at the run's start
        with process_pool().lease_for(cfg, store, "failing", 0)() as engine:
            (out,) = engine.generate([GenerationRequest(messages=[], prompt_ids=[1])], SamplingParams())
            assert out.error is None
            groups = [r.generator.server.proc.pid for r in process_pool().services()[0].replicas]
        raise RuntimeError("a stage failed")
    assert groups and process_pool().services() == [] and not service_file("failing", store.base).exists()
    left = [subprocess.run(["pgrep", "-g", str(g)], capture_output=True, text=True).stdout.split() for g in groups]
    assert left == [[]]


def test_workers_on_other_machines_reach_the_service_at_its_configured_address_with_the_shared_key(
    standin_cfg, monkeypatch: pytest.MonkeyPatch
) -> None:  # type: ignore[no-untyped-def]
    from conftest import free_port

    from spade_core.llm.base import ModelError
    from spade_core.llm.engine_client import KEY_ENV, find_service

    cfg, _log = standin_cfg
    address = f"127.0.0.1:{free_port()}"
    monkeypatch.setenv(KEY_ENV, "a-key-set-alike-on-every-machine")
    service = EngineService(cfg, replicas=1, address=address)
    try:
        assert service.url == f"http://{address}" and service.key == "a-key-set-alike-on-every-machine"
        client = find_service("remote-run", "s3://bucket/store", address)
        assert client is not None and client.state()["replicas"] == []  # no replica yet: none started
        monkeypatch.delenv(KEY_ENV)
        with pytest.raises(ModelError, match=r"needs the service's API key in \$SPADE_ENGINE_KEY"):
            find_service("remote-run", "s3://bucket/store", address)
    finally:
        service.close()
