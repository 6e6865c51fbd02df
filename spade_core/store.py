"""The artifact store: Parquet tables in a hive layout on a local dir or S3 (DESIGN.md §4).

Layout under the root::

    tables/{table}/run={run_id}/gen={g}/{stage}-{shard}.parquet
    checkpoints/run={run_id}/gen={g}/
    runs/{run_id}/config.yaml
    prefect-results/

File names are deterministic per (table, run, gen, stage, shard), so a retried stage replaces its own
file and never adds a duplicate. Writes are atomic: a hidden temp file renamed into place locally, a
single object PUT on S3 (an object becomes visible only when its upload completes). Credentials come
from the standard AWS variables and are never written anywhere.
"""

from __future__ import annotations

import io
import os
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from spade_core.schemas import SCHEMAS, TABLES, to_arrow

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class StoreError(ValueError):
    """A bad store URL, name or path; the message names the offending value."""


def _check_name(kind: str, value: str) -> str:
    if not isinstance(value, str) or not _NAME.match(value):
        raise StoreError(f"{kind} {value!r} must match [A-Za-z0-9][A-Za-z0-9_.-]* (no '/', '=' or spaces)")
    return value


def _check_gen(gen: int) -> int:
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 0:
        raise StoreError(f"generation {gen!r} must be an integer >= 0")
    return gen


@dataclass
class Store:
    """Parquet artifact store rooted at a local path or an ``s3://bucket/prefix`` URL."""

    root: str = "./spade-store"
    endpoint_url: str | None = None
    fs: fsspec.AbstractFileSystem = field(init=False, repr=False)
    is_s3: bool = field(init=False)
    base: str = field(init=False)

    def __post_init__(self) -> None:
        root = str(self.root).strip()
        if not root:
            raise StoreError("store root is empty; use a local path or s3://bucket/prefix")
        if root.startswith("s3://"):
            import s3fs

            bucket_path = root[len("s3://") :].strip("/")
            if not bucket_path:
                raise StoreError(f"store root {root!r} names no bucket; use s3://bucket/prefix")
            endpoint = self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None
            self.fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True)
            self.is_s3 = True
            self.base = "s3://" + bucket_path
            bucket = bucket_path.split("/")[0]
            try:
                self.fs.ls(bucket)
            except FileNotFoundError:
                raise StoreError(f"store root {root!r}: bucket {bucket!r} does not exist") from None
            except Exception as exc:  # botocore raises many kinds; report the first line
                raise StoreError(f"store root {root!r} is not reachable: {str(exc).splitlines()[0]}") from None
        elif "://" in root and not root.startswith("file://"):
            raise StoreError(f"store root {root!r}: only local paths and s3:// URLs are supported")
        else:
            path = Path(root.removeprefix("file://")).expanduser().resolve()
            if path.exists() and not path.is_dir():
                raise StoreError(f"store root {root!r} exists and is not a directory")
            self.fs = fsspec.filesystem("file")
            self.is_s3 = False
            self.base = str(path)

    @classmethod
    def from_config(cls, store_cfg) -> Store:  # type: ignore[no-untyped-def]
        return cls(root=store_cfg.root, endpoint_url=store_cfg.endpoint_url)

    # -- paths --------------------------------------------------------------------------------------
    def path(self, *parts: str) -> str:
        return "/".join([self.base.rstrip("/"), *parts])

    def partition_dir(self, table: str, run_id: str, gen: int) -> str:
        if table not in SCHEMAS:
            raise StoreError(f"unknown table {table!r}; tables: {', '.join(TABLES)}")
        return self.path("tables", table, f"run={_check_name('run id', run_id)}", f"gen={_check_gen(gen)}")

    def table_path(self, table: str, run_id: str, gen: int, stage: str, shard: int | str = 0) -> str:
        name = f"{_check_name('stage', stage)}-{_check_name('shard', str(shard))}.parquet"
        return f"{self.partition_dir(table, run_id, gen)}/{name}"

    def table_glob(self, table: str) -> str:
        return self.path("tables", table, "**", "*.parquet")

    def checkpoint_dir(self, run_id: str, gen: int) -> str:
        return self.path("checkpoints", f"run={_check_name('run id', run_id)}", f"gen={_check_gen(gen)}")

    def run_dir(self, run_id: str) -> str:
        return self.path("runs", _check_name("run id", run_id))

    def results_dir(self) -> str:
        return self.path("prefect-results")

    # -- bytes --------------------------------------------------------------------------------------
    def write_bytes(self, path: str, data: bytes) -> None:
        """Atomically write ``data`` to ``path`` (temp + rename locally; one PUT on S3)."""
        if self.is_s3:
            self.fs.pipe_file(path, data)
            return
        directory = os.path.dirname(path)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".{os.path.basename(path)}.tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def read_bytes(self, path: str) -> bytes:
        return self.fs.cat_file(path)

    def exists(self, path: str) -> bool:
        return self.fs.exists(path)

    # -- tables -------------------------------------------------------------------------------------
    def write_table(
        self, table: str, frame: pd.DataFrame, *, run_id: str, gen: int, stage: str, shard: int | str = 0
    ) -> str:
        """Validate ``frame`` against the table's schema and write it as one Parquet file, atomically.

        Writing the same (table, run, gen, stage, shard) again replaces the file.
        """
        path = self.table_path(table, run_id, gen, stage, shard)
        arrow = to_arrow(table, frame)
        sink = io.BytesIO()
        pq.write_table(arrow, sink, compression="zstd")
        self.write_bytes(path, sink.getvalue())
        return path

    def table_files(self, table: str, run_id: str | None = None, gen: int | None = None) -> list[str]:
        if table not in SCHEMAS:
            raise StoreError(f"unknown table {table!r}; tables: {', '.join(TABLES)}")
        run = f"run={_check_name('run id', run_id)}" if run_id is not None else "run=*"
        g = f"gen={_check_gen(gen)}" if gen is not None else "gen=*"
        pattern = self.path("tables", table, run, g, "*.parquet")
        files = sorted(self.fs.glob(pattern))
        return [f"s3://{f}" if self.is_s3 and not f.startswith("s3://") else f for f in files]

    def read_table(self, table: str, run_id: str | None = None, gen: int | None = None) -> pd.DataFrame:
        """Read a table (optionally one run / generation) with ``run_id`` and ``gen`` columns added."""
        frames = []
        for f in self.table_files(table, run_id, gen):
            parts = dict(p.split("=", 1) for p in f.split("/") if p.startswith(("run=", "gen=")))
            with self.fs.open(f, "rb") as fh:
                arrow = pq.read_table(fh, schema=SCHEMAS[table])
            frame = arrow.to_pandas(maps_as_pydicts="strict")
            frame.insert(0, "gen", int(parts["gen"]))
            frame.insert(0, "run_id", parts["run"])
            frames.append(frame)
        if not frames:
            empty = SCHEMAS[table].empty_table().to_pandas()
            empty.insert(0, "gen", pd.Series(dtype="int64"))
            empty.insert(0, "run_id", pd.Series(dtype="object"))
            return empty
        return pd.concat(frames, ignore_index=True)

    def has_table(self, table: str) -> bool:
        return bool(self.fs.glob(self.table_glob(table)))

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode())


def arrow_schema_with_partitions(table: str) -> pa.Schema:
    """The schema a reader sees: the partition columns ``run_id`` and ``gen`` then the file columns."""
    schema = SCHEMAS[table]
    return pa.schema([pa.field("run_id", pa.string()), pa.field("gen", pa.int64()), *schema])
