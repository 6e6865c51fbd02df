"""Store + catalog benchmark: write 1,000,000 synthetic episode rows to a local store, then time three
typical DuckDB aggregates through the catalog (target: each <= 1 s on the 2-core machine).

    .venv/bin/python benchmarks/store_query.py [--rows 1000000] [--keep DIR]
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path so
# `import sandbox` finds the package when a script here is run by path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

import argparse
import shutil
import tempfile
import time

import numpy as np
import pandas as pd

from spade_core.store.artifacts import Store
from spade_core.store.catalog import connect

QUERIES = {
    "rows and mean return per run/generation": (
        "select run_id, gen, count(*) as episodes, avg(episode_return) as mean_return from episodes group by all"
    ),
    "top environments by no-hint win rate": (
        "select env_id, avg(episode_return) as win_rate, count(*) as n from episodes "
        "where condition = 'no_hint' group by env_id order by win_rate desc, env_id limit 20"
    ),
    "regret per environment (hint - no_hint)": (
        "select env_id, avg(episode_return) filter (where condition = 'hint') "
        "- avg(episode_return) filter (where condition = 'no_hint') as regret from episodes group by env_id "
        "order by regret desc limit 20"
    ),
}


def synthetic_episodes(n: int, rng: np.random.Generator, offset: int) -> pd.DataFrame:
    envs = np.array([f"env{i:05d}" for i in range(2000)])
    turns = rng.integers(1, 8, n)
    returns = (rng.random(n) < 0.4).astype(float)
    return pd.DataFrame(
        {
            "episode_id": [f"ep{offset + i}" for i in range(n)],
            "env_id": envs[rng.integers(0, len(envs), n)],
            "condition": np.where(rng.random(n) < 0.33, "hint", "no_hint"),
            "seed": rng.integers(0, 1000, n),
            "episode_return": returns,
            "turns": turns.astype("int32"),
            "error_type": np.where(rng.random(n) < 0.02, "timeout", None),
            "transcript": [[{"role": "user", "content": "obs"}, {"role": "assistant", "content": "\\boxed{1}"}]] * n,
            "rewards": [[0.0, 1.0]] * n,
            "model_ref": "base",
            "token_ids": None,
            "loss_mask": None,
        }
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--shards", type=int, default=10, help="files written (runs x generations)")
    parser.add_argument("--keep", help="write the store here and keep it")
    args = parser.parse_args()
    root = args.keep or tempfile.mkdtemp(prefix="spade-bench-store-")
    store = Store(root)
    rng = np.random.default_rng(0)
    per_shard = args.rows // args.shards
    frames = [synthetic_episodes(per_shard, rng, s * per_shard) for s in range(args.shards)]
    t0 = time.perf_counter()
    for s, frame in enumerate(frames):
        store.write_table("episodes", frame, run_id=f"run{s % 2}", gen=s // 2 + 1, stage="rollout", shard=0)
    write_s = time.perf_counter() - t0
    total = per_shard * args.shards
    print(
        f"wrote {total:,} episode rows in {args.shards} files: {write_s:.2f} s ({total / write_s:,.0f} rows/s, "
        "schema check + zstd Parquet + atomic rename)"
    )
    con = connect(store)
    for name, sql in QUERIES.items():
        t0 = time.perf_counter()
        con.execute(sql).fetchall()
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        rows = con.execute(sql).fetchall()
        warm = time.perf_counter() - t0
        verdict = "ok" if max(cold, warm) <= 1.0 else "OVER TARGET"
        print(
            f"{name:42s} first {cold * 1000:7.1f} ms, again {warm * 1000:7.1f} ms ({len(rows)} rows); "
            f"{max(cold, warm):.3f}x of the 1 s target: {verdict}"
        )
    if not args.keep:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
