"""SPADE beside the paper's fixed-RLVE baseline, on ``tiny``, for the same wall-clock budget per arm.

Two runs in one fresh store, from the same base model and seed, each by the real pipeline
(``spade_core.pipeline.local.run_run``, the production model leases, jails and trainer):

- ``spade``: the ``tiny`` preset as it is (designer, hints, regret, K = ``training.steps_per_generation``);
- ``rlve``: ``tiny`` with ``designer.fixed_pool=rlve:...`` (RLVE environments at the difficulty of their
  sliding-window controller, ``spade_core/envs/rlve_pool.py``), no hinted plays, K = 1 as the authors'
  ``--spade-game-regeneration-interval 1``.

The SPADE arm starts generations until ``--minutes`` have passed since it began; a started generation
finishes, so it may overrun by up to one generation (on ``tiny``, minutes to tens of minutes). The RLVE arm
then gets the minutes the SPADE arm actually took (at least ``--minutes``), so both arms have the same
wall-clock budget M, whatever the overrun. Both arms then get the same held-out suites (the same items) at
the same training step N, the last step both reached: every step writes a checkpoint, so checkpoint N
exists in each run (step 0 is the shared base model). Where N ends a generation in both runs (a multiple
of both Ks), the scores are also written to the store's ``evals`` table at that generation (SPADE's base
model at generation 0), so ``spade report spade --baseline rlve --store DIR`` puts them side by side,
aligned by step. ``--evaluate-only --keep DIR`` evaluates a kept store again (other suites, more items).
The last line:

    spade_eval=A baseline_eval=B steps=N minutes=M

(A, B: the mean over suites of the mean score at step N; M: the budget each arm had, in minutes.) At 135M
on a CPU this is a check that both arms run and are compared on equal terms, not the paper's result.

    .venv/bin/python benchmarks/baseline.py [--minutes 5] [--rlve rlve:Sorting,Multiplication,Division]
        [--suites reasoning_gym] [--limit 5] [--set key=value ...] [--keep DIR [--evaluate-only]]
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path so
# `import sandbox` finds the package when a script here is run by path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

import argparse
import math
import shutil
import tempfile
import time

import pandas as pd

from spade_core.config import SpadeConfig, load_config
from spade_core.envs.rlve import resolve
from spade_core.eval import evaluate
from spade_core.llm import make_generator
from spade_core.pipeline.local import run_run
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import model_path_for_checkpoint, newest_checkpoint_at_or_below

T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{(time.perf_counter() - T0) / 60:5.1f} min] {message}", flush=True)


def configs(args: argparse.Namespace, root: str) -> dict[str, SpadeConfig]:
    """The two arms' configs: ``tiny``, the shared settings, then each arm's own."""
    shared = [f"store.root={root}", f"seed={args.seed}", f"training.lora={str(args.lora).lower()}", *args.set]
    rlve = [f"designer.fixed_pool={args.rlve}", "rollout.plays_hint=0", "training.steps_per_generation=1"]
    return {"spade": load_config("tiny", None, shared), "rlve": load_config("tiny", None, [*shared, *rlve])}


def run_arm(cfg: SpadeConfig, store: Store, run_id: str, minutes: float) -> tuple[int, float]:
    """Generations of ``run_id`` until ``minutes`` have passed; (generations completed, minutes spent)."""
    start, gen = time.perf_counter(), 0
    while (time.perf_counter() - start) / 60 < minutes:
        gen += 1
        run_run(cfg, store, run_id, [gen])
        log(f"{run_id}: generation {gen} done (step {gen * cfg.training.steps_per_generation})")
    return gen, (time.perf_counter() - start) / 60


def evaluate_step(
    cfg: SpadeConfig, store: Store, run_id: str, step: int, suites: list[str], limit: int
) -> pd.DataFrame:
    """Checkpoint ``step`` of ``run_id`` (0: the base model) on ``suites``; written to ``evals`` at generation
    ``step / K`` when the step ends a generation (what ``spade report`` compares)."""
    path = model_path_for_checkpoint(cfg, store, run_id, step)
    generator = make_generator(cfg.model.model_copy(update={"name_or_path": str(path)}))
    try:
        frame = evaluate(generator, suites, limit, cfg.evaluation.seed, f"{run_id}/step-{step}")
    finally:
        generator.close()
    k = cfg.training.steps_per_generation
    if step % k == 0:
        for suite in suites:
            rows = frame[frame["suite"] == suite].reset_index(drop=True)
            store.write_table("evals", rows, run_id=run_id, gen=step // k, stage=f"eval-{suite}", shard=0)
    return frame


def score(frame: pd.DataFrame) -> float:
    """Mean over suites of the suite's mean score."""
    return float(frame.groupby("suite")["score"].mean().mean()) if not frame.empty else math.nan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="Wall-clock budget per arm [5].")
    parser.add_argument("--rlve", default="rlve:Sorting,Multiplication,Division", help="The baseline's pool.")
    parser.add_argument("--suites", default="reasoning_gym", help="Held-out suites, comma-separated.")
    parser.add_argument("--limit", type=int, default=5, help="Items per suite [5].")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lora", action=argparse.BooleanOptionalAction, default=True, help="LoRA in both arms.")
    parser.add_argument("--set", action="append", default=[], help="key=value for both arms (repeatable).")
    parser.add_argument("--keep", default=None, help="Store directory to keep (default: a temporary one).")
    parser.add_argument("--evaluate-only", action="store_true", help="Evaluate the runs of --keep DIR again.")
    parser.add_argument(
        "--arms", default="spade,rlve", help="Arms to run [spade,rlve]; with --keep, the others' runs are reused."
    )
    args = parser.parse_args()
    if args.evaluate_only and not args.keep:
        parser.error("--evaluate-only needs --keep DIR (the store whose runs to evaluate)")
    resolve(args.rlve)  # an unknown RLVE name stops here, before either arm runs
    root = args.keep or tempfile.mkdtemp(prefix="spade-baseline-")
    store = Store(root)
    try:
        cfgs = configs(args, root)
        budget = args.minutes
        arms = [] if args.evaluate_only else [a.strip() for a in args.arms.split(",") if a.strip()]
        for arm in arms:
            cfg = cfgs[arm]
            log(f"{arm}: up to {budget:.1f} min")
            gens, spent = run_arm(cfg, store, arm, budget)
            log(f"{arm}: {gens} generations, {gens * cfg.training.steps_per_generation} steps, {spent:.1f} min")
            budget = max(budget, spent)  # the next arm gets what this one took
        reached = {arm: newest_checkpoint_at_or_below(store, arm, 10**6) for arm in cfgs}
        step = min(reached.values())
        log(f"steps reached: {reached}; both evaluated at step {step}")
        suites = [s.strip() for s in args.suites.split(",") if s.strip()]
        scores = {}
        for arm, cfg in cfgs.items():
            if arm == "spade" and step > 0:  # the shared base model, for the report's "vs base model" column
                log(f"base model: {score(evaluate_step(cfg, store, arm, 0, suites, args.limit)):.3f}")
            frame = evaluate_step(cfg, store, arm, step, suites, args.limit)
            scores[arm] = score(frame)
            per_suite = frame.groupby("suite")["score"].mean().round(3).to_dict()
            log(f"{arm} at step {step}: {per_suite}")
        log(f"report: spade report spade --baseline rlve --store {root}" if args.keep else "store removed")
        print(f"spade_eval={scores['spade']:.3f} baseline_eval={scores['rlve']:.3f} steps={step} minutes={budget:.1f}")
        return 0
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
