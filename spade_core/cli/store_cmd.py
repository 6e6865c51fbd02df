"""The commands that read a run's state from the store alone (its stage markers), not from Prefect.

- ``spade status RUN_ID``: which stages of which generations are done, and the command that continues;
- ``spade verify RUN_ID``: are the files every stage marker of a run lists still in the store, whole?
  One line per problem and a summary; exit 1 when something is wrong. ``--deep`` also reads every file
  (digest, and that it opens with its table's schema); ``--repair`` removes the markers of the damaged
  stages and of every stage after them (:func:`spade_core.pipeline.verify.dependants`), so that
  ``spade resume`` redoes exactly those (docs/DESIGN.md §10, "Verified reuse").
"""

from __future__ import annotations

from typing import Annotated

import typer

from spade_core.cli.common import StoreOpt, clean_errors, open_store
from spade_core.config import StoreConfig
from spade_core.markers import list_markers, marker_path
from spade_core.pipeline.run_config import stored_config
from spade_core.pipeline.status import generation_complete, generation_phase, next_generation, run_status
from spade_core.pipeline.status import stage_names as stages_for
from spade_core.pipeline.verify import Listings, Problem, deep_problems, dependants, file_problems
from spade_core.store import Store


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
    typer.echo(f"run {run_id}  store {st.base}  config {cfg.config_hash()}")
    for g in sorted(set(states) | {gen}):
        row = states.get(g) or dict.fromkeys(stages_for(cfg, g), "todo")
        verdict = "complete" if generation_complete(st, cfg, run_id, g) else "incomplete"
        phase = generation_phase(cfg, g, row)
        where = "" if phase in ("complete", "not started") else f" [{phase}]"
        cells = "  ".join(f"{s}:{'✓' if v == 'done' else '·' if v == 'todo' else v}" for s, v in row.items())
        typer.echo(f"gen {g} {verdict:<10}{where} {cells}")
    hint = f"spade resume {run_id}" if gen in states else f"spade run --run-id {run_id} --generations {gen}"
    typer.echo(f"next: generation {gen}  ({hint})")


@clean_errors
def verify(
    run_id: Annotated[str, typer.Argument(help="The run to check.")],
    store: StoreOpt = None,
    deep: Annotated[
        bool, typer.Option("--deep", help="Also read every file: its digest and that it opens as its table.")
    ] = False,
    repair: Annotated[
        bool,
        typer.Option("--repair", help="Remove the markers of damaged stages and their dependants; then spade resume."),
    ] = False,
) -> None:
    """Check that every file the stage markers of a run list exists with its recorded size (and, with
    --deep, its recorded digest and table schema). Exit 1 when a file is damaged.

    Example: spade verify demo --deep --repair && spade resume demo
    """
    st = Store(store or StoreConfig().root)
    markers = list_markers(st, run_id)
    if not markers:
        raise FileNotFoundError(f"run {run_id!r} has no stage markers in the store {st.base}")
    listings: Listings = {}
    problems: list[Problem] = []
    files = 0
    for gen in sorted(markers):
        for record in markers[gen].values():
            files += sum(len(paths) for paths in record.files.values())
            found = file_problems(st, record, listings)
            if deep:
                found += deep_problems(st, record)
            problems += found
    for problem in problems:
        typer.echo(f"damaged: {problem.line()}")
    count = sum(len(records) for records in markers.values())
    damaged = {(p.gen, p.marker) for p in problems}
    kind = "deep" if deep else "sizes"
    typer.echo(f"run {run_id}: {count} markers, {files} files checked ({kind}): {len(damaged)} damaged markers")
    if not problems:
        return
    if repair:
        removed = sorted(dependants(markers, damaged))
        for gen, name in removed:
            record = markers[gen][name]
            st.remove_file(marker_path(st, run_id, gen, record.stage, record.shard))
        typer.echo(f"removed {len(removed)} markers: " + ", ".join(f"gen {g} {n}" for g, n in removed))
        typer.echo(f"next: spade resume {run_id}  (redoes exactly those stages)")
        return
    typer.echo(f"repair: spade verify {run_id} --repair, then spade resume {run_id}")
    raise typer.Exit(1)
