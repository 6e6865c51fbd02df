"""Count the store operations of one tiny generation run by the production Prefect flow.

Counts at the fsspec level (so the same script measures any version of the code): a *read* is a file
opened for reading or read whole, a *list* a glob / ls / find / exists / info, a *write* a file opened
for writing or moved into place — only for paths under the store root. Prefect runs its temporary
local server in ``PREFECT_HOME`` (set it to a scratch directory).

    PREFECT_HOME=/tmp/p .venv/bin/python benchmarks/store_reads.py --store /tmp/reads-store \
        --set training.steps_per_generation=1

Writes through ``open()`` of a local store are not fsspec calls and are not counted. Last line:
``reads=R lists=L writes=W stages=S``.
"""

from __future__ import annotations

import argparse
import collections
import os
import shutil
import sys
from pathlib import Path
from typing import Any

# benchmarks/sandbox.py would shadow the sandbox package: import the project, not this folder.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch loads OpenMP (docs/DESIGN.md §8, "CPU threads")

import fsspec.implementations.local as local

# Small token budgets: the counts depend on the stages and shards, not on how long the model talks.
OVERRIDES = [
    "designer.max_new_tokens=24",
    "rollout.max_tokens_per_turn=8",
    "rollout.max_turns=2",
    "rollout.hint_max_words=16",
    "training.enabled=false",
    "memory.report_diversity=false",
    "orchestration.shard_size=2",
]
COUNTS: collections.Counter[str] = collections.Counter()


def _count(kind: str, root: str, method: Any) -> Any:
    def counted(self: Any, path: Any, *args: Any, **kwargs: Any) -> Any:
        if str(path).startswith(root) or str(path).lstrip("/").startswith(root.lstrip("/")):
            mode = args[0] if args else kwargs.get("mode", "rb")
            COUNTS["write" if kind == "open" and "w" in str(mode) else "read" if kind == "open" else kind] += 1
        return method(self, path, *args, **kwargs)

    return counted


def instrument(root: str) -> None:
    fs = local.LocalFileSystem
    fs.open = _count("open", root, fs.open)  # type: ignore[method-assign]
    fs.cat_file = _count("read", root, fs.cat_file)  # type: ignore[method-assign]
    for name in ("glob", "ls", "find", "exists", "info"):
        setattr(fs, name, _count("list", root, getattr(fs, name)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--store", default="/tmp/spade-store-reads", help="A scratch store (emptied first).")
    parser.add_argument("--set", action="append", default=[], help="Extra config override (repeatable).")
    args = parser.parse_args()
    root = str(Path(args.store).resolve())
    shutil.rmtree(root, ignore_errors=True)
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    instrument(root)
    from flows.spade import spade_run

    (summary,) = spade_run(run_id="reads", generations=1, overrides=[*OVERRIDES, *args.set], store=root)
    stages = len(summary["stages"])
    print(f"module: {sys.modules['flows.spade'].__file__}", file=sys.stderr)
    print(f"reads={COUNTS['read']} lists={COUNTS['list']} writes={COUNTS['write']} stages={stages}")


if __name__ == "__main__":
    main()
