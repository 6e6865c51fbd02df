"""Self-play on this CPU: G generations of the real loop with the designer trained, and the same seeds with
``designer.train=false`` (the ablation), on the ``tiny`` preset.

Both runs go through the local runner (:func:`spade_core.pipeline.local.run_run`: the registry's stages in
the production order, the production model leases, asynchronous generations as in ``tiny``), into one
store, as the runs ``selfplay`` and ``selfplay-ablation``. Per generation and run it prints, from the store:

- design attempts (every attempt's verdict), valid designs (their final verdict), designs scored (a
  ``designer_rewards`` row not dropped), designer samples trained (``train_samples`` rows of the role: a
  sample is there only when a step kept it, so one with advantage 0 dropped by
  ``training.drop_zero_advantage`` is not counted);
- the mean raw designer reward of the scored designs (``designer_rewards.raw``: the blend in ``tiny``);
- the share of the pool whose step-0 win rate lies in the band [0.15, 0.85];
- the agent's no-hint win rate over the generation's plays;

and as the last line

    blend_first=A blend_last=B ablation_first=C ablation_last=D valid_rate=V minutes=M

(``n/a`` where no design was scored). ``spade report selfplay --baseline selfplay-ablation --store S``
then draws the two designer curves.

The two runs go side by side, each in its own process with one torch thread (``model.threads=1``, its
trainer too): on this CPU a generating batch keeps one core busy and leaves the other mostly idle, so two
one-thread runs take about the wall time of one two-thread run, under the same conditions for both arms
(``--serial`` runs them one after the other with the machine's threads). The pool and plays are cut from
``tiny`` so that both runs fit in an hour on two cores (``--set`` changes anything):

    .venv/bin/python benchmarks/selfplay.py [--generations 4] [--store DIR] [--serial] [--set key=value ...]
                                               [--keep-checkpoints]
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
import subprocess
import tempfile
import time
from typing import Any

from spade_core.config import SpadeConfig, load_config
from spade_core.pipeline.local import StageLog, run_run
from spade_core.store.artifacts import Store
from spade_core.store.catalog import query
from spade_core.store.markers import list_markers
from spade_core.store.verdicts import final_verdicts

RUNS = {"trained": "selfplay", "ablation": "selfplay-ablation"}
BAND = (0.15, 0.85)
# Cut from tiny so that 2 x G generations fit in an hour here: a smaller pool, shorter plays.
SMALLER = [
    "rollout.starter_envs=2",
    "rollout.replay_envs=1",
    "rollout.max_turns=3",
    "rollout.max_tokens_per_turn=32",
    "rollout.hint_max_words=24",
    # As learning.py: tiny's 1e-6 (the paper's) barely moves a 135M model in a few steps; a designer that
    # is to learn in G = 4 generations needs steps that change its replies.
    "training.learning_rate=5e-5",
]
T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{(time.perf_counter() - T0) / 60:5.1f} min] {message}", flush=True)


def config(root: str, trained: bool, extra: list[str]) -> SpadeConfig:
    return load_config("tiny", None, [f"store.root={root}", *SMALLER, f"designer.train={str(trained).lower()}", *extra])


def generation_row(cfg: SpadeConfig, store: Store, run_id: str, gen: int) -> dict[str, Any]:
    """One generation's designer and agent figures, read back from the store."""
    attempts = int(
        query(store, "select count(*) as n from validations where run_id = ? and gen = ?", [run_id, gen]).n[0]
    )
    verdicts = final_verdicts(store, run_id, gen)
    rewards = store.read_table("designer_rewards", run_id, gen, stages=["reward"])
    scored = rewards[~rewards["dropped"].astype(bool)] if not rewards.empty else rewards
    # Trained = kept in a step's batch: a designer sample whose centred reward is 0 is dropped with the
    # agent's zero-advantage samples (training.drop_zero_advantage), so the steps' summaries overcount.
    trained = query(
        store,
        "select count(*) as n from train_samples where run_id = ? and gen = ? and role = 'designer'",
        [run_id, gen],
    ).n[0]
    pool = store.read_table("pool", run_id, gen, stages=["pool"], columns=["env_id"])
    scores = store.read_table("env_scores", run_id, gen, stages=["score"], columns=["env_id", "win_rate"])
    played = scores[scores["env_id"].isin(set(pool["env_id"]))].drop_duplicates("env_id")["win_rate"].dropna()
    wins = query(
        store,
        "select avg((episode_return >= 1)::int) as w from episodes where run_id = ? and gen = ? "
        "and condition = 'no_hint'",
        [run_id, gen],
    ).w[0]
    return {
        "gen": gen,
        "attempts": attempts,
        "valid": int(verdicts["ok"].sum()) if not verdicts.empty else 0,
        "scored": len(scored),
        "designer_samples": int(trained),
        "blend": float(scored["raw"].mean()) if len(scored) else math.nan,
        "in_band": float(played.between(*BAND).mean()) if len(played) else math.nan,
        "win_rate": float(wins) if wins is not None else math.nan,
        "minutes": _stage_minutes(store, run_id, gen),
    }


def _stage_minutes(store: Store, run_id: str, gen: int) -> float:
    """The generation's stage seconds (its markers' own; a sharded stage's are its shards'), in minutes."""
    records = list(list_markers(store, run_id).get(gen, {}).values())
    sharded = {r.stage for r in records if r.shard is not None}
    return sum(r.seconds for r in records if r.shard is not None or r.stage not in sharded) / 60


