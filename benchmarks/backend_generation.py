"""A tiny generation end to end on each backend: ``spade run`` on the ``tiny`` preset, once with the
transformers backend and once with the vLLM engine, each in a fresh store, one after the other.

Printed: each stage's seconds side by side (from the stage markers), the wall time, the engine's starts
(``start`` and ``restart`` weight swaps in the markers: one per run when the engine is kept through the
updates), and the peak RSS summed over the run's whole process tree (the CLI, Prefect's server, the
trainer subprocess, the engine's processes and the jails), sampled every 0.5 s, in GB (1e9 bytes). The
stores (checkpoints included: 1.6 GB per step) are deleted afterwards. The last line is machine-readable:

    vllm_s=A transformers_s=B ratio=B/A vllm_peak_gb=C transformers_peak_gb=D vllm_engine_starts=E

``--vllm-only`` runs the vLLM generation alone (the ``tiny`` target: <= 240 s, one engine start, <= 8 GB):

    vllm_s=A vllm_peak_gb=C vllm_engine_starts=E

    .venv/bin/python benchmarks/backend_generation.py [--vllm-only] [--set KEY=VALUE ...] [--vllm-set KEY=VALUE ...]
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path so
# `import sandbox` finds the package when a script here is run by path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

import argparse
import contextlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from spade_core.store.artifacts import Store
from spade_core.store.markers import list_markers

SPADE = str(Path(sys.executable).parent / "spade")


def tree_rss(root: psutil.Process) -> int:
    """Resident bytes of ``root`` and every process below it."""
    total = 0
    for proc in [root, *root.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):  # a process that ended between the listing and the read
            total += proc.memory_info().rss
    return total


def run(backend: str, extra: list[str], workdir: Path) -> tuple[float, float, dict[str, float], int]:
    """One generation on ``backend``: wall seconds, peak summed RSS (GB), seconds per stage and engine starts."""
    store = workdir / backend
    command = [SPADE, "run", "--run-id", "bench", "--set", f"store.root={store}", "--set", f"model.backend={backend}"]
    command += [x for item in extra for x in ("--set", item)]
    log = workdir / f"{backend}.log"
    started, peak = time.perf_counter(), 0
    with open(log, "w") as out:
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        proc = psutil.Process(child.pid)
        while child.poll() is None:
            peak = max(peak, tree_rss(proc))
            time.sleep(0.5)
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(f"error: the {backend} run exited with {child.returncode}; see {log}")
    markers = list_markers(Store(str(store)), "bench").get(1, {})
    stages = {name: record.seconds for name, record in markers.items()}
    swaps = [s for r in markers.values() if r.shard is None for s in r.info.get("weight_swaps", [])]
    starts = sum(s.get("method") in ("start", "restart") for s in swaps)
    return wall, peak / 1e9, stages, starts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", default=[], help="a config override for both runs")
    parser.add_argument("--vllm-set", action="append", default=[], help="a config override for the vLLM run only")
    parser.add_argument("--keep", action="store_true", help="keep the stores (checkpoints: 1.6 GB per step)")
    parser.add_argument("--vllm-only", action="store_true", help="run the vLLM generation alone")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="spade-backend-bench-"))
    print(f"stores and logs under {workdir}; load average {os.getloadavg()[0]:.2f}")
    results = {}
    try:
        runs = [("vllm", [*args.set, *args.vllm_set]), ("transformers", args.set)][: 1 if args.vllm_only else 2]
        for backend, extra in runs:
            results[backend] = run(backend, extra, workdir)
            wall, peak, _, starts = results[backend]
            print(
                f"{backend}: {wall / 60:.1f} min, peak RSS summed {peak:.2f} GB, {starts} engine start(s), "
                f"load {os.getloadavg()[0]:.2f}"
            )
    finally:
        if not args.keep:
            for backend in ("vllm", "transformers"):
                shutil.rmtree(workdir / backend, ignore_errors=True)
    other = results.get("transformers", (0.0, 0.0, {}, 0))
    names = sorted(set(results["vllm"][2]) | set(other[2]))
    print(f"{'stage':<22}{'vllm s':>10}{'transformers s':>16}")
    for name in names:
        v, t = results["vllm"][2].get(name), other[2].get(name)
        print(f"{name:<22}{f'{v:.1f}' if v is not None else '-':>10}{f'{t:.1f}' if t is not None else '-':>16}")
    v_wall, v_peak, _, v_starts = results["vllm"]
    if args.vllm_only:
        print(f"vllm_s={v_wall:.0f} vllm_peak_gb={v_peak:.2f} vllm_engine_starts={v_starts}")
        return
    t_wall, t_peak = other[0], other[1]
    print(
        f"vllm_s={v_wall:.0f} transformers_s={t_wall:.0f} ratio={t_wall / v_wall:.2f} "
        f"vllm_peak_gb={v_peak:.2f} transformers_peak_gb={t_peak:.2f} vllm_engine_starts={v_starts}"
    )


if __name__ == "__main__":
    main()
