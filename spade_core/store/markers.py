"""Stage markers: the single authority on what is complete (docs/DESIGN.md §10).

Every stage (or shard of a stage) that finishes writes a small JSON marker LAST, after its tables:

    {root}/runs/{run_id}/gen={g}/stages/{stage}-{shard}.json     one shard of a sharded stage
    {root}/runs/{run_id}/gen={g}/stages/{stage}.json             the whole stage

A marker records what the stage wrote (files with their sizes and digests, row counts, a content digest), the
digests of the input markers it depended on, the run's artifact hash, its wall time and its model calls. A
stage is reused (not run again, no model loaded) when its marker exists with the same input digests and
artifact hash and every file it lists is in the store with its recorded size and digest
(:mod:`spade_core.pipeline.verify`); anything else runs the stage again, which overwrites its own
deterministic files. A marker file that does not read as the marker of its place (:func:`parse_marker`)
counts as damaged, never as an error: it is listed as such and its stage runs again.

Markers are store content: the pipeline writes them, and readers outside it (the final verdicts of
:mod:`spade_core.store.verdicts`, which the trainer subprocess reads, the report, the timeline, the CLI) take the
files they list, so this module imports nothing of :mod:`spade_core.pipeline`.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import pandas as pd
from pydantic import BaseModel, Field, ValidationError

from spade_core.config import SpadeConfig
from spade_core.hashing import short_hash
from spade_core.store.artifacts import Store, WrittenFile

log = logging.getLogger(__name__)

_MARKER_PLACE = re.compile(r"/gen=(?P<gen>\d+)/stages/(?P<name>[^/]+)\.json$")

# Settings that change how a run executes, not what it writes: free to change between generations.
EXECUTION_ONLY = (
    "task_runner",
    "dask_address",
    "retries",
    "retry_delay_s",
    "generation_devices",
    "training_devices",
    "generator_during_update",
    "engine_replicas",
    "engine_address",
)


class StageRecord(BaseModel):
    """What one execution of a stage (or shard) wrote; the marker's content and the Prefect task result."""

    stage: str
    shard: int | None = None  # None: the whole stage
    run_id: str
    gen: int
    artifact_hash: str
    digest: str
    inputs: dict[str, str] = Field(default_factory=dict)
    files: dict[str, list[str]] = Field(default_factory=dict)
    # Each listed file's size in bytes and the digest of its bytes: reuse checks both (sizes against one
    # listing of each directory; empty in markers older than them).
    sizes: dict[str, int] = Field(default_factory=dict)
    file_digests: dict[str, str] = Field(default_factory=dict)
    rows: dict[str, int] = Field(default_factory=dict)
    seconds: float = 0.0
    model_calls: int = 0
    model_requests: int = 0
    info: dict[str, Any] = Field(default_factory=dict)
    started_at: str = ""  # when the execution that wrote the marker began (UTC, milliseconds)
    finished_at: str = ""
    policy_step: int | None = None  # the checkpoint a model-calling stage used (None: no model)
    # How this execution got the record: ran the stage, or reused the store's complete artifact.
    status: Literal["ran", "reused"] = "ran"

    @property
    def name(self) -> str:
        return self.stage if self.shard is None else f"{self.stage}-{self.shard}"


def digests(*records: StageRecord) -> dict[str, str]:
    """The input part of a marker: ``{gen{g}/stage[-shard]: digest}`` of the input records."""
    return {f"gen{r.gen}/{r.name}": r.digest for r in records}


def combined_digest(parts: Any) -> str:
    """A stable 16-hex digest of any JSON-able value (sorted keys).

    >>> combined_digest({"b": 1, "a": [2]}) == combined_digest({"a": [2], "b": 1})
    True
    """
    return short_hash(json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str))


def artifact_hash(cfg: SpadeConfig) -> str:
    """Hash of the settings that decide what a run writes (no store location, no execution-only settings)."""
    return combined_digest(bound_settings(cfg))


def bound_settings(cfg: SpadeConfig) -> dict[str, Any]:
    """The config as a dict without the store location and the execution-only settings."""
    data = cfg.model_dump(mode="json")
    data.pop("store", None)
    for key in EXECUTION_ONLY:
        data.get("orchestration", {}).pop(key, None)
    return data


def stages_dir(store: Store, run_id: str, gen: int) -> str:
    return f"{store.run_dir(run_id)}/gen={gen}/stages"


def marker_path(store: Store, run_id: str, gen: int, stage: str, shard: int | None = None) -> str:
    name = stage if shard is None else f"{stage}-{shard}"
    return f"{stages_dir(store, run_id, gen)}/{name}.json"


def write_marker(store: Store, record: StageRecord) -> str:
    """Write the record as its stage's completion marker (atomically; the stage's files come first)."""
    path = marker_path(store, record.run_id, record.gen, record.stage, record.shard)
    stored = record.model_copy(update={"status": "ran"})
    store.write_text(path, stored.model_dump_json(indent=1))
    return path


@dataclass(frozen=True)
class BadMarker:
    """A marker file that is not a marker of its place: not JSON, not a :class:`StageRecord`, or a record of
    another run, generation or stage. It counts as damaged: its stage is not done and runs again."""

    gen: int
    name: str  # the stage instance with its shard, from the file name: ``rollout-s0-1``
    path: str
    reason: str

    def line(self) -> str:
        return f"gen {self.gen} {self.name}: {self.path} {self.reason}"


@dataclass
class MarkerScan:
    """Every marker file of a run: the valid ones, ``{gen: {stage[-shard]: record}}``, and the damaged ones."""

    records: dict[int, dict[str, StageRecord]] = field(default_factory=dict)
    bad: list[BadMarker] = field(default_factory=list)


