"""Rollout throughput: the engine against pure batched generation and one-episode-at-a-time, with the same
model and token budget. Targets (docs/DESIGN.md §11): >= 0.8x generation and >= 4x sequential, in generated
tokens per second. (b) and (a) keep each episode's KV cache between turns (``rollout.reuse_kv_cache``)
unless ``--no-reuse``; (c), the baseline, never does. Also printed: the tokens prefilled per turn with and
without reuse, the most KV-cache tokens kept at once, and the process's peak RSS (run once with and once
without ``--no-reuse`` to compare). The last line is machine-readable:

    ratio_vs_generation=<b/a> ratio_vs_sequential=<b/c>

With ``--backend vllm`` it instead plays the same episodes through the rollout engine on both backends —
the vLLM engine (its server streamed to, ``--vllm-dtype``) and the transformers backend as ``tiny`` runs it —
and then sends the engine alone every request the plays made, as many in flight at once as there were
episodes, its prefix cache reset first (the engine's own throughput at the plays' concurrency: the
target is plays >= 0.8 of it). It ends with

    vllm_tokens_per_s=A transformers_tokens_per_s=B ratio=A/B engine_alone_tokens_per_s=C plays_vs_engine=A/C

With ``--backend vllm --replicas N`` it plays them through the run's engine service (what a run leases) with
one replica and then with N (on this CPU one core each), side by side with the load average, and ends with

    one_replica_tokens_per_s=A n_replicas_tokens_per_s=B ratio=B/A served=<requests per replica>

    .venv/bin/python benchmarks/rollout_throughput.py [--episodes 16] [--turns 3] [--tokens 32] [--no-reuse]
    .venv/bin/python benchmarks/rollout_throughput.py --backend vllm [--episodes 32] [--tokens 128]
    .venv/bin/python benchmarks/rollout_throughput.py --backend vllm --replicas 2 [--episodes 32]
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path so
# `import sandbox` finds the package when a script here is run by path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

import argparse
import os
import resource
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from spade_core.config import RolloutConfig, load_config
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import Completion, GenerationRequest, Generator, SamplingParams
from spade_core.llm.hf import TransformersGenerator
from spade_core.play.rollout import EpisodeSpec, RolloutEngine


class Recorder:
    """Passes generate calls through and keeps each batch, to replay them as pure generation."""

    def __init__(self, inner: TransformersGenerator) -> None:
        self.inner = inner
        self.model_ref = inner.model_ref
        self.supports_token_prompts = inner.supports_token_prompts
        self.tokenizer = inner.tokenizer
        self.batches: list[tuple[list[GenerationRequest], SamplingParams]] = []
        self.completions: list[list[Completion]] = []
        self.seconds: list[float] = []
        self.peak_kept_tokens = 0

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        self.batches.append((requests, params))
        t0 = time.perf_counter()
        self.completions.append(self.inner.generate(requests, params))
        self.seconds.append(round(time.perf_counter() - t0, 1))
        self.peak_kept_tokens = max(self.peak_kept_tokens, self.inner.kept_tokens)
        return self.completions[-1]

    def release(self, keys: Iterable[str]) -> None:
        self.inner.release(keys)

    def close(self) -> None:
        pass

    def prefilled_per_turn(self) -> tuple[list[int], list[int]]:
        """Per generate call: the prompt tokens actually prefilled, and those a full prefill would take."""
        fed = [sum(c.prompt_tokens - c.cached_tokens for c in call) for call in self.completions]
        return fed, [sum(c.prompt_tokens for c in call) for call in self.completions]


class CallLog:
    """Passes a streaming generator's calls through and keeps those of the timed rollout (after its warm-up),
    to send them again to the engine alone."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.model_ref, self.streams = inner.model_ref, True
        self.supports_token_prompts, self.tokenizer = inner.supports_token_prompts, inner.tokenizer
        self.calls: list[tuple[list[GenerationRequest], SamplingParams]] = []
        self._lock = threading.Lock()

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        with self._lock:
            self.calls.append((requests, params))
        return self.inner.generate(requests, params)

    def release(self, keys: Iterable[str]) -> None:
        getattr(self.inner, "release", lambda _: None)(keys)

    def close(self) -> None:
        pass

    def replay(self, in_flight: int) -> tuple[int, float]:
        """Generated tokens and seconds of every logged call sent again, ``in_flight`` at once, after the
        engine's prefix cache is reset (so the replay prefills what the plays prefilled)."""
        self.inner._post("/reset_prefix_cache", None, 60.0)
        t0 = time.perf_counter()
        with ThreadPoolExecutor(in_flight) as pool:
            done = list(pool.map(lambda call: self.inner.generate(*call), self.calls))
        return sum(len(c.token_ids) for out in done for c in out), time.perf_counter() - t0


