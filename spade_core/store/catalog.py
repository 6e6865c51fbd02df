"""DuckDB catalog over the store: one view per table, local or S3 (docs/DESIGN.md §4).

DuckDB's httpfs extension cannot be installed offline, so S3 is read through the store's s3fs filesystem
registered with ``con.register_filesystem``. Partition columns come from the hive path: ``run_id``
(VARCHAR, also for all-digit run ids) and ``gen`` (BIGINT). A table with no files yet is an empty view with
the right columns, not an error.

**Read-only connections** (``read_only=True``, what ``spade sql`` opens unless ``--allow-write``;
docs/DESIGN.md §12): DuckDB reaches no file but through the store, and the store only through a
:class:`~spade_core.store.fs.ReadOnlyFileSystem`. ``enable_external_access`` is off, with the store's root as the
one allowed directory (under the read-only filesystem's URL scheme), and ``lock_configuration`` is on, so a
statement cannot turn either back (only the :data:`TUNABLE` settings stay open). ``COPY ... TO``,
``EXPORT DATABASE``, ``ATTACH``, ``INSTALL`` and any file function outside the store are refused by DuckDB;
a write into the store is refused by the filesystem. Tables created in the in-memory database are allowed:
they change nothing outside the process.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import duckdb

from spade_core.store.artifacts import Store, arrow_schema_with_partitions
from spade_core.store.fs import ReadOnlyFileSystem
from spade_core.store.schemas import SCHEMAS, TABLES

LOCAL_SCHEME = "spade-store"
"""The URL scheme a read-only connection reads a local store under (``spade-store:///abs/root/...``)."""


TUNABLE = ("threads", "memory_limit", "preserve_insertion_order")
"""Settings a read-only query may still change: they tune the work, not what the connection can reach."""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _read_only_root(con: duckdb.DuckDBPyConnection, store: Store) -> str:
    """Register the store's read-only view, lock the connection to it; the root as DuckDB now spells it."""
    root = store.base.rstrip("/") if store.is_s3 else f"{LOCAL_SCHEME}://{store.base.rstrip('/')}"
    view = (
        ReadOnlyFileSystem(store.fs, "s3", None)
        if store.is_s3
        else ReadOnlyFileSystem(store.fs, LOCAL_SCHEME, store.base)
    )
    con.register_filesystem(view)
    con.execute(f"SET allowed_directories = [{_quote(root + '/')}]")
    con.execute(f"SET allowed_configs = [{', '.join(_quote(name) for name in TUNABLE)}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return root


def connect(
    store: Store, *, read_only: bool = False, files: Mapping[str, Sequence[str]] | None = None
) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per store table; ``read_only``: see the module.

    ``files``: the files of each table its view reads (what the markers list:
    :meth:`spade_core.store.reader.RunReader.connect`); None: every file of the table."""
    con = duckdb.connect()
    base = store.base.rstrip("/")
    root = _read_only_root(con, store) if read_only else base
    if store.is_s3 and not read_only:
        con.register_filesystem(store.fs)

    def source(table: str) -> str | None:
        """The ``read_parquet`` argument of a table's files; None when it has none."""
        if files is None:
            return _quote(root + store.table_glob(table)[len(base) :]) if store.has_table(table) else None
        paths = [root + path[len(base) :] for path in files.get(table, ())]
        return "[" + ", ".join(_quote(path) for path in paths) + "]" if paths else None

    for table in TABLES:
        if (found := source(table)) is not None:
            # Unioned by name with an empty table of the schema, so that a column no file has yet (one added
            # after the store's files were written) reads as nulls of its type instead of failing to bind.
            con.register(f"_{table}_schema", SCHEMAS[table].empty_table())
            parquet = (
                f"read_parquet({found}, hive_partitioning=true, union_by_name=true, "
                "hive_types={'run': VARCHAR, 'gen': BIGINT})"
            )
            columns = ", ".join(f'"{name}"' for name in SCHEMAS[table].names)
            con.execute(  # the same column order as the empty view: run_id, gen, then the schema's columns
                f"CREATE VIEW {table} AS SELECT run AS run_id, gen, {columns} FROM "
                f"(SELECT * FROM {parquet} UNION ALL BY NAME SELECT * FROM _{table}_schema)"
            )
        else:
            con.register(f"_{table}_empty", arrow_schema_with_partitions(table).empty_table())
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM _{table}_empty")
    return con


def query(store: Store, sql: str, params: list[object] | None = None, *, read_only: bool = False):  # type: ignore[no-untyped-def]
    """Run ``sql`` (with ``?`` placeholders bound to ``params``) against the catalog; a pandas DataFrame."""
    con = connect(store, read_only=read_only)
    try:
        return con.execute(sql, params or []).df()
    finally:
        con.close()
