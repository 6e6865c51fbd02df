"""What verified reuse costs: the check of a marker's files by size only against size + digest.

Every reuse (and ``spade status``, ``spade verify``) checks each file a marker lists: its size against one
listing of its directory, then the sha256 of its bytes, read in chunks (``pipeline/verify.file_problems``).
Two stores are measured, each a real store with one real marker listing its files:

- ``tiny``: ``--files`` Parquet-sized files of ``--tiny-mb`` MB in all (the defaults: the file count and
  volume of one ``tiny`` generation's tables; checkpoints' weights are not listed, only their marker);
- ``large``: one table file of ``--large-mb`` MB (default 1024).

Each is checked three times: sizes only, size + digest in a fresh process state (every file hashed), and
size + digest again (the per-process digest cache: what the whole-stage marker of a sharded stage and
``spade status``'s second look cost). The files were just written, so they are in the page cache: the
digest figures are hashing, not disk reads.

    .venv/bin/python benchmarks/reuse_digest.py --root /tmp/reuse-digest

Last line: ``tiny_sizes_s=.. tiny_digest_s=.. large_sizes_s=.. large_digest_s=.. large_cached_s=..``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

# benchmarks/sandbox.py would shadow the sandbox package: import the project, not this folder.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

from spade_core.pipeline import verify
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord


def _store_with(store: Store, name: str, sizes: list[int]) -> StageRecord:
    """Write random files of these sizes under ``tables/episodes/run=bench/gen=1/`` and a record listing them."""
    paths, digests, recorded = [], {}, {}
    chunk = os.urandom(1 << 20)
    for shard, size in enumerate(sizes):
        path = store.table_path("episodes", "bench", 1, name, shard)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as fh:
            left = size
            while left > 0:
                fh.write(chunk[: min(left, len(chunk))])
                left -= len(chunk)
        paths.append(path)
        recorded[path] = size
        digests[path] = store.file_digest(path)
    return StageRecord(
        stage=name, run_id="bench", gen=1, artifact_hash="a", digest="d", files={"episodes": paths},
        sizes=recorded, file_digests=digests,
    )  # fmt: skip


def _timed(store: Store, record: StageRecord, *, content: bool, fresh: bool) -> float:
    if fresh:
        verify._DIGESTS.clear()
    started = time.perf_counter()
    problems = verify.file_problems(store, record, content=content)
    elapsed = time.perf_counter() - started
    if problems:
        raise SystemExit(f"unexpected problems: {[p.line() for p in problems]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="/tmp/reuse-digest", help="scratch store (removed afterwards)")
    parser.add_argument("--files", type=int, default=40, help="files of the tiny store")
    parser.add_argument("--tiny-mb", type=float, default=4.0, help="MB of the tiny store, in all")
    parser.add_argument("--large-mb", type=int, default=1024, help="MB of the one large table file")
    args = parser.parse_args()
    shutil.rmtree(args.root, ignore_errors=True)
    store = Store(args.root)
    try:
        tiny = _store_with(store, "tiny", [int(args.tiny_mb * (1 << 20) / args.files)] * args.files)
        large = _store_with(store, "large", [args.large_mb << 20])
        figures = {}
        for label, record in (("tiny", tiny), ("large", large)):
            figures[f"{label}_sizes_s"] = min(_timed(store, record, content=False, fresh=True) for _ in range(3))
            figures[f"{label}_digest_s"] = min(_timed(store, record, content=True, fresh=True) for _ in range(3))
            figures[f"{label}_cached_s"] = _timed(store, record, content=True, fresh=False)
        print(f"load average {os.getloadavg()[0]:.2f}; tiny: {args.files} files, {args.tiny_mb} MB; large: 1 file")
        print(" ".join(f"{key}={value:.4f}" for key, value in figures.items()))
    finally:
        shutil.rmtree(args.root, ignore_errors=True)


if __name__ == "__main__":
    main()
