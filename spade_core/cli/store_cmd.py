"""The commands that read a run's state from the store alone (its stage markers), not from Prefect.

- ``spade status RUN_ID``: which stages of which generations are done, and the command that continues;
- ``spade verify RUN_ID``: are the stage markers of a run readable, and the files they list still in the
  store, whole (size and digest)? One line per problem and a summary; exit 1 when something is wrong.
  ``--quick`` checks sizes only, ``--deep`` also that every file opens with its table's schema; a marker
  that later markers name as their input but that is gone is reported as missing. ``--repair`` removes the
  damaged markers and those of every stage after them (:func:`spade_core.pipeline.verify.dependants`), so that
  ``spade resume`` redoes exactly those (docs/DESIGN.md §10, "Verified reuse").
"""

from __future__ import annotations

from typing import Annotated

import typer

from spade_core.cli.common import StoreOpt, clean_errors, open_store
from spade_core.pipeline.run_config import store_root, stored_config
from spade_core.pipeline.status import (
    engine_faults,
    generation_complete,
    generation_phase,
    model_faults,
    next_generation,
    run_status,
)
from spade_core.pipeline.status import stage_names as stages_for
from spade_core.pipeline.verify import dependants, missing_inputs, schema_problems
from spade_core.store.artifacts import Store
from spade_core.store.integrity import Listings, Problem, file_problems
from spade_core.store.markers import marker_path, scan_markers


@clean_errors
def status(
    run_id: Annotated[str, typer.Argument(help="The run to show.")],
    store: StoreOpt = None,
) -> None:
    """Which stages of which generations of a run are done (read from the store, not from Prefect)."""
    cfg = stored_config(run_id, store)
    st = open_store(cfg)
    states = run_status(st, cfg, run_id)
    gen = next_generation(st, cfg, run_id)
    records = scan_markers(st, run_id).records
    typer.echo(f"run {run_id}  store {st.base}  config {cfg.config_hash()}")
    for g in sorted(set(states) | {gen}):
        row = states.get(g) or dict.fromkeys(stages_for(cfg, g), "todo")
        verdict = "complete" if generation_complete(st, cfg, run_id, g) else "incomplete"
        phase = generation_phase(cfg, g, row)
        where = "" if phase in ("complete", "not started") else f" [{phase}]"
        cells = "  ".join(f"{s}:{'✓' if v == 'done' else '·' if v == 'todo' else v}" for s, v in row.items())
        typer.echo(f"gen {g} {verdict:<10}{where} {cells}")
        failed, retried = model_faults(records.get(g, {}))
        if failed or retried:
            typer.echo(f"      {failed} plays failed in the model call (left out), {retried} played again after one")
        if faults := engine_faults(records.get(g, {}).values()):
            typer.echo(f"      the engine was replaced {len(faults)} time(s) after a fault; first: {faults[0][:200]}")
    hint = f"spade resume {run_id}" if gen in states else f"spade run --run-id {run_id} --generations {gen}"
    typer.echo(f"next: generation {gen}  ({hint})")


@clean_errors
def verify(
    run_id: Annotated[str, typer.Argument(help="The run to check.")],
    store: StoreOpt = None,
    quick: Annotated[
        bool, typer.Option("--quick", help="Sizes only: do not read the files to check their digests.")
    ] = False,
    deep: Annotated[
        bool, typer.Option("--deep", help="Also check that every Parquet file opens as its table.")
    ] = False,
    repair: Annotated[
        bool,
        typer.Option("--repair", help="Remove the markers of damaged stages and their dependants; then spade resume."),
    ] = False,
) -> None:
    """Check every stage marker of a run: it reads as a marker, and every file it lists lies in the store with
    its recorded size and digest (--quick: sizes only; --deep: also its table schema); a marker that later
    markers name as their input is there. Exit 1 when something is damaged.

    Example: spade verify demo --repair && spade resume demo
    """
    st = Store(store_root(store))
    scan = scan_markers(st, run_id)
    markers = scan.records
    if not markers and not scan.bad:
        raise FileNotFoundError(f"run {run_id!r} has no stage markers in the store {st.base}")
    listings: Listings = {}
    problems: list[Problem] = [Problem(bad.gen, bad.name, bad.path, bad.reason) for bad in scan.bad]
    files = 0
    for gen in sorted(markers):
        for record in markers[gen].values():
            files += sum(len(paths) for paths in record.files.values())
            found = file_problems(st, record, listings, content=not quick, weights=not quick)
            if deep:  # a file already found damaged is not opened again
                found += [p for p in schema_problems(st, record) if p.path not in {f.path for f in found}]
            problems += found
    missing = missing_inputs(st, run_id, scan)
    for problem in problems:
        typer.echo(f"damaged: {problem.line()}")
    for problem in missing:
        typer.echo(f"missing: {problem.line()}")
    count = sum(len(records) for records in markers.values()) + len(scan.bad)
    damaged = {(p.gen, p.marker) for p in problems}
    kind = "sizes" if quick else "digests and schemas" if deep else "digests"
    typer.echo(
        f"run {run_id}: {count} markers, {files} files checked ({kind}): {len(damaged)} damaged markers"
        + (f", {len(missing)} missing markers" if missing else "")
    )
    if not problems and not missing:
        return
    if repair:
        removed = sorted(dependants(markers, damaged))
        bad = {(b.gen, b.name): b.path for b in scan.bad}
        for gen, name in removed:
            if (gen, name) in bad:
                st.remove_file(bad[gen, name])
            else:
                record = markers[gen][name]
                st.remove_file(marker_path(st, run_id, gen, record.stage, record.shard))
        typer.echo(f"removed {len(removed)} markers: " + ", ".join(f"gen {g} {n}" for g, n in removed))
        typer.echo(f"next: spade resume {run_id}  (redoes exactly those stages and the missing ones)")
        return
    if problems:
        typer.echo(f"repair: spade verify {run_id} --repair, then spade resume {run_id}")
    else:  # a missing marker's stage runs again on resume; those after it follow through their input digests
        typer.echo(f"next: spade resume {run_id}  (redoes the missing stages)")
    raise typer.Exit(1)
