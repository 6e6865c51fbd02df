"""Does the embedded loop learn? The agent alone on the starter pool for N steps, on this CPU.

The run is the real pipeline (``spade_core.pipeline.local.run_generation``) on the ``tiny`` preset with
``designer.fixed_pool=starters`` (no designer: the pool is ``data/starter_envs/``) and one generation of
K = N steps (``training.steps_per_generation``): every step plays the pool afresh with the newest
checkpoint (``rollout.plays_no_hint`` plays per environment, each on a fresh seed from ``play_seed``),
then makes one GRPO optimizer step (``accelerate launch -m spade_core.train.step``) that writes the next
checkpoint. Only the learning settings differ from ``tiny``: a learning rate a 135M model moves at in a
few steps, a group of plays per environment large enough to carry a z-scored advantage, and no hinted
plays (nothing here needs regret). ``--set key=value`` changes anything else.

Before and after, the no-hint win rate is measured on the same evaluation seeds with the rollout engine
and the run's sampling (``model.temperature`` etc.): the base model, then the last checkpoint. Evaluation
seeds are 2**32 + i; ``play_seed`` draws training seeds below 2**32, so no evaluation seed is ever
trained on (the script also checks it against the stored episodes). The standard error of each win rate
and of the paired difference are printed, then the per-step win rate of the training plays (read from
the store with DuckDB), and as the last line:

    win_rate_before=A win_rate_after=B steps=N minutes=M

    .venv/bin/python benchmarks/learning.py [--steps 8] [--plays 8] [--lr 2e-5] [--eval-plays 32] [--lora]
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
import math
import re
import resource
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator

import pandas as pd

from spade_core.config import SpadeConfig, load_config
from spade_core.envs.seeds import SeedEnv, load_starter_envs
from spade_core.llm import make_generator
from spade_core.llm.base import Generator
from spade_core.pipeline.local import run_generation
from spade_core.play.rollout import EpisodeSpec, RolloutEngine
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import model_cfg_for_step, newest_checkpoint_at_or_below, read_marker

RUN = "learning"
EVAL_SEED_BASE = 2**32  # play_seed() draws from [0, 2**32): evaluation seeds never collide with training seeds
T0 = time.perf_counter()


def log(message: str) -> None:
    print(f"[{(time.perf_counter() - T0) / 60:5.1f} min] {message}", flush=True)


class NewestCheckpoint:
    """A generator lease that hands out the newest complete checkpoint of the run, loading it once.

    ``run_generation`` takes one lease for the whole generation; rollout step ``k`` runs after train step
    ``k - 1`` wrote checkpoint ``k``, so "the newest checkpoint" is exactly the one step ``k`` plays with.
    The model is closed when a newer checkpoint appears, so the trainer subprocess and at most one model
    share the memory.
    """

    def __init__(self, cfg: SpadeConfig, store: Store, run_id: str) -> None:
        self.cfg, self.store, self.run_id = cfg, store, run_id
        self.step = -1
        self.generator: Generator | None = None

    def load(self, step: int | None = None) -> Generator:
        step = newest_checkpoint_at_or_below(self.store, self.run_id, 10**6) if step is None else step
        if self.generator is None or step != self.step:
            self.close()
            self.generator = make_generator(model_cfg_for_step(self.cfg, self.store, self.run_id, step))
            self.step = step
        return self.generator

    @contextlib.contextmanager
    def __call__(self) -> Iterator[Generator]:
        yield self.load()

    def close(self) -> None:
        if self.generator is not None:
            self.generator.close()
            self.generator = None


class Progress(threading.Thread):
    """Logs each stage of the generation as its marker appears: a step's win rate after its plays, the
    update's loss and seconds after its training (``run_generation`` itself prints nothing)."""

    def __init__(self, store: Store) -> None:
        super().__init__(daemon=True)
        self.store = store
        self.seen: set[str] = set()
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(5.0):
            self.poll()

    def poll(self) -> None:
        stages = f"{self.store.run_dir(RUN)}/gen=1/stages"
        for path in sorted(self.store.fs.glob(f"{stages}/*.json")):
            name = path.rsplit("/", 1)[-1].removesuffix(".json")
            if name in self.seen or re.search(r"-s\d+-\d+$", name):  # shard markers: the whole stage's is enough
                continue
            self.seen.add(name)
            try:
                log(self.describe(name))
            except Exception as exc:  # progress output must never break the run
                log(f"{name} done ({type(exc).__name__}: {exc})")

    def describe(self, name: str) -> str:
        kind, _, step = name.partition("-s")
        if kind == "rollout":
            plays = self.store.read_table("episodes", RUN, 1, stages=[name], columns=["episode_return"])
            wins = float((plays["episode_return"] >= 1.0).mean())
            return f"step {step}: {len(plays)} plays, win rate {wins:.3f}"
        if kind == "train":
            summary = read_marker(self.store, RUN, int(step) + 1).get("summary", {})
            loss = summary.get("loss_mean")
            return (
                f"step {step}: update {summary.get('kind')} on {summary.get('agent_samples')} samples "
                f"({summary.get('zero_variance_groups')} groups without variance), loss "
                f"{'n/a' if loss is None else f'{loss:.4f}'}, {summary.get('seconds', 0):.0f} s"
            )
        return f"{name} done"


