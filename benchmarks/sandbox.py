"""Sandbox benchmark: jail start + env load, step round trip, validations per second, and the same
step loop run in-process as the unjailed reference. Targets (docs/DESIGN.md §11): step p50 <= 2 ms,
start + load p50 <= 100 ms.

    .venv/bin/python benchmarks/sandbox.py [--starts 40] [--steps 2000] [--validations 24]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import types

# This file is named like the `sandbox` package it measures: drop the script's own directory from the
# import path so `import sandbox` finds the package, not this script.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

from sandbox.policy import RUNTIME_SRC, resolve_cgroups
from sandbox.session import EnvSession, run_parallel
from spade_core.config import ValidationConfig
from spade_core.envs.seeds import load_seed_envs
from spade_core.envs.validate import validate_code


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def ms(values: list[float]) -> str:
    return f"p50 {pct(values, 0.5) * 1000:7.3f} ms  p95 {pct(values, 0.95) * 1000:7.3f} ms  (n={len(values)})"


ACTIONS = ["\\boxed{123}", "\\boxed{abc}", "", "\\boxed{999}"]


def bench_start(code: str, n: int) -> list[float]:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        with EnvSession(code, max_turns=10_000) as session:
            result = session.open()
            times.append(time.perf_counter() - t0)
            if not result.ok:
                sys.exit(f"env failed to load: {result.message}")
    return times


def bench_steps(code: str, n: int) -> list[float]:
    times = []
    with EnvSession(code, max_turns=10_000) as session:
        session.open()
        session.reset(0)
        for i in range(n):
            t0 = time.perf_counter()
            result = session.step(ACTIONS[i % len(ACTIONS)])
            times.append(time.perf_counter() - t0)
            if result.data.get("terminated") or result.data.get("truncated"):
                session.reset(i)
    return times


def bench_in_process(code: str, n: int) -> list[float]:
    """The unjailed reference: the same trusted fixture env called directly (never done with generated code)."""
    sys.path.insert(0, str(RUNTIME_SRC))
    module = types.ModuleType("bench_env")
    exec(compile(code, "bench_env", "exec"), module.__dict__)
    cls = next(
        v
        for v in module.__dict__.values()
        if isinstance(v, type) and hasattr(v, "step") and v.__module__ == "bench_env"
    )
    env = cls(max_turns=10_000)
    env.reset(seed=0)
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        out = env.step(ACTIONS[i % len(ACTIONS)])
        times.append(time.perf_counter() - t0)
        if out[2] or out[3]:
            env.reset(seed=i)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--starts", type=int, default=40)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--validations", type=int, default=24)
    args = parser.parse_args()
    seeds = load_seed_envs()
    game = next(e for e in seeds if e.skill == "spatial_reasoning")
    print(f"cgroups: {'on' if resolve_cgroups() else 'off (rlimits only)'}; env: {game.path.name}")

    bench_start(game.code, 3)  # warm the page cache and the config files
    starts = bench_start(game.code, args.starts)
    print(f"jail start + env load   {ms(starts)}   target p50 <= 100 ms: {pct(starts, 0.5) / 0.100:.2f}x of budget")
    steps = bench_steps(game.code, args.steps)
    print(f"step round trip (jail)  {ms(steps)}   target p50 <= 2 ms: {pct(steps, 0.5) / 0.002:.2f}x of budget")
    local = bench_in_process(game.code, args.steps)
    print(
        f"step in-process (ref)   {ms(local)}   jail overhead per step: "
        f"{(pct(steps, 0.5) - pct(local, 0.5)) * 1000:.2f} ms at p50"
    )

    cfg = ValidationConfig()
    codes = [seeds[i % len(seeds)].code for i in range(args.validations)]
    rates = {}
    for workers in (1, 2):
        t0 = time.perf_counter()
        results = run_parallel(lambda c: validate_code(c, cfg), codes, workers)
        seconds = time.perf_counter() - t0
        rates[workers] = len(codes) / seconds
        bad = [r.message for r in results if not r.ok]
        print(
            f"validations, {workers} jail(s)  {rates[workers]:6.1f} /s  ({len(codes)} full validations "
            f"of the seed envs in {seconds:.2f} s{'; FAILED: ' + str(bad[:1]) if bad else ''})"
        )
    print(f"parallel speed-up (2 vs 1 jails): {rates[2] / rates[1]:.2f}x on {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
