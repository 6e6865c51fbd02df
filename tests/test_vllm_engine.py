"""The ``vllm`` backend against the real engine (vLLM's CPU build, from ``make vllm-env``) on the tiny model,
as a run has it: the run's engine service with two replicas, one core each (one start of both for the
module). The service: requests spread over both replicas and an episode's turns kept on one, the same tokens
and log-probs as one engine samples, a worker process reaching it by its published address and key,
checkpoints held and reloaded in place on every replica. One replica as an engine: start and health, its
socket and key, one line without the engine, exact tokens and log-probs, weights reloaded in place, a killed
server restarted once, a stream of episodes. Then the trainer's turn, and nothing left running."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import psutil
import pytest
import torch

from spade_core.config import RolloutConfig, load_config
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import CacheSlot, GenerationRequest, ModelError, SamplingParams
from spade_core.llm.embedded import cache_dir
from spade_core.llm.engine_client import EngineClient, find_service, service_file
from spade_core.llm.engine_service import EngineService
from spade_core.llm.server_process import HTTPStatusError, UnixHTTPConnection, http_request
from spade_core.llm.vllm_server import VLLMGenerator, engine_python
from spade_core.play.rollout import EpisodeSpec, RolloutEngine

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900), pytest.mark.usefixtures("jail_processes_checked")]
ASK = [{"role": "user", "content": "Name three colours."}]
GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12, logprobs=True)
SAMPLED = SamplingParams(temperature=1.0, max_new_tokens=12, logprobs=True, seed=11)
RUN = "engine-service-test"
STORE = "/no/store/of/this/test"  # the service file names the run's store too


def model_cfg(path: str, *overrides: str):  # type: ignore[no-untyped-def]
    base = [
        f"model.name_or_path={path}",
        "model.backend=vllm",
        "model.device=cpu",
        "model.dtype=float32",
        "model.engine_dtype=float32",
    ]
    return load_config("tiny", overrides=[*base, *overrides]).model


@pytest.fixture(scope="module")
def service(tiny_model_dir: str):  # type: ignore[no-untyped-def]
    """The engine service of the module: two fp32 replicas of the tiny model, started at once at the first
    lease (30-60 s here), published as a run's service is."""
    engine = EngineService(model_cfg(tiny_model_dir), replicas=2)
    engine.publish(RUN, STORE, lambda step: tiny_model_dir)
    with engine.leased(tiny_model_dir):
        pass
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def engine(service: EngineService) -> VLLMGenerator:
    """Replica 0 of the service, as an engine of its own."""
    return service.replicas[0].generator  # type: ignore[no-any-return]


