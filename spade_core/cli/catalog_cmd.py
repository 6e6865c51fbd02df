"""``spade sql``: DuckDB over the store, one view per table; read-only unless ``--allow-write``.

A read-only query reaches no file but the store's, and those only to read (``spade_core.store.catalog``,
docs/DESIGN.md §12). A refused write and a store that cannot be read (a damaged file, an endpoint gone after
the retries) say one line and exit 1; any other SQL error says one line and exits 2.
"""

from __future__ import annotations

import json
import math
import re
import sys
from typing import Annotated, Any, Literal

import duckdb
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve
from spade_core.store.catalog import LOCAL_SCHEME, connect
from spade_core.store.fs import s3_endpoint
from spade_core.store.reader import Checked, RunReader
from spade_core.store.schemas import TABLES

READ_ONLY_HINT = "spade sql only reads the store unless --allow-write"


def _refusal(exc: duckdb.Error) -> str | None:
    """What a read-only connection refused (one line), or None for any other error.

    >>> _refusal(duckdb.PermissionException('Permission Error: Cannot access file "/tmp/x.csv" - file system '
    ...     "operations are disabled by configuration"))
    'file access refused: /tmp/x.csv'
    >>> _refusal(duckdb.Error("Traceback ...\\nspade_core.fs.ReadOnlyError: read-only: cannot write "
    ...     "spade-store:///s/tables/x.parquet\\n"))
    'write refused: /s/tables/x.parquet'
    >>> _refusal(duckdb.CatalogException("Catalog Error: Table with name nope does not exist!")) is None
    True
    """
    text = str(exc)
    if "ReadOnlyError: read-only: cannot " in text:
        path = text.rsplit("ReadOnlyError: read-only: cannot ", 1)[1].split(" ", 1)[1].strip()
        return f"write refused: {path.removeprefix(f'{LOCAL_SCHEME}://')}"
    if isinstance(exc, duckdb.PermissionException):
        path = text.split('"')[1] if text.count('"') >= 2 else text.splitlines()[0]
        return f"file access refused: {path}"
    if "the configuration has been locked" in text:
        return f"settings are locked: {text.splitlines()[0].split(': ', 1)[-1]}"
    return None


_DAMAGED = ("no magic bytes found", "too small to be a parquet file")
"""What DuckDB says of a file cut short or not Parquet at all."""


def store_fault(exc: duckdb.Error, endpoint: str | None = None) -> str | None:
    """What went wrong reading the store during a query (one line, with what to do), or None for a query error.

    Two kinds: a damaged Parquet file (DuckDB's own error), and an error of the store's filesystem, which
    DuckDB passes on as the text of its Python traceback (S3 gone or refusing after the retries of
    ``spade_core.store.fs``).

    >>> store_fault(duckdb.IOException('IO Error: No magic bytes found at end of file "x"'))  # doctest: +ELLIPSIS
    'a stored file is damaged (IO Error: No magic bytes found at end of file "x"); find it with ...'
    >>> store_fault(duckdb.Error("Traceback (most recent call last):\\n...\\nPermissionError: Access Denied\\n"))
    'reading the store failed (PermissionError: Access Denied); check the store and its endpoint, then query again'
    >>> store_fault(duckdb.IOException('IO Error: No files found that match the pattern "x.json"')) is None
    True
    """
    text = str(exc)
    if any(sign in text.lower() for sign in _DAMAGED):
        return f"a stored file is damaged ({one_line(exc)}); find it with `spade verify RUN --deep`"
    if text.lstrip().startswith("Traceback (most recent call last)"):
        at = f" at {endpoint}" if endpoint else ""
        return f"reading the store{at} failed ({one_line(exc)}); check the store and its endpoint, then query again"
    return None


