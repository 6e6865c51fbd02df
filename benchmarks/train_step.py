"""GRPO step cost on the tiny preset: seconds per optimizer step, peak RSS and trained tokens per second,
for full fine-tuning and LoRA, each run exactly as the pipeline runs it (``accelerate launch`` subprocess).

The batch is real: no-hint episodes that the tiny model plays on seed environments through the rollout
engine, stored in a temporary store. Their rewards are then set to 0/1 alternately within each group, so
every group carries a learning signal: this times the update, not the policy. The last line is
machine-readable:

    full_s_per_step=<s> full_peak_rss_gb=<g> full_tokens_per_s=<t> lora_s_per_step=<s> lora_peak_rss_gb=<g> \
lora_tokens_per_s=<t>

    .venv/bin/python benchmarks/train_step.py [--envs 4] [--plays 4] [--turns 3] [--tokens 32] [--set k=v]

With ``--processes N`` (N > 1) it times instead the full fine-tuning step on one process and on N CPU processes
(data parallel over gloo, ``data/accelerate/cpu-ddp2.yaml`` with N processes), side by side with the load
average before each, and the weights' largest relative difference between the two updates; its last line is

    p1_s_per_step=<s> pN_s_per_step=<s> max_rel_weight_diff=<d>
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
import statistics
import tempfile
from typing import Any

import pandas as pd

from spade_core.config import RolloutConfig, load_config
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import SamplingParams
from spade_core.llm.hf import TransformersGenerator
from spade_core.play.rollout import EpisodeSpec, RolloutEngine
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord, write_marker
from spade_core.train.launch import ACCELERATE_DIR, launch_training

RUN = "bench"


def write_stage(store: Store, stage: str, table: str, frame: pd.DataFrame) -> None:
    """``frame`` as the one file of stage ``stage`` of generation 1, with the marker that lists it (the trainer
    reads the files a stage's marker lists)."""
    written = store.write_table(table, frame, run_id=RUN, gen=1, stage=stage)
    record = StageRecord(
        stage=stage,
        run_id=RUN,
        gen=1,
        artifact_hash="bench",
        digest=stage,
        files={table: [written.path]},
        sizes={written.path: written.size},
        file_digests={written.path: written.digest},
    )
    write_marker(store, record)


def stored_generation(store: Store, envs: int, plays: int, turns: int, tokens: int) -> int:
    """Play and store one generation's no-hint episodes; returns the number of episodes."""
    generator = TransformersGenerator("embedded", device="cpu", dtype="float32", batch_size=16)
    rollout = RolloutConfig(max_turns=turns, max_tokens_per_turn=tokens, max_context_tokens=1024)
    # Game environments: a tool-use play that did not terminate (most, for the untrained model) trains no token.
    played = [e for e in load_seed_envs() if e.kind == "game"][:envs]
    specs = [EpisodeSpec(e.env_id, e.code, 0, play=p) for e in played for p in range(plays)]
    rows = RolloutEngine(generator, rollout, SamplingParams(temperature=1.0, seed=0), call_timeout_s=5.0).run(specs)
    generator.close()
    frame = pd.DataFrame(rows)
    frame["episode_return"] = [float(p % 2) for p in range(len(frame))]  # 0/1 within each group of `plays`
    frame["policy_step"] = 0
    if "logprobs" not in frame.columns:
        frame["logprobs"] = None
    write_stage(store, "rollout-s0", "episodes", frame)
    pool = [
        {"env_id": e.env_id, "design_id": None, "skill": e.skill, "kind": e.kind, "code": e.code, "source": "replay"}
        for e in played
    ]
    write_stage(store, "pool", "pool", pd.DataFrame(pool))
    return len(frame)


def measure(root: str, lora: bool, extra: list[str], keep: str | None = None) -> dict[str, float]:
    """One update of the stored generation, timed; ``keep``: a directory to copy its weights to first."""
    cfg = load_config("tiny", None, [f"store.root={root}", f"training.lora={str(lora).lower()}", *extra])
    store = Store(root)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    summary = launch_training(cfg, store, RUN, 1, 0)
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    metrics = store.read_table("train_metrics", run_id=RUN, gen=1).drop_duplicates("step")
    seconds = [float(s) for s in metrics["step_seconds"].dropna()]
    if not seconds:
        raise SystemExit(f"the update trained nothing to time: {summary.skipped_reason or summary.line()}")
    out = {
        "steps": float(summary.steps),
        "s_per_step": statistics.median(seconds),
        "peak_rss_gb": peak_kb / 1024**2,
        "tokens_per_s": summary.tokens_trained / sum(seconds),  # the agent's own tokens
        "processed_tokens_per_s": float(metrics["tokens"].sum()) / sum(seconds),  # + prompts and env text
        "rss_measured": float(peak_kb > before),
    }
    if keep is not None:
        shutil.copytree(store.checkpoint_dir(RUN, 1), keep)
    store.fs.rm(store.checkpoint_dir(RUN, 1), recursive=True)  # the next variant starts from the same base
    for table in ("train_metrics", "train_samples"):
        for path in store.table_files(table, RUN, 1):
            store.fs.rm(path)
    return out


def cpu_processes_config(processes: int, directory: str) -> str:
    """``data/accelerate/cpu-ddp2.yaml`` with ``processes`` processes, written to ``directory``."""
    text = (ACCELERATE_DIR / "cpu-ddp2.yaml").read_text().replace("num_processes: 2", f"num_processes: {processes}")
    path = os.path.join(directory, f"cpu-ddp{processes}.yaml")
    with open(path, "w") as fh:
        fh.write(text)
    return path


def max_relative_difference(left: str, right: str) -> float:
    """Largest over the tensors of max |a - b| / max |a| between two checkpoints' ``model.safetensors``."""
    from safetensors.torch import load_file

    a, b = load_file(f"{left}/model.safetensors"), load_file(f"{right}/model.safetensors")
    return max(float((a[k] - b[k]).abs().max() / a[k].abs().max().clamp(min=1e-30)) for k in a)


def compare_processes(root: str, processes: int, extra: list[str]) -> None:
    """The full fine-tuning step on 1 and on ``processes`` CPU processes, side by side."""
    rows = {}
    for n in (1, processes):
        acc = [] if n == 1 else [f"training.accelerate_config={cpu_processes_config(n, root)}"]
        load = os.getloadavg()
        rows[n] = measure(root, False, [*extra, *acc], keep=os.path.join(root, f"weights-p{n}"))
        r = rows[n]
        print(
            f"{n} process{'es' if n > 1 else ''}: {r['s_per_step']:.2f} s/step (the step alone), "
            f"{r['tokens_per_s']:.0f} trained tokens/s, peak RSS {r['peak_rss_gb']:.2f} GB (the largest process); "
            f"load average before {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs"
        )
    diff = max_relative_difference(os.path.join(root, "weights-p1"), os.path.join(root, f"weights-p{processes}"))
    print(f"weights after the step, 1 vs {processes} processes: max relative difference {diff:.2e}")
    print(
        f"p1_s_per_step={rows[1]['s_per_step']:.3g} p{processes}_s_per_step={rows[processes]['s_per_step']:.3g} "
        f"max_rel_weight_diff={diff:.3g}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--envs", type=int, default=4, help="Seed environments played.")
    parser.add_argument("--plays", type=int, default=4, help="No-hint plays per environment (group size).")
    parser.add_argument("--turns", type=int, default=3, help="Turn limit per episode.")
    parser.add_argument("--tokens", type=int, default=32, help="Agent tokens per turn.")
    parser.add_argument("--set", action="append", help="Config override on the tiny preset (repeatable).")
    parser.add_argument("--processes", type=int, default=1, help="N > 1: time 1 and N CPU training processes.")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="spade-bench-train-") as root:
        n = stored_generation(Store(root), args.envs, args.plays, args.turns, args.tokens)
        print(f"stored {n} real episodes ({args.envs} envs x {args.plays} plays)")
        if args.processes > 1:
            compare_processes(root, args.processes, args.set or [])
            return
        # LoRA first: ru_maxrss of children is a running maximum, so the larger full run comes second.
        results: dict[str, dict[str, Any]] = {}
        for name, lora in (("lora", True), ("full", False)):
            results[name] = measure(root, lora, args.set or [])
            r = results[name]
            print(
                f"{name}: {r['steps']:.0f} steps, {r['s_per_step']:.2f} s/step (median), "
                f"peak RSS {r['peak_rss_gb']:.2f} GB, {r['tokens_per_s']:.0f} trained tokens/s "
                f"({r['processed_tokens_per_s']:.0f} tokens/s processed incl. prompts and environment text)"
            )
    if not results["full"]["rss_measured"]:
        print("note: the full run's peak RSS did not exceed the LoRA run's; the figure is the LoRA peak")
    print(
        " ".join(
            f"{name}_{key}={results[name][key]:.3g}"
            for name in ("full", "lora")
            for key in ("s_per_step", "peak_rss_gb", "tokens_per_s")
        )
    )


if __name__ == "__main__":
    main()
