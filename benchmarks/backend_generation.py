"""A tiny generation end to end on each backend: ``spade run`` on the ``tiny`` preset, once with the
transformers backend and once with the vLLM engine, each in a fresh store, one after the other.

Printed: each stage's seconds side by side (from the stage markers), the wall time, and the peak RSS
summed over the run's whole process tree (the CLI, the trainer subprocess, the engine's processes and the
jails), sampled every 0.5 s. The stores (checkpoints included: 1.6 GB per step) are deleted afterwards.
The last line is machine-readable:

    vllm_s=A transformers_s=B ratio=B/A vllm_peak_gb=C transformers_peak_gb=D

    .venv/bin/python benchmarks/backend_generation.py [--set KEY=VALUE ...] [--vllm-set KEY=VALUE ...]
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


def run(backend: str, extra: list[str], workdir: Path) -> tuple[float, float, dict[str, float]]:
    """One generation on ``backend``: wall seconds, peak summed RSS (GB) and seconds per stage."""
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
    return wall, peak / 1e9, stages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--set", action="append", default=[], help="a config override for both runs")
    parser.add_argument("--vllm-set", action="append", default=[], help="a config override for the vLLM run only")
    parser.add_argument("--keep", action="store_true", help="keep the stores (checkpoints: 1.6 GB per step)")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="spade-backend-bench-"))
    print(f"stores and logs under {workdir}; load average {os.getloadavg()[0]:.2f}")
    results = {}
    try:
        for backend, extra in (("vllm", [*args.set, *args.vllm_set]), ("transformers", args.set)):
            results[backend] = run(backend, extra, workdir)
            wall, peak, _ = results[backend]
            print(f"{backend}: {wall / 60:.1f} min, peak RSS summed {peak:.2f} GB, load {os.getloadavg()[0]:.2f}")
    finally:
        if not args.keep:
            for backend in ("vllm", "transformers"):
                shutil.rmtree(workdir / backend, ignore_errors=True)
    names = sorted(set(results["vllm"][2]) | set(results["transformers"][2]), key=lambda n: n)
    print(f"{'stage':<22}{'vllm s':>10}{'transformers s':>16}")
    for name in names:
        v, t = results["vllm"][2].get(name), results["transformers"][2].get(name)
        print(f"{name:<22}{f'{v:.1f}' if v is not None else '-':>10}{f'{t:.1f}' if t is not None else '-':>16}")
    (v_wall, v_peak, _), (t_wall, t_peak, _) = results["vllm"], results["transformers"]
    print(
        f"vllm_s={v_wall:.0f} transformers_s={t_wall:.0f} ratio={t_wall / v_wall:.2f} "
        f"vllm_peak_gb={v_peak:.2f} transformers_peak_gb={t_peak:.2f}"
    )


if __name__ == "__main__":
    main()
