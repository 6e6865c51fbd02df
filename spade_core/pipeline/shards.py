"""Deterministic shards: which rows of a stage's input a shard handles.

A sharded stage (validation, rollouts) runs one execution per shard; each writes its own files
(``{stage}-{shard}.parquet``), so a rerun shard replaces exactly its own output.
"""

from __future__ import annotations

import math

import pandas as pd


def shard_count(items: int, size: int) -> int:
    """Shards of ``size`` items for ``items`` items; at least one (an empty stage still writes its file).

    >>> shard_count(0, 16), shard_count(16, 16), shard_count(17, 16)
    (1, 1, 2)
    """
    return max(1, math.ceil(items / size))


def shard_rows(frame: pd.DataFrame, shard: int, size: int) -> pd.DataFrame:
    """Rows ``[shard * size, (shard + 1) * size)`` of ``frame``, re-indexed from 0."""
    return frame.iloc[shard * size : (shard + 1) * size].reset_index(drop=True)
