"""How much a stage slows down when another process holds one of the machine's cores.

Runs the model stages of a small ``tiny`` generation (documents, design, validate, pool, hint and step 0's
plays: the real stages through the local runner, a fresh store each time) twice in child processes: on a
quiet machine, and with ``yes > /dev/null`` busy beside it. Prints each model stage's seconds (from its
marker) both ways and the busy / quiet ratio; the last line is
``design_ratio=A hint_ratio=B rollout_ratio=C``.

``--code DIR`` runs the children on another checkout of the project (e.g. a ``git worktree`` of an older
commit) with this venv, so before and after a change are measured by one script:

    git worktree add /tmp/before 304e656
    python benchmarks/contention.py --code /tmp/before     # torch's default: two spinning threads
    python benchmarks/contention.py                        # passive waits, threads from the idle CPUs

Measure on an otherwise quiet machine: the load average is printed beside each run.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# benchmarks/sandbox.py is named like the package the stages import: drop this directory from the path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

REPO = Path(__file__).resolve().parent.parent
MODEL_STAGES = ("design", "hint", "rollout-s0")
OVERRIDES = [
    "training.enabled=false",
    "training.steps_per_generation=1",
    "designer.max_new_tokens=192",
    "rollout.replay_envs=1",
    "memory.report_diversity=false",
]


def child(store_root: str) -> dict[str, float]:
    """Run the stages up to step 0's plays in this process; their seconds by stage name."""
    from spade_core.config import load_config
    from spade_core.llm.hf import TransformersGenerator
    from spade_core.pipeline.local import run_generation
    from spade_core.pipeline.registry import stages_for
    from spade_core.pipeline.stage import fixed_lease
    from spade_core.store.artifacts import Store
    from spade_core.store.markers import list_markers

    # The checkpoint's own preset (the cwd is its root): an older checkout may not know a newer preset's keys.
    preset = Path.cwd() / "data" / "configs" / "tiny.yaml"
    cfg = load_config(None, preset, [f"store.root={store_root}", *OVERRIDES])
    stages = stages_for(cfg, 1)
    stages = stages[: [s.name for s in stages].index("rollout-s0") + 1]
    generator = TransformersGenerator.from_config(cfg.model)
    started = time.perf_counter()
    store = Store(store_root)
    records = run_generation(cfg, store, "bench", 1, functools.partial(fixed_lease, generator), stages)
    seconds = {name: float(r.seconds) for name, r in records.items()}
    # A sharded stage's whole-stage marker records no work of its own: its shards' markers do.
    for record in list_markers(store, "bench")[1].values():
        if record.shard is not None and record.stage in seconds and not records[record.stage].seconds:
            seconds[record.stage] += float(record.seconds)
    seconds["total"] = round(time.perf_counter() - started, 1)
    import torch

    seconds["threads"] = torch.get_num_threads()  # what the model ran with (auto: the CPUs idle at its load)
    return seconds


def measure(code: Path, busy: bool) -> dict[str, float]:
    """One child run on ``code``'s checkout, with a busy-looping process beside it when ``busy``."""
    spinner = subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) if busy else None
    try:
        with tempfile.TemporaryDirectory(prefix="contention-") as root:
            env = {**os.environ, "PYTHONPATH": str(code)}
            out = subprocess.run(
                [sys.executable, str(Path(__file__).resolve()), "--child", root],
                cwd=code,
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            return dict(json.loads(out.stdout.strip().splitlines()[-1]))
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--code", type=Path, default=REPO, help="Checkout whose spade_core the stages run.")
    parser.add_argument("--child", metavar="STORE", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
        return 0
    results = {}
    for busy in (False, True):
        load = os.getloadavg()[0]
        results[busy] = measure(args.code.resolve(), busy)
        label = "busy (yes beside)" if busy else "quiet"
        shown = "  ".join(f"{name} {results[busy][name]:.1f}s" for name in (*MODEL_STAGES, "total"))
        threads = results[busy].get("threads", "?")
        print(f"{label:<18} load {load:4.2f}  threads {threads}  {shown}", flush=True)
    ratios = {name: results[True][name] / max(results[False][name], 1e-9) for name in MODEL_STAGES}
    print("  ".join(f"{name} x{ratio:.2f}" for name, ratio in ratios.items()))
    print(" ".join(f"{name.split('-')[0]}_ratio={ratio:.2f}" for name, ratio in ratios.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
