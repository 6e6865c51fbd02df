"""Resume benchmark (docs/DESIGN.md §11): run one generation, then run the same generation again.

The second run finds every stage in Prefect's result cache (and behind it, in the store), so it makes
no model call and costs only orchestration. Target: second / first <= 0.10 with 0 model calls.

    .venv/bin/python benchmarks/resume.py                          # the tiny preset, as `make demo` runs it
    .venv/bin/python benchmarks/resume.py --set training.enabled=false --set designer.group_size=1

Both runs happen in one process against a fresh temporary store and Prefect home (Prefect's temporary
server starts once, before the first run). The last line is exactly
``resume_ratio=<second/first> model_calls_second_run=<n>``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--set", dest="overrides", action="append", default=[], help="key=value, repeatable")
    parser.add_argument("--store", default=None, help="store root (default: a temporary directory)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="spade-resume-bench-") as tmp:
        os.environ["PREFECT_HOME"] = str(Path(tmp) / "prefect")
        os.environ["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
        os.environ.pop("PREFECT_API_URL", None)
        from prefect import flow

        from flows.spade import spade

        store = args.store or str(Path(tmp) / "store")

        @flow(name="spade-resume-benchmark")
        def warm_up() -> None:
            """Start Prefect's temporary server before timing anything."""

        warm_up()
        params = {"run_id": "bench", "gen": 1, "config": args.preset, "overrides": args.overrides, "store": store}
        t0 = time.perf_counter()
        first = spade(**params)
        first_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        second = spade(**params)
        second_s = time.perf_counter() - t0

    statuses = ", ".join(f"{s['stage']}={s['status']}" for s in second["stages"])
    print(f"first run: {first_s:.1f}s, {first['model_calls']} model calls, {first['episodes']} episodes")
    print(f"second run: {second_s:.1f}s ({statuses})")
    print(f"resume_ratio={second_s / first_s:.4f} model_calls_second_run={second['model_calls']}")


if __name__ == "__main__":
    main()
