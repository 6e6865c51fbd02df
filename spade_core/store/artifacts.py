# Over 400 lines: one class, Store: every file operation of the store behind one I/O count.
"""The artifact store: Parquet tables in a hive layout on a local dir or S3 (docs/DESIGN.md §4).

Layout under the root::

    tables/{table}/run={run_id}/gen={g}/{stage}-{shard}.parquet
    checkpoints/run={run_id}/step={s}/
    runs/{run_id}/config.yaml

File names are deterministic per (table, run, gen, stage, shard), so a retried stage replaces its own
file and never adds a duplicate. Writes are atomic: a hidden temp file renamed into place locally, a
single object PUT on S3 (an object becomes visible only when its upload completes). Credentials come
from the standard AWS variables and are never written anywhere.

Every file operation of a :class:`Store` is counted on that store (:meth:`Store.io_counts`: ``read``, a
file read; ``list``, a listing or existence check; ``write``, a file written), so a test or a benchmark
counts the reads of the work it gave one store.
"""

from __future__ import annotations

import collections
import contextlib
import io
import os
import re
import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from spade_core.faults import s3_refusal
from spade_core.hashing import short_hash, stream_hash
from spade_core.store.digests import Digests
from spade_core.store.fs import s3_filesystem, strict_glob
from spade_core.store.schemas import SCHEMAS, TABLES, to_arrow

IO_KINDS = ("read", "list", "write")
PARTITION_COLUMNS = ("run_id", "gen")


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_SHARD = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.]*$")  # no '-': the last '-' of a file name ends the stage


@dataclass(frozen=True)
class WrittenFile:
    """One Parquet file written to the store: its table, path, row count, size and a digest of its bytes.

    ``digest`` is the first 16 hex of the sha256 of the file's bytes and ``size`` their count (what a stage
    marker records, so that reuse can check the file is still there and whole).
    """

    table: str
    path: str
    rows: int
    digest: str
    size: int = 0


class StoreError(ValueError):
    """A bad store URL, name or path; the message names the offending value."""


NAME_LIMIT = 128  # characters of a run id or stage name: a path part, well below a file system's 255 bytes


def _check_name(kind: str, value: str) -> str:
    """``value`` when it is a valid run id or stage name (one path part of the store), else a StoreError.

    >>> _check_name("run id", "r" * 300)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    spade_core.store.artifacts.StoreError: run id 'rrrrrrrr...'… (300 characters) is longer than 128 characters
    """
    if isinstance(value, str) and len(value) > NAME_LIMIT:
        raise StoreError(f"{kind} {value[:24]!r}… ({len(value)} characters) is longer than {NAME_LIMIT} characters")
    if not isinstance(value, str) or not _NAME.match(value):
        raise StoreError(f"{kind} {value!r} must match [A-Za-z0-9][A-Za-z0-9_.-]* (no '/', '=' or spaces)")
    return value