def fmt(value: float, digits: int = 3) -> str:
    return "n/a" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| gen | attempts | valid | scored | designer samples trained | mean raw blend | pool in band "
        "| agent win rate | stage min |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['gen']} | {r['attempts']} | {r['valid']} | {r['scored']} | {r['designer_samples']} | "
            f"{fmt(r['blend'])} | {fmt(r['in_band'], 2)} | {fmt(r['win_rate'])} | {r['minutes']:.1f} |"
        )
    return "\n".join(lines)


def run_arm(root: str, arm: str, generations: int, extra: list[str]) -> None:
    """One arm's generations through the local runner, in this process."""
    cfg = config(root, arm == "trained", extra)
    run_id = RUNS[arm]
    started = time.perf_counter()
    log(f"{run_id}: designer.train={cfg.designer.train}, model.threads={cfg.model.threads}, config {cfg.config_hash()}")
    run_run(cfg, Store.from_config(cfg.store), run_id, list(range(1, generations + 1)), watch=StageLog(log))
    log(f"{run_id}: {(time.perf_counter() - started) / 60:.1f} min")


def arm_rows(root: str, arm: str, generations: int, extra: list[str]) -> list[dict[str, Any]]:
    cfg = config(root, arm == "trained", extra)
    store = Store.from_config(cfg.store)
    return [generation_row(cfg, store, RUNS[arm], g) for g in range(1, generations + 1)]


def drop_checkpoints(store: Store, run_id: str) -> None:
    """Delete run ``run_id``'s checkpoints (G = 6 left 35 GB of them on this machine's disk)."""
    path = os.path.dirname(store.checkpoint_dir(run_id, 1))  # checkpoints/run=RUN_ID/
    if store.exists(path):
        size = store.fs.du(path)
        store.remove_dir(path)
        log(f"{run_id}: deleted its checkpoints ({size / 1e9:.1f} GB; --keep-checkpoints keeps them)")


def side_by_side(root: str, arms: list[str], generations: int, extra: list[str], keep: bool) -> None:
    """Each arm in a child process of this script (``--only ARM``, one torch thread), logging to
    ``ROOT/ARM.log``; an arm that fails is an error naming its log."""
    os.makedirs(root, exist_ok=True)
    children = {}
    for arm in arms:
        path = os.path.join(root, f"{arm}.log")
        command = [sys.executable, os.path.abspath(__file__), "--only", arm, "--store", root]
        command += ["--generations", str(generations), "--serial", "--set", "model.threads=1"]
        command += [x for item in extra for x in ("--set", item)] + (["--keep-checkpoints"] if keep else [])
        with open(path, "w") as out:
            children[arm] = (subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT), path)
        log(f"{RUNS[arm]}: started (pid {children[arm][0].pid}, log {path})")
    for arm, (child, path) in children.items():
        if child.wait() != 0:
            raise SystemExit(f"error: the {arm} run exited with {child.returncode}; see {path}")
        log(f"{RUNS[arm]}: done")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--generations", "-g", type=int, default=4, help="G: generations per run (default 4).")
    parser.add_argument("--store", default=None, help="Store root (default: a new temporary directory, kept).")
    parser.add_argument("--only", choices=sorted(RUNS), default=None, help="Run only one of the two runs.")
    parser.add_argument(
        "--serial",
        action="store_true",
        help="Run the arms in this process, one after the other (default: side by side; --only runs here).",
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="Extra config override.")
    parser.add_argument(
        "--keep-checkpoints",
        action="store_true",
        help="Keep the runs' checkpoints (1.6 GB per step and run in tiny: weights and AdamW state); by default "
        "they are deleted once a run is read back (the tables and the report do not need them).",
    )
    args = parser.parse_args()
    if args.generations < 1:
        parser.error(f"--generations must be >= 1, got {args.generations}")
    root = args.store or tempfile.mkdtemp(prefix="spade-selfplay-")
    load = os.getloadavg()[0]
    log(f"store {root}; {args.generations} generations per run; load average {load:.2f}")
    arms = [arm for arm in RUNS if args.only in (None, arm)]
    if args.serial or len(arms) == 1:
        for arm in arms:
            run_arm(root, arm, args.generations, args.set)
    else:
        side_by_side(root, arms, args.generations, args.set, args.keep_checkpoints)
    results = {arm: arm_rows(root, arm, args.generations, args.set) for arm in arms}
    if not args.keep_checkpoints:
        for arm in arms:
            drop_checkpoints(Store(root), RUNS[arm])
    for arm in arms:
        print(f"\n{RUNS[arm]} (designer.train={arm == 'trained'}):\n{table(results[arm])}\n", flush=True)

    def ends(arm: str) -> tuple[str, str]:
        rows = results.get(arm, [])
        return (fmt(rows[0]["blend"]), fmt(rows[-1]["blend"])) if rows else ("n/a", "n/a")

    attempts = sum(r["attempts"] for rows in results.values() for r in rows)
    valid = sum(r["valid"] for rows in results.values() for r in rows)
    (bf, bl), (af, al) = ends("trained"), ends("ablation")
    log(f"report: spade report {RUNS['trained']} --baseline {RUNS['ablation']} --store {root}")
    print(
        f"blend_first={bf} blend_last={bl} ablation_first={af} ablation_last={al} "
        f"valid_rate={fmt(valid / attempts if attempts else math.nan)} minutes={(time.perf_counter() - T0) / 60:.1f} "
        f"load={load:.2f}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
