"""DuckDB catalog over the store: one view per table, local or S3 (docs/DESIGN.md §4).

DuckDB's httpfs extension cannot be installed offline, so S3 is read through the store's s3fs filesystem
registered with ``con.register_filesystem``. Partition columns come from the hive path: ``run_id``
(VARCHAR, also for all-digit run ids) and ``gen`` (BIGINT). A table with no files yet is an empty view with
the right columns, not an error.
"""

from __future__ import annotations

import duckdb

from spade_core.schemas import SCHEMAS, TABLES
from spade_core.store import Store, arrow_schema_with_partitions


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(store: Store) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with one view per store table."""
    con = duckdb.connect()
    if store.is_s3:
        con.register_filesystem(store.fs)
    for table in TABLES:
        if store.has_table(table):
            columns = ", ".join(f'"{name}"' for name in SCHEMAS[table].names)
            con.execute(  # the same column order as the empty view: run_id, gen, then the schema's columns
                f"CREATE VIEW {table} AS SELECT run AS run_id, gen, {columns} FROM read_parquet("
                f"{_quote(store.table_glob(table))}, hive_partitioning=true, union_by_name=true, "
                "hive_types={'run': VARCHAR, 'gen': BIGINT})"
            )
        else:
            con.register(f"_{table}_empty", arrow_schema_with_partitions(table).empty_table())
            con.execute(f"CREATE VIEW {table} AS SELECT * FROM _{table}_empty")
    return con


def query(store: Store, sql: str, params: list[object] | None = None):  # type: ignore[no-untyped-def]
    """Run ``sql`` (with ``?`` placeholders bound to ``params``) against the catalog; a pandas DataFrame."""
    con = connect(store)
    try:
        return con.execute(sql, params or []).df()
    finally:
        con.close()