def _check_shard(shard: int | str) -> str:
    text = str(shard)
    if isinstance(shard, bool) or not _SHARD.match(text):
        raise StoreError(f"shard {shard!r} must be an integer >= 0 or match [A-Za-z0-9][A-Za-z0-9_.]* (no '-')")
    return text


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
    _io: collections.Counter[str] = field(init=False, repr=False, compare=False, default_factory=collections.Counter)
    _io_lock: threading.Lock = field(init=False, repr=False, compare=False, default_factory=threading.Lock)
    # the digests and row counts of files this store has read, by (path, size, stamp): each read once
    digests: Digests = field(init=False, repr=False, compare=False, default_factory=Digests)

    def _count(self, kind: str, n: int = 1) -> None:
        with self._io_lock:
            self._io[kind] += n

    def io_counts(self, reset: bool = False) -> dict[str, int]:
        """The file operations of this store since it was made (or last reset):
        ``{"read": .., "list": .., "write": ..}``; ``reset`` zeroes them after reading."""
        with self._io_lock:
            counts = {kind: self._io[kind] for kind in IO_KINDS}
            if reset:
                self._io.clear()
            return counts

    def __getstate__(self) -> dict[str, object]:  # a store travels to worker processes: its lock does not
        state = dict(self.__dict__)
        state.pop("_io_lock")
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._io_lock = threading.Lock()

    def __post_init__(self) -> None:
        root = str(self.root).strip()
        if not root:
            raise StoreError("store root is empty; use a local path or s3://bucket/prefix")
        if root.startswith("s3://"):
            bucket_path = root[len("s3://") :].strip("/")
            if not bucket_path:
                raise StoreError(f"store root {root!r} names no bucket; use s3://bucket/prefix")
            self.fs = s3_filesystem(self.endpoint_url)
            self.is_s3 = True
            self.base = "s3://" + bucket_path
            bucket = bucket_path.split("/")[0]
            try:
                self._count("list")
                self.fs.ls(bucket)
            except FileNotFoundError:
                raise StoreError(f"store root {root!r}: bucket {bucket!r} does not exist") from None
            except Exception as exc:  # botocore raises many kinds; report the first line
                said = s3_refusal(exc) or (str(exc).splitlines() or [type(exc).__name__])[0]
                raise StoreError(f"store root {root!r} is not reachable: {said}") from None
        elif "://" in root and not root.startswith("file://"):
            raise StoreError(f"store root {root!r}: only local paths and s3:// URLs are supported")
        else:
            path = Path(root.removeprefix("file://")).expanduser().resolve()
            if path.exists() and not path.is_dir():
                raise StoreError(f"store root {root!r} exists and is not a directory")
            above = next((p for p in path.parents if p.exists()), None)
            if not path.exists() and above is not None and not above.is_dir():
                raise StoreError(f"store root {root!r} lies under {str(above)!r}, which is a file, not a directory")
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
        name = f"{_check_name('stage', stage)}-{_check_shard(shard)}.parquet"
        return f"{self.partition_dir(table, run_id, gen)}/{name}"

    def table_glob(self, table: str) -> str:
        return self.path("tables", table, "**", "*.parquet")

    def checkpoint_dir(self, run_id: str, step: int) -> str:
        """The directory of checkpoint ``step``: the weights after ``step`` optimizer steps of the run."""
        return self.path("checkpoints", f"run={_check_name('run id', run_id)}", f"step={_check_gen(step)}")

    def run_dir(self, run_id: str) -> str:
        return self.path("runs", _check_name("run id", run_id))

    def report_dir(self, run_id: str) -> str:
        """Where ``spade report`` writes a run's report inside the store (``reports/{run_id}``)."""
        return self.path("reports", _check_name("run id", run_id))

    def tensorboard_dir(self, run_id: str, step: int) -> str:
        """Where the TensorBoard event files of global step ``step``'s update go (``runs/{run_id}/tensorboard``)."""
        return f"{self.run_dir(run_id)}/tensorboard/step={_check_gen(step)}"

    def config_path(self, run_id: str) -> str:
        """Where the run's resolved config is stored (``runs/{run_id}/config.yaml``)."""
        return f"{self.run_dir(run_id)}/config.yaml"

    def locate(self, path: str) -> str:
        """A path a marker recorded, under this store's root: a store that was copied or moved keeps its
        layout (``tables/``, ``checkpoints/``, ``runs/`` under the root), not its absolute paths.

        >>> Store("/tmp/new").locate("/data/old/tables/pool/run=r/gen=1/pool-0.parquet")
        '/tmp/new/tables/pool/run=r/gen=1/pool-0.parquet'
        """
        if path.startswith(self.base.rstrip("/") + "/"):
            return path
        for top in ("tables", "checkpoints", "runs"):
            if f"/{top}/" in path:
                return self.path(top, path.rsplit(f"/{top}/", 1)[1])
        return path

    def confine(self, path: str) -> str:
        """A path a marker recorded, located under this store's root (:meth:`locate`) and confined to it.

        Raises:
            StoreError: the path has a ``.`` or ``..`` part, lies outside ``tables/``, ``checkpoints/`` and
                ``runs/`` under the root, or (a local store) goes through a symbolic link.

        >>> Store("/tmp/s").confine("/tmp/s/tables/pool/../../../etc/hostname")
        Traceback (most recent call last):
        ...
        spade_core.store.artifacts.StoreError: '/tmp/s/tables/pool/../../../etc/hostname' is outside the store /tmp/s
        """
        located = self.locate(path)
        root = self.base.rstrip("/") + "/"
        parts = located[len(root) :].split("/") if located.startswith(root) else []
        if not parts or parts[0] not in ("tables", "checkpoints", "runs") or {"", ".", ".."} & set(parts):
            raise StoreError(f"{path!r} is outside the store {self.base}")
        if not self.is_s3 and os.path.realpath(located) != located:
            raise StoreError(f"{path!r} goes through a symbolic link out of the store's own files")
        return located

    # -- bytes --------------------------------------------------------------------------------------
    def _writable(self, path: str) -> str:
        """``path``, once it is known not to lead through a symbolic link out of this local store (checked
        before anything is written or removed there; S3 has no links).

        Raises:
            StoreError: a directory on the way is a symbolic link.
        """
        if self.is_s3:
            return path
        absolute = os.path.abspath(path)
        if os.path.realpath(absolute) != absolute and absolute.startswith(self.base.rstrip("/") + "/"):
            chain = [Path(absolute), *Path(absolute).parents]
            link = next((str(p) for p in chain if p.is_symlink()), absolute)
            raise StoreError(
                f"refusing to write {path!r}: {link!r} is a symbolic link to {os.path.realpath(link)!r}, outside the "
                f"store's own files; replace the link with a directory (or move the data into the store)"
            )
        return path

    def links_out(self) -> list[str]:
        """The symbolic links among the store's tables (directories or files; a local store): what a reader
        of this store does not read, since they lead out of its own files."""
        if self.is_s3:
            return []
        found = []
        for top, dirs, files in os.walk(self.path("tables"), followlinks=False):
            found += [os.path.join(top, name) for name in [*dirs, *files] if os.path.islink(os.path.join(top, name))]
        return sorted(found)

    def write_bytes(self, path: str, data: bytes) -> None:
        """Atomically write ``data`` to ``path`` (temp + rename locally; one PUT on S3), never through a
        symbolic link (:meth:`_writable`)."""
        self._writable(path)
        self._count("write")
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
        except OSError as exc:  # name the store's path, not the hidden temp file (or none, from write())
            raise type(exc)(exc.errno, exc.strerror, path) from exc
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)

    def read_bytes(self, path: str) -> bytes:
        self._count("read")
        return self.fs.cat_file(path)

    def file_digest(self, path: str) -> str:
        """The first 16 hex of the sha256 of a file's bytes (:class:`WrittenFile`'s ``digest``), read in chunks."""
        self._count("read")
        with self.fs.open(path, "rb") as fh:
            return stream_hash(fh)

    def parquet_rows(self, path: str) -> int:
        """The rows of a Parquet file, from its footer alone."""
        self._count("read")
        with self.fs.open(path, "rb") as fh:
            return int(pq.ParquetFile(fh).metadata.num_rows)

    def exists(self, path: str) -> bool:
        self._count("list")
        return self.fs.exists(path)

    def write_text(self, path: str, text: str) -> None:
        self.write_bytes(path, text.encode())

    # -- directories ----------------------------------------------------------------------------------
    def upload_files(self, local_dir: str | Path, remote_dir: str, names: Iterable[str]) -> None:
        """Stream the files ``names`` (relative POSIX paths) from ``local_dir`` into ``remote_dir``.

        The files go through fsspec from disk to the store (multipart uploads on S3), never whole into memory.
        Each file is written on its own: a reader must not use the directory before a marker written last.
        """
        names = list(names)
        if not names:
            return
        local = [str(Path(local_dir, name)) for name in names]
        remote = [self._writable(f"{remote_dir.rstrip('/')}/{name}") for name in names]
        if not self.is_s3:
            for path in {os.path.dirname(r) for r in remote}:
                os.makedirs(path, exist_ok=True)
        self._count("write", len(names))
        self.fs.put(local, remote)

    def download_files(self, remote_dir: str, local_dir: str | Path, names: Iterable[str]) -> None:
        """Stream the files ``names`` (relative POSIX paths) from ``remote_dir`` in the store into ``local_dir``."""
        names = list(names)
        if not names:
            return
        local = [Path(local_dir, name) for name in names]
        for path in {p.parent for p in local}:
            path.mkdir(parents=True, exist_ok=True)
        self._count("read", len(names))
        self.fs.get([f"{remote_dir.rstrip('/')}/{name}" for name in names], [str(p) for p in local])

    def remove_file(self, path: str) -> None:
        """Delete one file; a missing file is no error."""
        self._writable(path)
        self._count("write")
        with contextlib.suppress(FileNotFoundError):
            self.fs.rm_file(path)

    def remove_dir(self, path: str) -> None:
        """Delete the directory ``path`` and everything under it; a missing directory is no error."""
        self._writable(path)
        self._count("list")
        if self.fs.exists(path):
            self._count("write")
            self.fs.rm(path, recursive=True)

    # -- tables -------------------------------------------------------------------------------------
    def write_table(
        self, table: str, frame: pd.DataFrame, *, run_id: str, gen: int, stage: str, shard: int | str = 0
    ) -> WrittenFile:
        """Validate ``frame`` against the table's schema and write it as one Parquet file, atomically.

        An empty frame (no rows) is written as a file holding only the schema, so that "the file exists"
        never means "skipped". Writing the same (table, run, gen, stage, shard) again replaces the file.

        Returns:
            The file written, with its row count and the digest of its bytes.

        Raises:
            StoreError: an unknown table or a bad run id, generation, stage or shard.
            SchemaError: a missing, extra or mistyped column, or a null in a required column.
        """
        path = self.table_path(table, run_id, gen, stage, shard)
        arrow = SCHEMAS[table].empty_table() if frame.empty else to_arrow(table, frame)
        sink = io.BytesIO()
        pq.write_table(arrow, sink, compression="zstd")
        data = sink.getvalue()
        self.write_bytes(path, data)
        return WrittenFile(table, path, arrow.num_rows, short_hash(data), len(data))

    def table_files(
        self,
        table: str,
        run_id: str | None = None,
        gen: int | None = None,
        *,
        stages: Iterable[str] | None = None,
    ) -> list[str]:
        """The Parquet files of a table, sorted; optionally of one run, one generation and some stages only.

        Args:
            table: The table name.
            run_id: Only this run (None: every run).
            gen: Only this generation (None: every generation).
            stages: Only files named ``{stage}-{shard}.parquet`` for these stages (None: every file), so files
                of other stages and commands in the same partition are never picked up.

        Raises:
            StoreError: an unknown table or a bad run id, generation or stage name.
        """
        if table not in SCHEMAS:
            raise StoreError(f"unknown table {table!r}; tables: {', '.join(TABLES)}")
        run = f"run={_check_name('run id', run_id)}" if run_id is not None else "run=*"
        g = f"gen={_check_gen(gen)}" if gen is not None else "gen=*"
        self._count("list")
        files = self.glob(self.path("tables", table, run, g, "*.parquet"))
        files = [f"s3://{f}" if self.is_s3 and not f.startswith("s3://") else f for f in files]
        if stages is None:
            return files
        wanted = _stage_file_pattern(stages)
        return [f for f in files if wanted.match(f.rsplit("/", 1)[-1])]

    def read_table(
        self,
        table: str,
        run_id: str | None = None,
        gen: int | None = None,
        *,
        stages: Iterable[str] | None = None,
        columns: Iterable[str] | None = None,
    ) -> pd.DataFrame:
        """Read a table with its ``run_id`` and ``gen`` columns added (from the partition path).

        Args:
            table: The table name.
            run_id: Only this run (None: every run).
            gen: Only this generation (None: every generation).
            stages: Only the files of these stages (see :meth:`table_files`).
            columns: Only these columns of the table (``run_id`` and ``gen`` are always there), in this order.

        Returns:
            The rows, or an empty frame with the right columns and types when no file matches.

        Raises:
            StoreError: an unknown table, column or stage, or a bad run id or generation.
        """
        return self.read_files(table, self.table_files(table, run_id, gen, stages=stages), columns=columns)

    def read_files(
        self, table: str, files: Iterable[str], *, columns: Iterable[str] | None = None, keys: bool = True
    ) -> pd.DataFrame:
        """Read the given Parquet files of ``table`` (paths under ``tables/{table}/run=.../gen=...``) with their
        ``run_id`` and ``gen`` columns added from the partition path (``keys=False``: the table's columns
        alone); see :meth:`read_table`.

        Raises:
            StoreError: an unknown table or column.
            FileNotFoundError: a listed file is not in the store.
        """
        selected = _selected_columns(table, columns)
        schema = SCHEMAS[table] if selected is None else pa.schema([SCHEMAS[table].field(c) for c in selected])
        frames = []
        for f in files:
            parts = dict(p.split("=", 1) for p in f.split("/") if p.startswith(("run=", "gen=")))
            self._count("read")
            with self.fs.open(f, "rb") as fh:
                arrow = pq.read_table(fh, schema=SCHEMAS[table], columns=selected)
            frame = arrow.to_pandas(maps_as_pydicts="strict")
            if keys:
                frame.insert(0, "gen", int(parts["gen"]))
                frame.insert(0, "run_id", parts["run"])
            frames.append(frame)
        if not frames:
            empty = schema.empty_table().to_pandas()
            if keys:
                empty.insert(0, "gen", pd.Series(dtype="int64"))
                empty.insert(0, "run_id", pd.Series(dtype="object"))
            return empty
        return pd.concat(frames, ignore_index=True)

    def file_stamps(self, directory: str) -> dict[str, tuple[int, str]]:
        """``{path: (size, stamp)}`` of the files directly in ``directory`` (one fresh listing, never a cached
        one; a missing directory lists nothing); the stamp changes when the file is rewritten (the local
        mtime, the S3 ETag; empty when the listing has neither). Paths are spelt as the store writes them
        (``s3://`` on S3)."""
        self._count("list")
        try:
            entries = self.fs.ls(directory, detail=True, refresh=True)
        except FileNotFoundError:
            return {}
        out: dict[str, tuple[int, str]] = {}
        for entry in entries:
            if entry.get("type") == "directory":
                continue
            name = str(entry["name"])
            stamp = str(entry.get("ETag") or entry.get("mtime") or "")
            key = f"s3://{name}" if self.is_s3 and not name.startswith("s3://") else name
            out[key] = (int(entry.get("size") or 0), stamp)
        return out

    def has_table(self, table: str) -> bool:
        self._count("list")
        return bool(self.glob(self.path("tables", table, "run=*", "gen=*", "*.parquet")))

    def glob(self, pattern: str, *, dirs: bool = False) -> list[str]:
        """The files (``dirs``: the directories) matching ``pattern``, sorted; a listing that fails raises
        (:func:`fs.strict_glob`), so no reader answers from part of the store."""
        return strict_glob(self.fs, pattern, dirs=dirs)