def kv_bytes_per_token(generator: TransformersGenerator) -> int:
    """Keys and values of one token over every layer."""
    cfg = generator.model.config
    heads = getattr(cfg, "num_key_value_heads", None) or cfg.num_attention_heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return int(2 * cfg.num_hidden_layers * heads * head_dim * generator.model.dtype.itemsize)


def timed_rollout(generator: Generator, specs: list[EpisodeSpec], rollout_cfg: RolloutConfig) -> tuple[int, float]:
    """Generated tokens and seconds of one rollout of ``specs`` (after a two-episode warm-up)."""
    cfg = load_config("tiny")
    sampling = SamplingParams(temperature=cfg.model.temperature, seed=0)
    engine = RolloutEngine(generator, rollout_cfg, sampling, jail_workers=cfg.validation.parallel_jails)
    engine.run(specs[:2])
    engine.stats.generated_tokens = 0
    if isinstance(generator, CallLog):
        generator.calls.clear()  # the warm-up's calls are not replayed
    t0 = time.perf_counter()
    engine.run(specs)
    return engine.stats.generated_tokens, time.perf_counter() - t0


def compare_backends(args: argparse.Namespace, specs: list[EpisodeSpec], rollout_cfg: RolloutConfig) -> None:
    """The same episodes on the vLLM engine and on the transformers backend, one after the other."""
    from spade_core.llm.vllm_server import VLLMGenerator

    cfg = load_config("tiny")
    engine_cfg = cfg.model.model_copy(
        update={"backend": "vllm", "dtype": args.vllm_dtype, "engine_dtype": args.vllm_dtype, "device": "cpu"}
    )
    t0 = time.perf_counter()
    vllm = VLLMGenerator(engine_cfg)
    print(f"vLLM engine ({args.vllm_dtype}) healthy after {time.perf_counter() - t0:.0f} s")
    calls = CallLog(vllm)
    try:
        v_tokens, v_seconds = timed_rollout(calls, specs, rollout_cfg)
        a_tokens, a_seconds = calls.replay(len(specs))
    finally:
        vllm.close()
    print(f"vllm:         {v_tokens:6d} tokens in {v_seconds:6.1f} s = {v_tokens / v_seconds:7.1f} tok/s")
    print(
        f"engine alone: {a_tokens:6d} tokens in {a_seconds:6.1f} s = {a_tokens / a_seconds:7.1f} tok/s "
        f"({len(calls.calls)} requests, {len(specs)} in flight)"
    )
    hf = TransformersGenerator(cfg.model.name_or_path, device="cpu", dtype=cfg.model.dtype, batch_size=args.episodes)
    t_tokens, t_seconds = timed_rollout(hf, specs, rollout_cfg)
    print(f"transformers: {t_tokens:6d} tokens in {t_seconds:6.1f} s = {t_tokens / t_seconds:7.1f} tok/s")
    print(f"load average now: {os.getloadavg()[0]:.2f}")
    v, t, a = v_tokens / v_seconds, t_tokens / t_seconds, a_tokens / a_seconds
    print(
        f"vllm_tokens_per_s={v:.1f} transformers_tokens_per_s={t:.1f} ratio={v / t:.2f} "
        f"engine_alone_tokens_per_s={a:.1f} plays_vs_engine={v / a:.2f}"
    )