def parse_marker(data: bytes, run_id: str, gen: int, name: str) -> StageRecord:
    """The record in a marker file's bytes, checked against the place it was found at.

    Raises:
        ValueError: the bytes are not a marker, or the marker names another run, generation or stage
            (one line).
    """
    try:
        record = StageRecord.model_validate_json(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error.get("loc", ())) or "the file"
        raise ValueError(f"is not a valid stage marker ({where}: {error.get('msg', 'invalid')})") from None
    found = (record.run_id, record.gen, record.name)
    if found != (run_id, gen, name):
        raise ValueError(f"is the marker of run {found[0]!r} gen {found[1]} {found[2]}, not of its place")
    return record


def read_marker(store: Store, run_id: str, gen: int, stage: str, shard: int | None = None) -> StageRecord | None:
    """The marker of one stage (or shard), or None when it has not finished. A damaged marker
    (:class:`BadMarker`) counts as not finished: one logged line says so, and the stage runs again."""
    path = marker_path(store, run_id, gen, stage, shard)
    name = stage if shard is None else f"{stage}-{shard}"
    try:
        return parse_marker(store.read_bytes(path), run_id, gen, name)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        log.warning("run %s gen %d %s: %s %s: the stage counts as not done", run_id, gen, name, path, exc)
        return None


def listed_files(
    store: Store, run_id: str, gen: int, stage: str, table: str, *, record: StageRecord | None = None
) -> list[str] | None:
    """The files of ``table`` that ``stage``'s marker (``record``, else the one in the store) lists, under
    this store's root; None when the stage has no marker. Readers take these, never a glob: files other
    commands wrote into the partition stay out, and a listed file that is gone is an error, not missing rows."""
    record = record or read_marker(store, run_id, gen, stage)
    if record is None:
        return None
    return [store.confine(path) for path in record.files.get(table, [])]


def read_listed(
    store: Store, run_id: str, gen: int, stages: Sequence[str], table: str, columns: Sequence[str] | None = None
) -> pd.DataFrame:
    """The rows of ``table`` in the files the markers of ``stages`` (of generation ``gen``) list; a stage
    without a marker contributes nothing (it has not finished). The trainer subprocess reads its step's
    inputs this way, as the pipeline's context does."""
    files = [path for stage in stages for path in listed_files(store, run_id, gen, stage, table) or []]
    return store.read_files(table, files, columns=columns)


def list_markers(store: Store, run_id: str) -> dict[int, dict[str, StageRecord]]:
    """Every valid marker of a run: ``{gen: {stage[-shard]: record}}`` (:func:`scan_markers` also names the
    damaged ones)."""
    return scan_markers(store, run_id).records


def scan_markers(store: Store, run_id: str) -> MarkerScan:
    """Every marker file of a run, read once: the valid records and the damaged files (:class:`BadMarker`)."""
    scan = MarkerScan()
    for path in store.glob(f"{store.run_dir(run_id)}/gen=*/stages/*.json"):
        place = _MARKER_PLACE.search(path)
        if place is None:  # a directory named gen=x: not a generation the pipeline writes
            continue
        gen, name = int(place["gen"]), place["name"]
        shown = f"s3://{path}" if store.is_s3 and not path.startswith("s3://") else path
        try:
            record = parse_marker(store.fs.cat_file(path), run_id, gen, name)
        except ValueError as exc:
            scan.bad.append(BadMarker(gen, name, shown, str(exc)))
            continue
        scan.records.setdefault(gen, {})[name] = record
    return scan


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def now_precise() -> str:
    """UTC now with milliseconds (a stage's start: the run report's timeline needs sub-second order)."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def write_command_marker(
    store: Store, cfg: SpadeConfig, run_id: str, gen: int, command: str, written: Sequence[WrittenFile]
) -> StageRecord:
    """The marker of a command's own write into a run (``spade eval --run-id`` as ``eval-cli``, ``spade
    rollout --run-id`` as ``rollout-cli``, the demo's ``seed_check``): to every reader its files are the run's
    rows, as a stage's are (docs/DESIGN.md §10); no stage takes it as an input or reuses it. The files an
    earlier write of the same command listed stay listed unless this write replaced them (``spade eval`` of
    one suite, then of another)."""
    earlier = read_marker(store, run_id, gen, command)
    now_written = {w.path for w in written}
    files: dict[str, list[str]] = {}
    sizes: dict[str, int] = {}
    file_digests: dict[str, str] = {}
    rows: dict[str, int] = {}
    for table, paths in (earlier.files if earlier is not None else {}).items():
        for path in [p for p in paths if p not in now_written and store.exists(p)]:
            files.setdefault(table, []).append(path)
            if earlier is not None and path in earlier.file_digests:
                sizes[path], file_digests[path] = earlier.sizes[path], earlier.file_digests[path]
            rows[table] = rows.get(table, 0) + store.parquet_rows(path)
    for w in written:
        files.setdefault(w.table, []).append(w.path)
        sizes[w.path], file_digests[w.path] = w.size, w.digest
        rows[w.table] = rows.get(w.table, 0) + w.rows
    record = StageRecord(
        stage=command,
        run_id=run_id,
        gen=gen,
        artifact_hash=artifact_hash(cfg),
        digest=combined_digest(sorted(file_digests.items())),
        files=files,
        sizes=sizes,
        file_digests=file_digests,
        rows=rows,
        started_at=now_precise(),
        finished_at=now(),
    )
    write_marker(store, record)
    return record
