"""``spade sql``: DuckDB over the store, one view per table."""

from __future__ import annotations

import json
import math
import sys
from typing import Annotated, Any, Literal

import duckdb
import typer
from rich.console import Console
from rich.table import Table

from spade_core.catalog import query
from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve


def _jsonable(value: Any) -> Any:
    if hasattr(value, "tolist"):
        value = value.tolist()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


@clean_errors
def sql(
    statement: Annotated[
        str,
        typer.Argument(
            help="SQL over the views documents, designs, validations, hints, "
            "episodes, env_scores, memory, train_metrics, evals."
        ),
    ],
    output_format: Annotated[
        Literal["table", "csv", "json"],
        typer.Option("--format", help="Output format; json prints one array of row objects."),
    ] = "table",
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Query the artifact store with DuckDB.

    Example: spade sql "select run_id, gen, count(*) from episodes group by all"
    """
    cfg = resolve(preset, config, overrides, store)
    try:
        frame = query(open_store(cfg), statement)
    except duckdb.Error as exc:
        print(f"error: {str(exc).splitlines()[0]}", file=sys.stderr)
        raise typer.Exit(2) from None
    if output_format == "json":
        rows = [{k: _jsonable(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]
        typer.echo(json.dumps(rows, default=str))
    elif output_format == "csv":
        typer.echo(frame.to_csv(index=False), nl=False)
    else:
        table = Table(*[str(c) for c in frame.columns], show_lines=False)
        for row in frame.itertuples(index=False):
            table.add_row(*[str(_jsonable(v))[:200] for v in row])
        Console(width=200).print(table)
        typer.echo(f"({len(frame)} rows)")