def requests(n: int, prefix: str = "ep") -> list[GenerationRequest]:
    return [
        GenerationRequest(
            messages=[{"role": "user", "content": f"Name {i + 2} colours."}], cache_slot=CacheSlot(f"{prefix}{i}", 1024)
        )
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def moved_model(tiny_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A checkpoint of the tiny model with every weight moved a little (as after a few updates)."""
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("moved")
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=generator) * 0.02)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (Path(tiny_model_dir) / name).is_file():
            shutil.copy(Path(tiny_model_dir) / name, out / name)
    return str(out)


def greedy_text(generator: VLLMGenerator) -> str:
    (out,) = generator.generate([GenerationRequest(messages=ASK)], GREEDY)
    assert out.error is None, out.error
    return out.text


def test_the_engine_starts_healthy_and_serves_token_ids_with_logprobs(engine: VLLMGenerator) -> None:
    assert engine.server is not None and engine.server.healthy()
    (out,) = engine.generate([GenerationRequest(messages=ASK)], GREEDY)
    assert out.error is None and out.token_ids and out.logprobs is not None
    assert len(out.logprobs) == len(out.token_ids) and all(x <= 0 for x in out.logprobs)
    assert out.text == engine.tokenizer.decode(out.token_ids, skip_special_tokens=True)
    assert out.prompt_tokens == len(engine.prompt_ids(GenerationRequest(messages=ASK)))
    # It listens on a Unix socket in a directory of its own (mode 0700) and takes its API key; no TCP port.
    socket_path = engine.server.socket_path
    assert socket_path is not None and engine.server.port is None
    with pytest.raises(HTTPStatusError) as refused:
        http_request(UnixHTTPConnection(socket_path, 30), "POST", "/v1/completions", {"model": "spade", "prompt": [1]})
    assert refused.value.code == 401


def test_two_replicas_serve_a_batch_and_each_episode_stays_on_its_replica(
    service: EngineService, tiny_model_dir: str
) -> None:
    with service.leased(tiny_model_dir) as engine:
        assert len(service.replicas) == 2
        assert sorted((s.replica, s.method) for s in service.take_swaps()) == [(0, "start"), (1, "start")]
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


def test_a_missing_engine_is_one_line_naming_the_make_target(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPADE_VLLM_PYTHON", "/nonexistent/bin/python")
    with pytest.raises(ModelError, match=r"SPADE_VLLM_PYTHON='/nonexistent/bin/python' is not a file.*make vllm-env"):
        engine_python()
    monkeypatch.delenv("SPADE_VLLM_PYTHON")
    monkeypatch.setattr("spade_core.llm.vllm_server.ENGINE_VENV", "no-such-venv")
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    with pytest.raises(ModelError, match=r"needs the vLLM engine, which is not installed: run 'make vllm-env'") as err:
        engine_python()
    assert "\n" not in str(err.value)


def trainer_logprob_gap(engine: VLLMGenerator, model_dir: str) -> float:
    """Largest |engine - trainer| log-prob over a sampled reply: the trainer's are the raw distribution
    (temperature 1, fp32) of the weights in ``model_dir`` at the sampled tokens."""
    from transformers import AutoModelForCausalLM

    request = GenerationRequest(messages=ASK, seed=7)
    (out,) = engine.generate([request], SamplingParams(temperature=0.6, max_new_tokens=24, logprobs=True))
    assert out.logprobs is not None and len(out.token_ids) > 4
    prompt = engine.prompt_ids(request)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    ids = torch.tensor([prompt + out.token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1]
    trainer = torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    return float((trainer - torch.tensor(out.logprobs)).abs().max().item())


def test_engine_logprobs_equal_the_trainers_in_fp32(engine: VLLMGenerator, tiny_model_dir: str) -> None:
    assert trainer_logprob_gap(engine, tiny_model_dir) < 1e-4


def test_a_multi_turn_episode_stores_the_sampled_ids_which_decode_to_the_chat_template(
    engine: VLLMGenerator,
) -> None:
    envs = {e.skill: e for e in load_seed_envs()}
    env = envs["pattern_recognition"]
    cfg = RolloutConfig(max_turns=3, max_tokens_per_turn=24, max_context_tokens=2048)
    specs = [EpisodeSpec(env.env_id, env.code, seed) for seed in (0, 1, 2)]
    rows = RolloutEngine(engine, cfg, SamplingParams(temperature=0.6, seed=0), call_timeout_s=5.0).run(specs)
    tok = engine.tokenizer
    assert any(row["turns"] >= 2 for row in rows), [row["turns"] for row in rows]
    for row in rows:
        assert row["error_type"] is None
        rendered = tok.apply_chat_template(row["transcript"], tokenize=False, add_generation_prompt=False)
        text = tok.decode(row["token_ids"])
        # the ids are the conversation as the template writes it, up to the end of the last reply
        assert rendered.startswith(text) and rendered[len(text) :] in ("", "\n", "<|im_end|>\n"), rendered[len(text) :]
        # every agent token carries the engine's own log-prob (no re-tokenization, no NaN)
        agent = [lp for lp, m in zip(row["logprobs"], row["loss_mask"], strict=True) if m]
        assert agent and all(lp == lp and lp <= 0 for lp in agent)


def test_the_stream_and_the_lockstep_batch_play_the_same_episodes(engine: VLLMGenerator) -> None:
    envs = {e.skill: e for e in load_seed_envs()}
    env = envs["logical_deduction"]
    cfg = RolloutConfig(max_turns=2, max_tokens_per_turn=16, max_context_tokens=2048, max_in_flight=3)
    specs = [EpisodeSpec(env.env_id, env.code, seed) for seed in range(4)]
    sampling = SamplingParams(temperature=0.0, seed=0)
    streamed = RolloutEngine(engine, cfg, sampling, call_timeout_s=5.0).run(specs)

    class Lockstep:  # the same engine, without the stream: one batched call per turn
        streams = False
        supports_token_prompts = True
        model_ref, tokenizer = engine.model_ref, engine.tokenizer
        generate = staticmethod(engine.generate)

        def close(self) -> None:
            pass

    batched = RolloutEngine(Lockstep(), cfg, sampling, call_timeout_s=5.0).run(specs)  # type: ignore[arg-type]
    assert [r["token_ids"] for r in streamed] == [r["token_ids"] for r in batched]
    assert [r["episode_return"] for r in streamed] == [r["episode_return"] for r in batched]

    class Keeping:  # the same engine as a KV-cache owner: each episode's cache key must come back once it is over
        streams = True
        supports_token_prompts = True
        model_ref, tokenizer = engine.model_ref, engine.tokenizer
        generate = staticmethod(engine.generate)

        def __init__(self) -> None:
            self.released: list[str] = []

        def release(self, keys: list[str]) -> None:
            self.released.extend(keys)

        def close(self) -> None:
            pass

    keeping = Keeping()
    kept = RolloutEngine(keeping, cfg.model_copy(update={"reuse_kv_cache": True}), sampling, call_timeout_s=5.0)
    assert [r["token_ids"] for r in kept.run(specs)] == [r["token_ids"] for r in streamed]  # type: ignore[arg-type]
    assert len(keeping.released) == len(set(keeping.released)) == len(specs)


def test_many_seeded_requests_with_long_prompts_keep_the_engine_alive(engine: VLLMGenerator) -> None:
    # Prefilled in chunks, a seeded request's generator was rewound, which a CPU generator cannot do: the
    # engine died as soon as 32 seeded episodes were in flight. Chunked prefill is off on a CPU.
    long = [
        {"role": "user", "content": f"Story {i}: " + "the cat sat on the mat and looked around. " * 12}
        for i in range(32)
    ]  # ~140 tokens each: 32 of them overflow one step's token budget (2048 on a CPU), as a stream of episodes does
    restarts = engine.restarts
    short = SamplingParams(temperature=0.6, max_new_tokens=4)
    out = engine.generate([GenerationRequest(messages=[m], seed=i) for i, m in enumerate(long)], short)
    assert [c.error for c in out] == [None] * 32 and engine.restarts == restarts


def test_a_new_checkpoint_serves_exactly_its_weights(
    engine: VLLMGenerator, moved_model: str, tiny_model_dir: str
) -> None:
    before = greedy_text(engine)
    engine.reload(moved_model)  # the mechanism: the running engine takes other weights ...
    assert greedy_text(engine) != before
    engine.reload(tiny_model_dir)  # ... and the old ones back
    assert greedy_text(engine) == before
    # load_checkpoint reloads in place, and the engine then serves exactly the checkpoint's distribution
    # (the trainer's log-probs at its weights): the tied output head too, through the untied view
    swap = engine.load_checkpoint(moved_model)
    assert swap is not None and swap.method == "reload" and swap.error is None, swap
    assert engine.model_ref == f"vllm:{Path(moved_model).name}"
    assert trainer_logprob_gap(engine, moved_model) < 1e-4
    assert engine.load_checkpoint(moved_model) is None  # already loaded: nothing to do


def test_a_tied_checkpoint_is_served_as_an_untied_view_that_answers_alike(tiny_model_dir: str, tmp_path: Path) -> None:
    from safetensors import safe_open

    from spade_core.llm.untied import untied_view

    view = untied_view(tiny_model_dir, tmp_path)
    assert view is not None and json.loads((Path(view) / "config.json").read_text())["tie_word_embeddings"] is False
    with (
        safe_open(f"{view}/lm_head.safetensors", "pt") as head,
        safe_open(f"{tiny_model_dir}/model.safetensors", "pt") as model,
    ):
        assert torch.equal(head.get_tensor("lm_head.weight"), model.get_tensor("model.embed_tokens.weight"))
    assert (Path(view) / "model.safetensors").is_symlink()  # nothing but the head is copied


def _group_rss(generator: VLLMGenerator) -> int:
    """Resident bytes of the engine's whole process group."""
    assert generator.server is not None and generator.server.proc is not None
    root = psutil.Process(generator.server.proc.pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])


def test_an_idle_kept_engine_gives_its_kv_cache_pages_back_and_answers_as_before(
    service: EngineService, engine: VLLMGenerator, tiny_model_dir: str
) -> None:
    # While the trainer runs beside a kept CPU engine (generator_during_update: kept), every idle replica hands
    # its KV cache's pages back to the OS; the cache's size is model.engine_kv_cache_gib (tiny: 0.5 GiB).
    with service.leased(tiny_model_dir):
        before = engine.generate([GenerationRequest(messages=ASK, seed=s) for s in range(4)], GREEDY)
        assert service.rest() == 0  # a stage holds the engine: nothing is given back under it
    with service._changed:
        service._holds.clear()  # the leases the tests above kept
    kv = int(engine.cfg.engine_kv_cache_gib * 2**30)
    resident = [_group_rss(r.generator) for r in service.replicas]
    released = service.rest()
    assert released >= 0.95 * kv * len(service.replicas), (released, kv)
    dropped = [was - _group_rss(r.generator) for was, r in zip(resident, service.replicas, strict=True)]
    assert all(d > 0.5 * kv for d in dropped), (dropped, kv)  # the pages that had been written are gone
    with service.leased(tiny_model_dir):  # the same checkpoint: no reload, the prefix cache was reset
        after = engine.generate([GenerationRequest(messages=ASK, seed=s) for s in range(4)], GREEDY)
    assert [c.token_ids for c in after] == [c.token_ids for c in before] and all(c.error is None for c in after)


def test_a_killed_server_is_restarted_once_and_the_batch_completes(engine: VLLMGenerator) -> None:
    assert engine.server is not None and engine.server.proc is not None
    os.killpg(engine.server.proc.pid, signal.SIGKILL)
    engine.server.proc.wait(timeout=30)
    restarts = engine.restarts
    out = engine.generate([GenerationRequest(messages=ASK, seed=s) for s in range(3)], GREEDY)
    assert [c.error for c in out] == [None] * 3 and all(c.token_ids for c in out)
    assert engine.restarts == restarts + 1 and engine.swaps[-1].method == "restart"


def test_the_trainers_turn_stops_the_cpu_replicas_and_closing_leaves_nothing_behind(
    service: EngineService, engine: VLLMGenerator
) -> None:
    # The module's last test. With orchestration.generator_during_update: released the flow holds a device turn
    # around the update (on a CPU too): a CPU engine has no sleep mode, so each replica is stopped — its whole
    # process group, its temporary files and its socket directory (tests/test_engine_lifecycle.py checks a GPU's
    # sleep and wake) — and closing the service removes the model views, the published file and the router.
    assert engine.server is not None and engine.server.proc is not None and not engine.sleeps
    groups = [r.generator.server.proc.pid for r in service.replicas]
    tmp, sockets, views = engine._tmp, engine._sockets, [Path(v) for v in engine._views.values()]
    assert tmp is not None and tmp.is_dir() and tmp.is_relative_to(cache_dir())  # the engine's files stay there
    assert sockets is not None and oct(sockets.stat().st_mode & 0o777) == "0o700"  # this user's alone
    assert views and all(v.is_dir() and v.is_relative_to(cache_dir()) for v in views)  # the tied model's view
    assert load_config("tiny", overrides=["orchestration.generator_during_update=released"]).orchestration.takes_turns(
        "cpu"
    )
    with service._changed:
        service._holds.clear()  # the leases the tests above kept
    with service.turn():
        left = [subprocess.run(["pgrep", "-g", str(g)], capture_output=True, text=True).stdout.split() for g in groups]
        assert left == [[], []] and service.turns_taken[-2:] == ["stopped", "stopped"]
        assert not tmp.exists() and not sockets.exists()
    service.close()
    assert not any(v.exists() for v in views) and not service_file(RUN, STORE).exists()
    with pytest.raises(OSError):
        EngineClient(service.url, service.key).call("GET", "/state", timeout_s=5)