def config(args: argparse.Namespace, store_root: str) -> SpadeConfig:
    overrides = [
        f"store.root={store_root}",
        "designer.fixed_pool=starters",
        f"training.steps_per_generation={args.steps}",
        f"rollout.plays_no_hint={args.plays}",
        "rollout.plays_hint=0",
        f"training.learning_rate={args.lr}",
        f"training.per_device_batch_size={args.micro_batch}",
        f"training.lora={str(args.lora).lower()}",
        f"training.lora_r={args.lora_r}",
        # The agent's samples are short (<= 4 turns of 48 tokens): recomputing activations would cost a
        # fifth of the step's compute for memory this run does not need (the demo keeps it on for designs).
        "training.gradient_checkpointing=false",
        f"seed={args.seed}",
        *args.set,
    ]
    return load_config("tiny", None, overrides)


def evaluate(cfg: SpadeConfig, generator: Generator, envs: list[SeedEnv], plays: int) -> pd.DataFrame:
    """No-hint plays of every environment on the evaluation seeds (one row per play)."""
    specs = [EpisodeSpec(e.env_id, e.code, EVAL_SEED_BASE + i) for e in envs for i in range(plays)]
    rows = RolloutEngine.from_config(cfg, generator).run(specs)
    frame = pd.DataFrame([{k: r[k] for k in ("env_id", "seed", "episode_return", "error_type")} for r in rows])
    frame["win"] = (frame["episode_return"] >= 1.0).astype(float)
    return frame


def rate(frame: pd.DataFrame) -> tuple[float, float]:
    """Win rate and its standard error."""
    p, n = float(frame["win"].mean()), len(frame)
    return p, math.sqrt(p * (1 - p) / n) if n else math.nan


def per_env(frame: pd.DataFrame, names: dict[str, str]) -> str:
    wins = frame.groupby("env_id")["win"].mean()
    return ", ".join(f"{names.get(e, e)} {w:.2f}" for e, w in wins.items())


def training_curve(store: Store, steps: int) -> pd.DataFrame:
    """Win rate of the training plays per global step, from the stored episodes (DuckDB over the Parquet)."""
    import duckdb

    files = f"{store.base}/tables/episodes/run={RUN}/gen=1/rollout-s*.parquet"
    sql = f"""
        select policy_step as step, count(*) as plays, avg((episode_return >= 1)::int) as win_rate
        from read_parquet('{files}') where condition = 'no_hint' group by all order by step
    """
    return duckdb.connect().execute(sql).df()


