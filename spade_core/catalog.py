"""DuckDB catalog over the store: one view per table, local or S3 (docs/DESIGN.md §4).

DuckDB's httpfs extension cannot be installed offline, so S3 is read through the store's s3fs filesystem
registered with ``con.register_filesystem``. Partition columns come from the hive path: ``run_id``
(VARCHAR, also for all-digit run ids) and ``gen`` (BIGINT). A table with no files yet is an empty view with
the right columns, not an error.

**Read-only connections** (``read_only=True``, what ``spade sql`` opens unless ``--allow-write``;
docs/DESIGN.md §12): DuckDB reaches no file but through the store, and the store only through a
:class:`~spade_core.fs.ReadOnlyFileSystem`. ``enable_external_access`` is off, with the store's root as the
one allowed directory (under the read-only filesystem's URL scheme), and ``lock_configuration`` is on, so a
statement cannot turn either back (only the :data:`TUNABLE` settings stay open). ``COPY ... TO``,
``EXPORT DATABASE``, ``ATTACH``, ``INSTALL`` and any file function outside the store are refused by DuckDB;
a write into the store is refused by the filesystem. Tables created in the in-memory database are allowed:
they change nothing outside the process.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from spade_core.fs import ReadOnlyFileSystem
from spade_core.schemas import ADDED_COLUMNS, SCHEMAS, TABLES
from spade_core.store import Store, arrow_schema_with_partitions

LOCAL_SCHEME = "spade-store"
"""The URL scheme a read-only connection reads a local store under (``spade-store:///abs/root/...``)."""


TUNABLE = ("threads", "memory_limit", "preserve_insertion_order")
"""Settings a read-only query may still change: they tune the work, not what the connection can reach."""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _read_only_root(con: duckdb.DuckDBPyConnection, store: Store) -> str:
    """Register the store's read-only view, lock the connection to it; the root as DuckDB now spells it."""
    root = store.base.rstrip("/") if store.is_s3 else f"{LOCAL_SCHEME}://{store.base.rstrip('/')}"
    con.register_filesystem(ReadOnlyFileSystem(store.fs, "s3" if store.is_s3 else LOCAL_SCHEME))
    con.execute(f"SET allowed_directories = [{_quote(root + '/')}]")
    con.execute(f"SET allowed_configs = [{', '.join(_quote(name) for name in TUNABLE)}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return root


def connect(store: Store, *, read_only: bool = False) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per store table; ``read_only``: see the module."""
    con = duckdb.connect()
    glob = store.table_glob
    if read_only:
        root = _read_only_root(con, store)
        base = store.base.rstrip("/")

        def glob(table: str) -> str:
            return root + store.table_glob(table)[len(base) :]

    elif store.is_s3:
        con.register_filesystem(store.fs)
    for table in TABLES:
        if store.has_table(table):
            source = (
                f"read_parquet({_quote(glob(table))}, hive_partitioning=true, union_by_name=true, "
                "hive_types={'run': VARCHAR, 'gen': BIGINT})"
            )
            columns = ", ".join(_columns(con, table, source))
            # the same column order as the empty view: run_id, gen, then the schema's columns
            con.execute(f"CREATE VIEW {table} AS SELECT run AS run_id, gen, {columns} FROM {source}")
        else:
            con.register(f"_{table}_empty", arrow_schema_with_partitions(table).empty_table())
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM _{table}_empty")
    return con


# DuckDB's spelling of the types of ADDED_COLUMNS, for a view over files that all predate one of them.
_DUCKDB_TYPES = {pa.string(): "VARCHAR", pa.list_(pa.string()): "VARCHAR[]"}


def _columns(con: duckdb.DuckDBPyConnection, table: str, source: str) -> list[str]:
    """The view's select list: the schema's columns, a column added after the store's files were written
    (``schemas.ADDED_COLUMNS``) as a typed NULL when no file has it."""
    names = SCHEMAS[table].names
    added = ADDED_COLUMNS.get(table, frozenset())
    present = {row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {source}").fetchall()} if added else set()
    out = []
    for name in names:
        if name in added and name not in present:
            out.append(f'CAST(NULL AS {_DUCKDB_TYPES[SCHEMAS[table].field(name).type]}) AS "{name}"')
        else:
            out.append(f'"{name}"')
    return out


def query(store: Store, sql: str, params: list[object] | None = None, *, read_only: bool = False):  # type: ignore[no-untyped-def]
    """Run ``sql`` (with ``?`` placeholders bound to ``params``) against the catalog; a pandas DataFrame."""
    con = connect(store, read_only=read_only)
    try:
        return con.execute(sql, params or []).df()
    finally:
        con.close()