def one_line(exc: BaseException) -> str:
    """The first line of a DuckDB error, or the exception line of a Python traceback DuckDB passed on.

    >>> one_line(duckdb.Error("Traceback (most recent call last):\\n  File ...\\n\\nOSError: [Errno 5] gone\\n"))
    'OSError: [Errno 5] gone'
    >>> one_line(duckdb.CatalogException("Catalog Error: no such table\\nLINE 1: ..."))
    'Catalog Error: no such table'
    >>> one_line(duckdb.InvalidInputException("Invalid Input Error: File 'spade-store:///s/x.parquet' too small"))
    "Invalid Input Error: File '/s/x.parquet' too small"
    >>> one_line(duckdb.Error("Traceback (most recent call last):\\n  File ...\\nOSError: [Errno 5] gone\\n\\n"
    ...                       "LINE 1: ... read_parquet('s3://b/t/**/*.parquet...\\n            ^^^^^^^^^"))
    'OSError: [Errno 5] gone'
    """
    lines = [line for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    line = lines[0]
    if line.startswith("Traceback (most recent call last)"):  # its exception line: the last one not indented,
        # before the ``LINE 1: ...`` and caret lines DuckDB appends
        flush = [x for x in lines[1:] if not x[0].isspace() and not re.match(r"LINE \d+:", x)]
        line = flush[-1] if flush else lines[-1]
    return line.replace(f"{LOCAL_SCHEME}://", "")  # a local store's paths as the user wrote them


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


def _named_tables(statement: str) -> list[str]:
    """The tables a statement names (a word match: a column or alias of the same name counts too).

    >>> _named_tables("select count(*) from Episodes e join designs using (env_id)")
    ['designs', 'episodes']
    """
    return [t for t in TABLES if re.search(rf"\b{t}\b", statement, re.I)]


def _warn_left_out(reader: RunReader, named: list[str], checked: Checked, all_files: bool) -> None:
    """One line on stderr per file of a named table the answer leaves out: a file no marker vouches for
    (changed, replaced, missing, its rows not the marker's count), and the files no marker lists at all."""
    for problem in checked.left_out():
        run = problem.marker.split(" ", 1)[0]
        print(
            f"warning: left out {problem.line()}; its rows are not in this answer (spade verify {run})", file=sys.stderr
        )
    if all_files:
        return
    for table in named:
        unlisted = reader.unlisted([table])
        if unlisted:
            more = f" and {len(unlisted) - 1} more" if len(unlisted) > 1 else ""
            print(
                f"warning: table {table}: {unlisted[0]}{more} no stage marker lists (written around the pipeline) "
                "are not in this answer; --all-files reads every file",
                file=sys.stderr,
            )


@clean_errors
def sql(
    statement: Annotated[
        str,
        typer.Argument(
            help="SQL over the views documents, designs, validations, hints, "
            "episodes, env_scores, memory, train_metrics, evals."
        ),
    ],
    allow_write: Annotated[
        bool,
        typer.Option(
            "--allow-write",
            help="Let the statement write files (COPY ... TO, EXPORT DATABASE); without it, spade sql only reads.",
        ),
    ] = False,
    all_files: Annotated[
        bool,
        typer.Option(
            "--all-files",
            help="Read every Parquet file of each table, unchecked, instead of the files the stage markers list "
            "(each checked against its marker: size, digest, row count).",
        ),
    ] = False,
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

    The views read the files the stage markers list, each checked against its marker once (size, digest,
    row count); a file that fails is left out and named on stderr, and the query answers from the rest.

    Read-only unless --allow-write: e.g. spade sql --allow-write "copy (select * from episodes) to 'ep.parquet'"
    """
    cfg = resolve(preset, config, overrides, store)
    st = open_store(cfg)
    reader, named = RunReader(st), _named_tables(statement)
    try:
        if all_files:
            con, checked = connect(st, read_only=not allow_write), Checked()
        else:
            con, checked = reader.connect(read_only=not allow_write, checked=named)
        try:
            frame = con.execute(statement).df()
        finally:
            con.close()
    except duckdb.Error as exc:
        refused = None if allow_write else _refusal(exc)
        if refused is not None:
            print(f"error: {refused} ({READ_ONLY_HINT})", file=sys.stderr)
            raise typer.Exit(1) from None
        fault = store_fault(exc, (s3_endpoint(cfg.store.endpoint_url) or "AWS S3") if st.is_s3 else None)
        if fault is not None:
            print(f"error: {fault}", file=sys.stderr)
            raise typer.Exit(1) from None
        print(f"error: {one_line(exc)}", file=sys.stderr)
        raise typer.Exit(2) from None
    _warn_left_out(reader, named, checked, all_files)
    for link in st.links_out():  # DuckDB's globs do not follow them: say what the answer leaves out
        print(f"warning: skipped {link}: a symbolic link out of the store's own files", file=sys.stderr)
    if output_format == "json":
        rows = [{k: _jsonable(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]
        typer.echo(json.dumps(rows, default=str))
    elif output_format == "csv":
        typer.echo(frame.to_csv(index=False), nl=False)
    else:
        # Cells are Text, never markup: stored model output holds ``[/INST]`` and could hold ``[bold]``.
        table = Table(show_lines=False)
        for column in frame.columns:
            table.add_column(Text(str(column)))
        for row in frame.itertuples(index=False):
            table.add_row(*[Text(str(_jsonable(v))[:200]) for v in row])
        Console(width=200, markup=False, highlight=False).print(table)
        typer.echo(f"({len(frame)} rows)")