def peak_rss_gb() -> tuple[float, float]:
    """Peak RSS of this process and of its largest finished child (the trainer), GB (Linux: ru_maxrss in KiB)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    child = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20
    return own, child


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="N: optimizer steps (one generation of K = N).")
    parser.add_argument("--plays", type=int, default=4, help="No-hint plays per environment per step (the group).")
    parser.add_argument("--lr", type=float, default=5e-5, help="AdamW learning rate (tiny.yaml: 1e-6).")
    parser.add_argument("--micro-batch", type=int, default=2, help="training.per_device_batch_size (tiny: 2).")
    parser.add_argument("--lora", action="store_true", help="Train a LoRA adapter instead of all weights.")
    parser.add_argument("--lora-r", type=int, default=16, help="LoRA rank (with --lora).")
    parser.add_argument("--eval-plays", type=int, default=32, help="Evaluation plays per env, before and after.")
    parser.add_argument("--threads", type=int, default=None, help="torch/OpenMP threads (default: all cores).")
    parser.add_argument("--seed", type=int, default=0, help="The run's seed (training seeds, sampling).")
    parser.add_argument("--store", default=None, help="Store root to keep the run in (default: a temporary one).")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="Extra config override.")
    args = parser.parse_args()

    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)  # the trainer subprocess inherits it
        import torch

        torch.set_num_threads(args.threads)
    root = args.store or tempfile.mkdtemp(prefix="spade-learning-")
    cfg = config(args, root)
    envs = load_starter_envs()  # the fixed pool 'starters' is all of them
    names = {e.env_id: e.path.stem for e in envs}
    store = Store.from_config(cfg.store)
    lease = NewestCheckpoint(cfg, store, RUN)
    t = cfg.training
    log(
        f"starter pool: {len(envs)} envs ({', '.join(e.path.stem for e in envs)}); {args.steps} steps x "
        f"{args.plays} plays/env; {'LoRA r=' + str(args.lora_r) if t.lora else 'full fine-tuning'}, "
        f"lr {t.learning_rate:g}, micro-batch {t.per_device_batch_size}, loss {t.loss_type}, "
        f"temperature {cfg.model.temperature}; eval {args.eval_plays} plays/env; store {root}"
    )
    try:
        before = evaluate(cfg, lease.load(0), envs, args.eval_plays)
        a, sa = rate(before)
        log(f"before (checkpoint 0): win rate {a:.3f} ± {sa:.3f} [{per_env(before, names)}]")

        progress = Progress(store)
        progress.start()
        run_generation(cfg, store, RUN, 1, lease)
        progress.done.set()
        progress.join()
        progress.poll()
        final = newest_checkpoint_at_or_below(store, RUN, args.steps)
        curve = training_curve(store, args.steps)

        after = evaluate(cfg, lease.load(final), envs, args.eval_plays)
        lease.close()
        b, sb = rate(after)
        log(f"after (checkpoint {final}): win rate {b:.3f} ± {sb:.3f} [{per_env(after, names)}]")

        trained = store.read_table("episodes", RUN, 1, columns=["seed"])
        overlap = set(trained["seed"]) & set(before["seed"])
        diff = after["win"].to_numpy() - before["win"].to_numpy()  # paired: same env, same seed
        se = float(diff.std(ddof=1) / math.sqrt(len(diff))) if len(diff) > 1 else math.nan
        log(f"difference {b - a:+.3f} ± {se:.3f} (paired standard error over {len(diff)} seeds)")
        log(f"evaluation seeds disjoint from the {len(trained)} training plays' seeds: {not overlap}")
        metrics = store.read_table("train_metrics", RUN, 1)
        print("per-step win rate of the training plays (no hint; step s plays checkpoint s):")
        print("| step | plays | win rate | loss |")
        print("|---|---|---|---|")
        loss = dict(zip(metrics["step"], metrics["loss"], strict=False)) if not metrics.empty else {}
        for row in curve.itertuples():
            lv = loss.get(row.step)
            print(f"| {row.step} | {row.plays} | {row.win_rate:.3f} | {'n/a' if lv is None else f'{lv:.4f}'} |")
        print(f"| {final} (eval) | {len(after)} | {b:.3f} | |")
        own, child = peak_rss_gb()
        log(f"peak RSS: this process {own:.2f} GB, largest trainer subprocess {child:.2f} GB")
    finally:
        lease.close()
        if args.store is None:
            shutil.rmtree(root, ignore_errors=True)
    minutes = (time.perf_counter() - T0) / 60
    print(f"win_rate_before={a:.3f} win_rate_after={b:.3f} steps={args.steps} minutes={minutes:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
