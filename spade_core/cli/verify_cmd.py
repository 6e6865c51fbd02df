"""``spade verify RUN``: are the files every stage marker of a run lists still in the store, whole?

One line per problem and a summary; exit 1 when something is wrong. ``--deep`` also reads every file
(digest, and that it opens with its table's schema); ``--repair`` removes the markers of the damaged stages
and of every stage after them (:func:`spade_core.pipeline.verify.dependants`), so that ``spade resume``
redoes exactly those (docs/DESIGN.md §10, "Verified reuse").
"""

from __future__ import annotations

from typing import Annotated

import typer

from spade_core.cli.common import StoreOpt, clean_errors
from spade_core.config import StoreConfig
from spade_core.pipeline.markers import list_markers, marker_path
from spade_core.pipeline.verify import Listings, Problem, deep_problems, dependants, file_problems
from spade_core.store import Store


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
