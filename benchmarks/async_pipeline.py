"""Asynchronous generations, measured: the same short run synchronously and asynchronously.

Runs ``spade run --generations N`` (the real Prefect flow, in a subprocess with its own temporary Prefect
server and a fresh store) twice on the ``tiny`` preset with K = 2: once with
``orchestration.async_generations=false``, once with ``true`` (generation g+1's design chain starts when
generation g's memory is written and runs beside g's training steps). From each run's stage markers
(``spade_core.report.timeline``) it prints the stage timeline's totals and, as its last line,

    overlap=X wall_ratio=Y max_staleness_seen=Z

overlap: the fraction of the async run's training-step wall time during which the next generation's design
chain was running (over the generations that have a next one: the last has no chain to overlap with);
wall_ratio: async / sync wall time; max_staleness_seen: the largest number of steps between the checkpoint
a generation's designs (repairs included) and hints came from and the generation's first step. It also
gives, from the sync run's stage times, the wall time the overlap would save where generation and training
have devices of their own (``saved_seconds_with_own_devices``): on this 2-core CPU both modes share the
cores, so the async run can only gain what the cores left idle.

    .venv/bin/python benchmarks/async_pipeline.py [--generations 3] [--set key=value ...] [--keep DIR [--reuse]]
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path so
# `import sandbox` finds the package when a script here is run by path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

import argparse
import resource
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from spade_core.report.timeline import overlap_fraction, saved_seconds_with_own_devices, stage_timeline
from spade_core.store.artifacts import Store
from spade_core.store.catalog import query
from spade_core.store.markers import list_markers

REPO = Path(__file__).resolve().parent.parent
RUN = "bench"


def run_mode(mode: str, generations: int, extra: list[str], work: Path, reuse: bool) -> tuple[float, Store]:
    """One ``spade run`` in a fresh store; returns its wall seconds and the store. ``reuse``: a kept run of
    this mode (its store and ``wall_s``) is analysed again instead."""
    root = work / mode / "store"
    wall_file = work / mode / "wall_s"
    if reuse and wall_file.is_file():
        wall = float(wall_file.read_text())
        print(f"[{mode}] the kept run in {work / mode}: {wall / 60:.1f} min", flush=True)
        return wall, Store(str(root))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(work / mode / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180",
        PYTHONUNBUFFERED="1",
    )
    overrides = [f"orchestration.async_generations={'true' if mode == 'async' else 'false'}", *extra]
    cmd = [sys.executable, "-m", "spade_core.cli", "run", "--run-id", RUN, "--store", str(root)]
    cmd += ["--generations", str(generations), *[a for o in overrides for a in ("--set", o)]]
    print(f"[{mode}] {' '.join(cmd[2:])}", flush=True)
    started = time.perf_counter()
    log = work / f"{mode}.log"
    work.mkdir(parents=True, exist_ok=True)
    with open(log, "wb") as out:
        code = subprocess.call(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"[{mode}] spade run failed (exit {code}); last lines:\n{log.read_text()[-3000:]}")
    print(f"[{mode}] {wall / 60:.1f} min", flush=True)
    wall_file.write_text(f"{wall:.1f}")
    return wall, Store(str(root))


def staleness(store: Store, steps: int) -> int:
    """The largest (generation's first step − policy_step) over its designs (repairs included) and hints."""
    worst = 0
    for table in ("designs", "hints"):
        frame = query(
            store,
            f"select max((gen - 1) * {steps} - policy_step) as s from {table} where run_id = ? and policy_step >= 0",
            [RUN],
        )
        value = frame["s"].iloc[0]
        if value is not None and value == value:  # not NaN (an empty table)
            worst = max(worst, int(value))
    return worst


def describe(mode: str, store: Store) -> None:
    timeline = stage_timeline(list_markers(store, RUN))
    by_kind = timeline.groupby("kind")["seconds"].sum().round(1).to_dict()
    print(f"[{mode}] stage seconds by kind: {by_kind}", flush=True)
    for gen, rows in timeline.groupby("gen"):
        spans = ", ".join(f"{r.stage} {r.start:.0f}-{r.end:.0f}s" for r in rows.itertuples())
        print(f"[{mode}] gen {gen}: {spans}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", type=int, default=3, help="Generations per run [3].")
    parser.add_argument("--steps", type=int, default=2, help="K, training.steps_per_generation [2].")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="Extra config override.")
    parser.add_argument("--keep", default=None, help="Keep both runs' stores and logs under this directory.")
    parser.add_argument(
        "--reuse", action="store_true", help="With --keep: analyse a mode's kept run again instead of rerunning it."
    )
    args = parser.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="spade-async-"))
    extra = [f"training.steps_per_generation={args.steps}", *args.set]
    try:
        sync_wall, sync_store = run_mode("sync", args.generations, extra, work, args.reuse)
        describe("sync", sync_store)
        async_wall, async_store = run_mode("async", args.generations, extra, work, args.reuse)
        describe("async", async_store)
        sync_timeline = stage_timeline(list_markers(sync_store, RUN))
        async_timeline = stage_timeline(list_markers(async_store, RUN))
        overlap = overlap_fraction(async_timeline, with_next_only=True)  # the last generation has no next chain
        overall = overlap_fraction(async_timeline)
        saved = saved_seconds_with_own_devices(sync_timeline)
        seen = staleness(async_store, args.steps)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
        print(
            f"sync {sync_wall:.0f} s, async {async_wall:.0f} s; the next design chain ran during {overlap:.0%} of "
            f"the training time of the generations that have a next one ({overall:.0%} of all training time)"
        )
        if peak > 0:
            print(f"largest process peak RSS {peak:.2f} GB")
        print(
            f"with generation and training on devices of their own, the overlap would save {saved:.0f} s of the "
            f"sync run's {sync_wall:.0f} s ({saved / sync_wall:.0%})"
        )
        print(f"overlap={overlap:.2f} wall_ratio={async_wall / sync_wall:.2f} max_staleness_seen={seen}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
