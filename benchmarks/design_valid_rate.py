"""Valid rate of the designer: how many design attempts pass the validator, and why the others fail.

Each seed is one generation-1 design round as the pipeline runs it, through the functions the stages call: the
documents of the bundled corpus (``sample_documents``, as the documents stage samples them), the design
stage's prompts and batched model call (``spade_core.designer.batch.design_batch``: memory examples,
skills round robin, sampling with the model's settings) and the validate stage's verdicts in the jail
(``validation_rows``: a reply without code is a ``syntax_error``); with ``designer.mode`` mutate or parameters
a design that copies its parent is ``not_novel``, as the novelty stage rules. Nothing is retried (one attempt per
prompt), so the rate is the designer's first-try rate (docs/DESIGN.md §7 steps 2-4).

``--before REV`` measures the prompt of git revision REV as well, in a subprocess that imports the code of
that revision (exported with ``git archive``) and runs that revision's own copy of this script, which calls the
functions of its time: the same seeds, documents, skills and sampling seeds, only the prompt code differs. Per run
one line per seed, then a summary:

    seed=0 valid=2/8 errors=exception:3,syntax_error:3 seconds=210
    valid=5/24 rate=0.208 errors=... minutes=11.2
    valid_before=0/24 valid_after=5/24        (with --before)

    .venv/bin/python benchmarks/design_valid_rate.py [--seeds 0 1 2] [--attempts 8] [--preset tiny] \
[--set k=v ...] [--before REV] [--out FILE.jsonl]
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path so
# `import sandbox` finds the package when a script here is run by path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

import argparse
import json
import subprocess
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

RUN = "valid-rate"
SUMMARY_PREFIX = "valid="


def design_round(cfg: Any, generator: Any, store_root: str) -> list[dict[str, Any]]:
    """One generation-1 design round of ``cfg``: one record per design attempt (skill, reply, verdict)."""
    from spade_core.designer.batch import design_batch
    from spade_core.designer.corpus import sample_documents
    from spade_core.designer.memory import Memory
    from spade_core.designer.mutation import parent_codes
    from spade_core.designer.novelty_checks import parent_rows
    from spade_core.designer.retries import validation_rows
    from spade_core.pipeline.context import GenerationContext
    from spade_core.store.artifacts import Store

    ctx = GenerationContext(cfg, Store(store_root), RUN, 1)
    corpus = cfg.corpus
    documents = sample_documents(
        corpus.source, cfg.designer.documents_per_generation, ctx.seed, max(corpus.max_words, corpus.max_words_tool)
    )
    memory = Memory.initial(cfg.memory)
    designs = design_batch(ctx.design_run(), documents, generator, memory)
    verdicts = validation_rows(ctx.design_run(), designs)
    if cfg.designer.mode in ("mutate", "parameters"):  # the novelty stage's parent check: a copy is no design
        passed = designs[[bool(v["ok"]) for v in verdicts]]
        rows = parent_rows(
            passed, parent_codes(memory), cfg.designer.parent_max_similarity, cfg.designer.mode == "parameters"
        )
        copies = set(rows.loc[~rows["novel"], "design_id"])
        for d, v in zip(designs["design_id"], verdicts, strict=True):
            if d in copies:
                v.update(ok=False, error_type="not_novel", message="a copy of its parent")
    records = []
    for (_, d), v in zip(designs.iterrows(), verdicts, strict=True):
        records.append(
            {
                "seed": cfg.seed,
                "skill": d["skill"],
                "ok": bool(v["ok"]),
                "error_type": v["error_type"],
                "message": v["message"],
                "completion_tokens": len(d["completion_ids"]) if d["completion_ids"] is not None else 0,
                "prompt_chars": len(json.loads(d["prompt"])[-1]["content"]),
                "completion": d["completion"],
            }
        )
    return records


def error_counts(records: list[dict[str, Any]]) -> str:
    """``type:count`` of the failed attempts, most frequent first (``-`` when none failed).

    >>> error_counts([{"ok": False, "error_type": "exception"}, {"ok": True, "error_type": None},
    ...               {"ok": False, "error_type": "exception"}, {"ok": False, "error_type": "syntax_error"}])
    'exception:2,syntax_error:1'
    """
    counts = Counter(str(r["error_type"]) for r in records if not r["ok"])
    return ",".join(f"{k}:{n}" for k, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))) or "-"


def measure(args: argparse.Namespace) -> str:
    """Run every seed with the code on the import path; print one line per seed; return the summary line."""
    from spade_core.config import load_config
    from spade_core.llm import make_generator

    started = time.perf_counter()
    records: list[dict[str, Any]] = []
    generator = None
    with tempfile.TemporaryDirectory(prefix="spade-valid-rate-") as root:
        for seed in args.seeds:
            overrides = [*args.set, f"seed={seed}", f"designer.documents_per_generation={args.attempts}"]
            cfg = load_config(args.preset, None, [*overrides, f"store.root={root}/store-{seed}"])
            generator = generator or make_generator(cfg.model)  # the model settings do not depend on the seed
            t0 = time.perf_counter()
            batch = design_round(cfg, generator, f"{root}/store-{seed}")
            records += batch
            valid = sum(r["ok"] for r in batch)
            print(
                f"seed={seed} valid={valid}/{len(batch)} errors={error_counts(batch)} "
                f"seconds={time.perf_counter() - t0:.0f}",
                flush=True,
            )
        if generator is not None:
            generator.close()
    if args.out:
        with open(args.out, "w") as f:
            for r in records:
                f.write(json.dumps(r) + "\n")
    valid = sum(r["ok"] for r in records)
    rate = valid / len(records) if records else 0.0
    minutes = (time.perf_counter() - started) / 60
    errors = error_counts(records)
    return f"{SUMMARY_PREFIX}{valid}/{len(records)} rate={rate:.3f} errors={errors} minutes={minutes:.1f}"


def measure_revision(rev: str, args: argparse.Namespace) -> str:
    """The summary line of git revision ``rev``'s copy of this script run on that revision's code (exported, never
    checked out): this copy's imports name the functions of today, which an older revision may not have."""
    repo = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="spade-before-") as tree:
        archive = subprocess.run(["git", "-C", str(repo), "archive", rev], check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tree], input=archive, check=True)
        script = Path(tree) / "benchmarks" / Path(__file__).name
        if not script.is_file():
            raise SystemExit(f"revision {rev} has no benchmarks/{script.name} to measure it with")
        cmd = [sys.executable, str(script), "--preset", args.preset, "--attempts", str(args.attempts)]
        cmd += ["--seeds", *map(str, args.seeds), *[a for kv in args.set for a in ("--set", kv)]]
        if args.out:
            cmd += ["--out", f"{args.out}.before"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([tree, os.environ.get("PYTHONPATH", "")])}
        out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    lines = out.strip().splitlines()
    for line in lines[:-1]:
        print(f"[{rev}] {line}", flush=True)
    return lines[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2], help="Config seeds, one round each.")
    parser.add_argument("--attempts", type=int, default=8, help="Design prompts per seed (one attempt each).")
    parser.add_argument("--preset", default="tiny", help="Config preset.")
    parser.add_argument("--set", action="append", default=[], help="Config override k=v (repeatable).")
    parser.add_argument("--before", help="Also measure the prompt code of this git revision.")
    parser.add_argument("--out", help="Write every attempt (reply, verdict) as JSON Lines here.")
    args = parser.parse_args(argv)
    before = measure_revision(args.before, args) if args.before else None
    if before is not None:
        print(f"[{args.before}] {before}", flush=True)
    after = measure(args)
    print(after, flush=True)
    if before is not None:
        print(f"valid_before={_count(before)} valid_after={_count(after)}", flush=True)
    return 0


def _count(summary: str) -> str:
    """``N/M`` of a summary line.

    >>> _count("valid=5/24 rate=0.208 errors=- minutes=1.0")
    '5/24'
    """
    return summary.split()[0].removeprefix(SUMMARY_PREFIX)


if __name__ == "__main__":
    sys.exit(main())