def _stage_file_pattern(stages: Iterable[str]) -> re.Pattern[str]:
    """Matches the file names ``{stage}-{shard}.parquet`` of the given stages (a shard has no '-')."""
    if isinstance(stages, str):
        raise StoreError(f"stages {stages!r} must be a collection of stage names, not one string")
    names = [_check_name("stage", stage) for stage in stages]
    alternatives = "|".join(re.escape(name) for name in names) or "(?!)"
    return re.compile(rf"^(?:{alternatives})-[A-Za-z0-9][A-Za-z0-9_.]*\.parquet$")


def _selected_columns(table: str, columns: Iterable[str] | None) -> list[str] | None:
    """The file columns to read (None: all); the partition columns are dropped, an unknown one is an error."""
    if table not in SCHEMAS:
        raise StoreError(f"unknown table {table!r}; tables: {', '.join(TABLES)}")
    if columns is None:
        return None
    if isinstance(columns, str):
        raise StoreError(f"columns {columns!r} must be a collection of column names, not one string")
    names = SCHEMAS[table].names
    selected = [c for c in dict.fromkeys(columns) if c not in PARTITION_COLUMNS]
    unknown = [c for c in selected if c not in names]
    if unknown:
        raise StoreError(f"table {table!r} has no column(s) {unknown}; columns: {', '.join(names)}")
    return selected


def arrow_schema_with_partitions(table: str) -> pa.Schema:
    """The schema a reader sees: the partition columns ``run_id`` and ``gen`` then the file columns."""
    schema = SCHEMAS[table]
    return pa.schema([pa.field("run_id", pa.string()), pa.field("gen", pa.int64()), *schema])