def compare_replicas(args: argparse.Namespace, specs: list[EpisodeSpec], rollout_cfg: RolloutConfig) -> None:
    """The same episodes through the engine service with one replica, then with ``args.replicas``."""
    from spade_core.llm.embedded import resolve_model
    from spade_core.llm.engine_service import EngineService

    cfg = load_config("tiny")
    engine_cfg = cfg.model.model_copy(
        update={"backend": "vllm", "dtype": args.vllm_dtype, "engine_dtype": args.vllm_dtype, "device": "cpu"}
    )
    rates, served = [], []
    for count in (1, args.replicas):
        service = EngineService(engine_cfg, replicas=count)
        try:
            t0 = time.perf_counter()
            with service.leased(resolve_model(cfg.model.name_or_path)) as engine:
                print(f"{count} replica(s) ({args.vllm_dtype}) healthy after {time.perf_counter() - t0:.0f} s")
                load = os.getloadavg()[0]
                tokens, seconds = timed_rollout(engine, specs, rollout_cfg)
                served = [r.served for r in service.replicas]
        finally:
            service.close()
        rates.append(tokens / seconds)
        print(f"{count} replica(s): {tokens:6d} tokens in {seconds:6.1f} s = {rates[-1]:7.1f} tok/s (load {load:.2f})")
    print(f"one_replica_tokens_per_s={rates[0]:.1f} n_replicas_tokens_per_s={rates[1]:.1f} "
          f"ratio={rates[1] / rates[0]:.2f} served={'/'.join(map(str, served))}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=16, help="episodes played at once (the batch)")
    parser.add_argument("--turns", type=int, default=3, help="max turns per episode")
    parser.add_argument("--tokens", type=int, default=32, help="max new tokens per turn")
    parser.add_argument("--sequential", type=int, default=4, help="episodes played one at a time for (c)")
    parser.add_argument("--no-reuse", action="store_true", help="(b) and (a) re-prefill every turn, as (c)")
    parser.add_argument(
        "--backend", choices=("transformers", "vllm"), default="transformers", help="vllm: compare both backends"
    )
    parser.add_argument("--vllm-dtype", default="bfloat16", help="the engine's dtype with --backend vllm")
    parser.add_argument("--replicas", type=int, default=None, help="with --backend vllm: 1 against N replicas")
    args = parser.parse_args()
    if args.backend == "vllm":
        games = [e for e in load_seed_envs() if e.kind == "game"]
        specs = [EpisodeSpec(games[i % len(games)].env_id, games[i % len(games)].code, i) for i in range(args.episodes)]
        cfg = RolloutConfig(max_turns=args.turns, max_tokens_per_turn=args.tokens, max_context_tokens=4096)
        if args.replicas is not None:
            compare_replicas(args, specs, cfg)
        else:
            compare_backends(args, specs, cfg)
        return

    cfg = load_config("tiny")
    generator = TransformersGenerator(
        cfg.model.name_or_path, device=cfg.model.device, dtype=cfg.model.dtype, batch_size=args.episodes
    )
    games = [e for e in load_seed_envs() if e.kind == "game"]
    specs = [
        EpisodeSpec(games[i % len(games)].env_id, games[i % len(games)].code, seed=i) for i in range(args.episodes)
    ]
    rollout_cfg = RolloutConfig(
        max_turns=args.turns, max_tokens_per_turn=args.tokens, max_context_tokens=4096, reuse_kv_cache=not args.no_reuse
    )
    sampling = SamplingParams(temperature=cfg.model.temperature, seed=0)
    engine = RolloutEngine(generator, rollout_cfg, sampling, jail_workers=cfg.validation.parallel_jails)
    print(
        f"model {generator.model_ref} on {generator.device}, torch threads {os.cpu_count()} cores; "
        f"{args.episodes} game episodes x <= {args.turns} turns x <= {args.tokens} tokens; "
        f"KV-cache reuse {'off' if args.no_reuse else 'on'} for (b) and (a)"
    )

    engine.run(specs[:2])  # warm-up: first calls allocate
    recorder = Recorder(generator)
    engine.generator = recorder
    engine.stats.generated_tokens = 0
    t0 = time.perf_counter()
    engine.run(specs)
    b_seconds = time.perf_counter() - t0
    b_tokens = engine.stats.generated_tokens
    b = b_tokens / b_seconds
    engine.generator = generator
    print(
        f"(b) rollout engine, batched:        {b_tokens:6d} tokens in {b_seconds:6.1f} s = {b:7.1f} tok/s "
        f"({len(recorder.batches)} generate calls)"
    )
    fed, whole = recorder.prefilled_per_turn()
    print(f"    prefilled tokens per turn: {fed} with reuse {'off' if args.no_reuse else 'on'}; {whole} without")
    print(f"    seconds per turn (generate call): {recorder.seconds}")
    print(
        f"    KV cache kept between turns: peak {recorder.peak_kept_tokens} tokens "
        f"= {recorder.peak_kept_tokens * kv_bytes_per_token(generator) / 2**20:.0f} MiB"
    )

    # (a) pure batched generation of the same work: the exact batches of prompts the engine sent, replayed
    # without environments, jails or bookkeeping.
    a_tokens, t0 = 0, time.perf_counter()
    for batch, params in recorder.batches:
        a_tokens += sum(len(c.token_ids) for c in generator.generate(batch, params))
    a = a_tokens / (time.perf_counter() - t0)
    generator.release(r.cache_slot.key for batch, _ in recorder.batches for r in batch if r.cache_slot is not None)
    print(f"(a) pure batched generation:        {a_tokens:6d} tokens in {a_tokens / a:6.1f} s = {a:7.1f} tok/s")

    engine.stats.generated_tokens = 0
    engine.cfg = rollout_cfg.model_copy(update={"reuse_kv_cache": False})  # (c) as it always was
    t0 = time.perf_counter()
    for spec in specs[: args.sequential]:
        engine.run([spec])
    c_tokens = engine.stats.generated_tokens
    c = c_tokens / (time.perf_counter() - t0)
    print(
        f"(c) one episode at a time ({args.sequential} eps): {c_tokens:6d} tokens in {c_tokens / c:6.1f} s "
        f"= {c:7.1f} tok/s"
    )
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    print(f"peak RSS of this process: {peak_rss:.2f} GiB")
    print(f"ratio_vs_generation={b / a:.2f} ratio_vs_sequential={b / c:.2f}")


if __name__ == "__main__":
    main()
