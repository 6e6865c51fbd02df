"""The run's engine service on the real engine (vLLM's CPU build, two replicas of the tiny model, one core
each): requests spread over both replicas and an episode's turns kept on one, the same tokens and log-probs
as one engine samples, a worker process reaching it by its published address and key, checkpoints held and
reloaded in place on every replica, the trainer's turn, and nothing left running."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from spade_core.config import load_config
from spade_core.llm.base import CacheSlot, GenerationRequest, ModelError, SamplingParams
from spade_core.llm.engine_client import EngineClient, find_service, service_file
from spade_core.llm.engine_service import EngineService

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.usefixtures("jail_processes_checked")]
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=12, logprobs=True, seed=11)
RUN = "engine-service-test"
STORE = "/no/store/of/this/test"  # the service file names the run's store too


def model_cfg(path: str):  # type: ignore[no-untyped-def]
    base = [f"model.name_or_path={path}", "model.backend=vllm", "model.device=cpu", "model.dtype=float32"]
    return load_config("tiny", overrides=base).model


def requests(n: int, prefix: str = "ep") -> list[GenerationRequest]:
    return [
        GenerationRequest(
            messages=[{"role": "user", "content": f"Name {i + 2} colours."}], cache_slot=CacheSlot(f"{prefix}{i}", 1024)
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def service(tiny_model_dir: str):  # type: ignore[no-untyped-def]
    """Two fp32 replicas of the tiny model for the module (started at the first lease, in parallel)."""
    engine = EngineService(model_cfg(tiny_model_dir), replicas=2)
    engine.publish(RUN, STORE, lambda step: tiny_model_dir)
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def moved_model(tiny_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    from test_vllm_engine import moved_model as make  # one recipe for a moved checkpoint

    return make.__wrapped__(tiny_model_dir, tmp_path_factory)  # type: ignore[attr-defined]


def test_two_replicas_serve_a_batch_and_each_episode_stays_on_its_replica(
    service: EngineService, tiny_model_dir: str
) -> None:
    with service.leased(tiny_model_dir) as engine:
        assert len(service.replicas) == 2 and [s.method for s in service.take_swaps()] == ["start", "start"]
        out = engine.generate(requests(16), SAMPLED)
        assert [c.error for c in out] == [None] * 16 and all(c.token_ids for c in out)
        served = [r.served for r in service.replicas]
        assert sum(served) == 16 and min(served) >= 4, served  # both replicas took a share
        # The next turn of every episode goes to the replica that served its first (its prefix cache).
        first = {key: service._sessions[key] for key in (f"ep{i}" for i in range(16))}
        before = [r.served for r in service.replicas]
        again = engine.generate(requests(16), SAMPLED)
        assert [c.error for c in again] == [None] * 16 and {k: service._sessions[k] for k in first} == first
        added = [r.served - b for r, b in zip(service.replicas, before, strict=True)]
        assert added == [list(first.values()).count(i) for i in range(2)]
        service.release(list(first))
        assert not service._sessions


def test_the_replicas_sample_what_one_engine_samples(service: EngineService, tiny_model_dir: str) -> None:
    # Every request carries its seed (fixed by the call), so the replica that serves it changes nothing.
    with service.leased(tiny_model_dir) as engine:
        spread = engine.generate(requests(8, "exact"), SAMPLED)
        alone = service.replicas[0].generator.generate(requests(8, "exact"), SAMPLED)  # one engine, the same call
    assert [c.token_ids for c in spread] == [c.token_ids for c in alone]
    gaps = [
        abs(a - b)
        for s, o in zip(spread, alone, strict=True)
        for a, b in zip(s.logprobs or [], o.logprobs or [], strict=True)
    ]
    assert gaps and max(gaps) < 1e-4


WORKER = """
import json, sys
from spade_core.llm.base import GenerationRequest, SamplingParams
from spade_core.llm.engine_client import find_service
client = find_service(sys.argv[1], sys.argv[3], None, sys.argv[2])
params = SamplingParams(temperature=1.0, max_new_tokens=12, logprobs=True, seed=11)
with client.leased(sys.argv[1], 0) as engine:
    out = engine.generate([GenerationRequest(messages=[{"role": "user", "content": "Name 2 colours."}])], params)
print(json.dumps({"ids": out[0].token_ids, "error": out[0].error, "state": client.state()["replicas"]}))
"""


def test_a_worker_process_reaches_the_service_by_its_published_address_and_key(
    service: EngineService, tiny_model_dir: str
) -> None:
    published = json.loads(service_file(RUN, STORE).read_text())
    assert published["url"] == service.url and published["pid"] == os.getpid()
    assert oct(service_file(RUN, STORE).stat().st_mode & 0o777) == "0o600"  # the key: this user's alone
    assert find_service(RUN, STORE, None) is None  # the owner's own process leases the service itself
    done = subprocess.run(
        [sys.executable, "-c", WORKER, RUN, tiny_model_dir, STORE],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    with service.leased(tiny_model_dir) as engine:
        (here,) = engine.generate(
            [GenerationRequest(messages=[{"role": "user", "content": "Name 2 colours."}])], SAMPLED
        )
    assert answer["error"] is None and answer["ids"] == here.token_ids and len(answer["state"]) == 2
    with pytest.raises(ModelError, match="refused the API key"):
        EngineClient(service.url, "not-the-key").state()


def test_a_lease_on_another_checkpoint_waits_then_every_replica_reloads_in_place(
    service: EngineService, tiny_model_dir: str, moved_model: str
) -> None:
    base = service.hold(tiny_model_dir, "test:base")
    assert base is not None
    assert service.hold(moved_model, "test:moved", wait_s=1.5) is None  # the base checkpoint is held
    got: list[str | None] = []
    waiting = threading.Thread(target=lambda: got.append(service.hold(moved_model, "test:moved", wait_s=300)))
    waiting.start()
    service.unhold(base)
    waiting.join(timeout=300)
    assert got and got[0] is not None
    swaps = service.take_swaps()
    assert sorted((s.replica, s.method) for s in swaps) == [(0, "reload"), (1, "reload")], swaps
    assert service.model_ref == f"vllm:{Path(moved_model).name}"
    service.unhold(got[0])
    # A holder that died (a killed worker) does not keep the checkpoint: its lease goes with it.
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    lease = service.hold(moved_model, f"{os.uname().nodename}:{dead.stdout.strip()}")
    assert lease is not None and service.hold(tiny_model_dir, "test:base", wait_s=60) is not None


def test_the_trainers_turn_stops_the_cpu_replicas_and_closing_leaves_no_process(service: EngineService) -> None:
    # The module's last test. A CPU engine has no sleep mode: the turn stops each replica's whole process
    # group (tests/test_engine_lifecycle.py checks the GPU's sleep and wake); closing the service stops the rest.
    groups = [r.generator.server.proc.pid for r in service.replicas]  # type: ignore[union-attr]
    with service._changed:
        service._holds.clear()  # the previous test's leases
    with service.turn():
        left = [subprocess.run(["pgrep", "-g", str(g)], capture_output=True, text=True).stdout.split() for g in groups]
        assert left == [[], []] and service.turns_taken[-2:] == ["stopped", "stopped"]
    service.close()
    assert not service_file(RUN, STORE).exists()
    with pytest.raises(OSError):
        EngineClient(service.url, service.key).call("GET", "/state", timeout_s=5)
