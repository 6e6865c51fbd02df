"""Deterministic shards and digested table writes: the file-level half of resumable stages.

A stage writes each of its outputs as one file per (table, stage, shard); :func:`write_table` writes empty
results too (schema only), so "the file exists" never means "skipped", and returns a digest of the bytes
for the stage's marker (:mod:`spade_core.progress`).
"""

from __future__ import annotations

import hashlib
import io
import math
from dataclasses import dataclass

import pandas as pd
import pyarrow.parquet as pq

from spade_core.schemas import SCHEMAS, to_arrow
from spade_core.store import Store


@dataclass(frozen=True)
class WrittenFile:
    """One Parquet file a stage wrote, with its row count and a digest of its bytes."""

    table: str
    path: str
    rows: int
    digest: str


def write_table(
    store: Store, table: str, frame: pd.DataFrame, run_id: str, gen: int, stage: str, shard: int | str = 0
) -> WrittenFile:
    """:meth:`Store.write_table` that also writes empty frames (schema only) and returns a digest."""
    arrow = SCHEMAS[table].empty_table() if frame.empty else to_arrow(table, frame)
    sink = io.BytesIO()
    pq.write_table(arrow, sink, compression="zstd")
    data = sink.getvalue()
    path = store.table_path(table, run_id, gen, stage, shard)
    store.write_bytes(path, data)
    return WrittenFile(table, path, arrow.num_rows, hashlib.sha256(data).hexdigest()[:16])


def shard_count(items: int, size: int) -> int:
    """Shards of ``size`` items for ``items`` items; at least one (an empty stage still writes its file).

    >>> shard_count(0, 16), shard_count(16, 16), shard_count(17, 16)
    (1, 1, 2)
    """
    return max(1, math.ceil(items / size))


def shard_rows(frame: pd.DataFrame, shard: int, size: int) -> pd.DataFrame:
    """Rows ``[shard * size, (shard + 1) * size)`` of ``frame``, re-indexed from 0."""
    return frame.iloc[shard * size : (shard + 1) * size].reset_index(drop=True)
