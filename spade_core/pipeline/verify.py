"""Whether the files a stage marker lists are still in the store, whole (docs/DESIGN.md §10, "Verified reuse").

A marker is written LAST, so when it exists its files were complete at that moment. What can happen
afterwards is outside the pipeline: a file deleted, truncated, replaced or changed in place (a partial sync,
a disk error, a user's ``rm``), a marker cut short, or a marker edited to name a file elsewhere. The checks:

- :func:`file_problems` (every reuse, ``spade status``, ``spade verify``): each listed file lies inside the
  store (:meth:`~spade_core.store.artifacts.Store.confine`: no ``..``, no path elsewhere, no symbolic link), exists
  with its recorded size (one fresh listing per directory, shared through ``listings``) and has its recorded
  digest (the sha256 of its bytes, read in chunks; ``content=False`` skips it: ``spade verify --quick``). A
  file's digest is computed once per process for one (path, size, stamp): the whole-stage marker of a
  sharded stage lists its shards' files again, and ``spade status`` asks about each generation twice. A
  checkpoint's weights (gigabytes each) are read for their digest by ``spade verify`` alone (``weights``);
  a reuse checks their sizes, and a checkpoint is checked whole before it is loaded
  (:func:`spade_core.store.checkpoints.check_checkpoint`);
- :func:`schema_problems` (``spade verify --deep``): each Parquet file opens with its table's schema;
- :func:`missing_inputs`: markers that a later marker names as its input but that are gone.

:func:`dependants` closes a set of damaged markers over the markers whose input digests name them (the
stages after them, in this generation and the next): ``spade verify --repair`` removes exactly those, so
``spade resume`` redoes exactly what the damage touched.
"""

from __future__ import annotations

import posixpath
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq

from spade_core.store.artifacts import Store, StoreError
from spade_core.store.checkpoints import MARKER as CHECKPOINT_MARKER
from spade_core.store.markers import MarkerScan, StageRecord, scan_markers, stages_dir
from spade_core.store.schemas import SCHEMAS

Listings = dict[str, dict[str, tuple[int, str]]]  # directory -> {path: (size, stamp)}, one listing each


@dataclass(frozen=True)
class Problem:
    """One damaged file of one marker: which generation and marker, which file, and what is wrong."""

    gen: int
    marker: str  # the stage instance, with its shard: ``rollout-s0-1``
    path: str
    reason: str

    def line(self) -> str:
        """One line for a person: ``gen 1 rollout-s0-1: /store/tables/...parquet is missing``."""
        return f"gen {self.gen} {self.marker}: {self.path} {self.reason}"


def listed_files(record: StageRecord) -> list[tuple[str, str]]:
    """``(table, path)`` of every file the marker lists, in a stable order.

    >>> r = StageRecord(stage="s", run_id="r", gen=1, artifact_hash="a", digest="d",
    ...                 files={"b": ["/x/2.parquet"], "a": ["/x/1.parquet"]})
    >>> listed_files(r)
    [('a', '/x/1.parquet'), ('b', '/x/2.parquet')]
    """
    return [(table, path) for table in sorted(record.files) for path in record.files[table]]


def file_problems(
    store: Store, record: StageRecord, listings: Listings | None = None, *, content: bool = True, weights: bool = False
) -> list[Problem]:
    """The files of ``record`` that lie outside the store, are missing, or whose size or digest differs from
    the recorded one (``content=False``: sizes only; a checkpoint's files other than its marker by size unless
    ``weights``).

    A marker written before sizes (digests) were recorded is checked without them. ``listings`` caches one
    listing per directory across calls (pass the same dict for the markers of one run).
    """
    listings = {} if listings is None else listings
    problems = []
    for table, recorded in listed_files(record):
        try:
            path = store.confine(recorded)
        except StoreError as exc:
            problems.append(Problem(record.gen, record.name, recorded, str(exc).removeprefix(f"{recorded!r} ")))
            continue
        directory = posixpath.dirname(path)
        if directory not in listings:
            listings[directory] = store.file_stamps(directory)
        found = listings[directory].get(path)
        expected = record.sizes.get(recorded)
        if found is None:
            problems.append(Problem(record.gen, record.name, path, "is missing"))
        elif expected is not None and found[0] != expected:
            reason = f"has {found[0]} bytes, its marker recorded {expected}"
            problems.append(Problem(record.gen, record.name, path, reason))
        elif (
            content
            and (weights or not _weights(table, path))
            and record.file_digests.get(recorded) not in (None, _digest(store, path, found))
        ):
            problems.append(Problem(record.gen, record.name, path, "has changed since its stage wrote it (digest)"))
    return problems


def _weights(table: str, path: str) -> bool:
    """Whether a listed file is one of a checkpoint's own files (its weights, its optimizer state), not the
    checkpoint's small marker."""
    return table == "checkpoint" and posixpath.basename(path) != CHECKPOINT_MARKER


_DIGESTS: dict[tuple[str, int, str], str] = {}
_DIGESTS_LOCK = threading.Lock()


def _digest(store: Store, path: str, found: tuple[int, str]) -> str:
    """The digest of a file's bytes, once per process for one (path, size, stamp) of a fresh listing."""
    key = (path, *found)
    with _DIGESTS_LOCK:
        known = _DIGESTS.get(key) if found[1] else None
    if known is not None:
        return known
    digest = store.file_digest(path)
    if found[1]:
        with _DIGESTS_LOCK:
            _DIGESTS[key] = digest
    return digest


def schema_problems(store: Store, record: StageRecord) -> list[Problem]:
    """The Parquet files of ``record`` that do not open as their table (``spade verify --deep``).

    Files outside the store, missing or changed are :func:`file_problems`' to report; here they are passed over.
    """
    problems = []
    for table, recorded in listed_files(record):
        if table not in SCHEMAS:  # a checkpoint's marker file: its digest is the check
            continue
        try:
            path = store.confine(recorded)
            data = store.read_bytes(path)
        except (StoreError, FileNotFoundError):
            continue
        try:
            pq.read_table(pa.BufferReader(_arrow_copy(data)), schema=SCHEMAS[table])
        except Exception as exc:  # pyarrow raises several kinds for a damaged file; its first line says which
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            problems.append(Problem(record.gen, record.name, path, f"does not open as table {table!r}: {first}"))
    return problems


def _arrow_copy(data: bytes) -> pa.Buffer:
    """``data`` copied into memory Arrow owns. A Parquet reader over Python bytes (``io.BytesIO``) leaves
    futures on pyarrow's I/O threads that hold the Python buffer; when one is released while the interpreter
    exits, it asks for the GIL, the thread is torn down inside a C++ destructor and the process aborts
    ("terminate called without an active exception", exit 134, about 1 run in 20). Arrow's own buffer needs
    no GIL to be released."""
    sink = pa.BufferOutputStream()
    sink.write(data)
    return sink.getvalue()


def missing_inputs(store: Store, run_id: str, scan: MarkerScan) -> list[Problem]:
    """One problem per marker of this run that a marker names as its input but that is not in the store (a
    damaged marker file is reported as itself, not here).

    The stage runs again on the next ``spade run``; the markers after it follow through their input digests.
    """
    present = {f"gen{g}/{name}" for g, records in scan.records.items() for name in records}
    present |= {f"gen{bad.gen}/{bad.name}" for bad in scan.bad}
    wanted: dict[str, str] = {}
    for gen in sorted(scan.records):
        for name, record in scan.records[gen].items():
            for key in record.inputs:
                wanted.setdefault(key, f"gen {gen} {name}")
    problems = []
    for key in sorted(set(wanted) - present):
        place = _INPUT_KEY.match(key)
        if place is None:
            continue
        gen, name = int(place["gen"]), place["name"]
        path = f"{stages_dir(store, run_id, gen)}/{name}.json"
        problems.append(Problem(gen, name, path, f"is missing (the marker of {wanted[key]} names it as its input)"))
    return problems


_INPUT_KEY = re.compile(r"^gen(?P<gen>\d+)/(?P<name>[A-Za-z0-9][A-Za-z0-9_.\-]*)$")


def dependants(markers: dict[int, dict[str, StageRecord]], damaged: Iterable[tuple[int, str]]) -> set[tuple[int, str]]:
    """``damaged`` (``(gen, marker name)`` pairs) and every marker that depends on one of them, transitively.

    A marker depends on another when its input digests name it (``gen{g}/{name}``): the whole marker of a
    sharded stage on its shards, a later stage on its inputs, the next generation on what it carries over.

    >>> from spade_core.store.markers import digests
    >>> def rec(name, gen=1, *after):
    ...     return StageRecord(stage=name, run_id="r", gen=gen, artifact_hash="a", digest=name,
    ...                        inputs=digests(*after))
    >>> a = rec("a"); b = rec("b", 1, a); c = rec("c", 2, b); d = rec("d")
    >>> sorted(dependants({1: {"a": a, "b": b, "d": d}, 2: {"c": c}}, [(1, "a")]))
    [(1, 'a'), (1, 'b'), (2, 'c')]
    """
    out = set(damaged)
    keys = {f"gen{g}/{name}" for g, name in out}
    grew = True
    while grew:
        grew = False
        for gen, records in markers.items():
            for name, record in records.items():
                if (gen, name) not in out and keys.intersection(record.inputs):
                    out.add((gen, name))
                    keys.add(f"gen{gen}/{name}")
                    grew = True
    return out


def listed_but_missing(store: Store, tables: Iterable[str]) -> dict[str, list[Problem]]:
    """``{table: problems}``: the files of ``tables`` that a stage marker of any run in the store lists but
    that are missing, so a query over the table's files (``spade sql``'s views take every file of the table)
    would answer without their rows and say nothing. Reads every marker of every run once."""
    wanted = set(tables)
    out: dict[str, list[Problem]] = {}
    if not wanted:
        return out
    listings: Listings = {}
    runs = [posixpath.basename(str(p).rstrip("/")) for p in store.fs.glob(store.path("runs", "*"))]
    for run_id in sorted(runs):
        try:
            scan = scan_markers(store, run_id)
        except StoreError:  # a directory that is no run id
            continue
        for gen in sorted(scan.records):
            for record in scan.records[gen].values():
                for table, recorded in listed_files(record):
                    if table not in wanted:
                        continue
                    try:
                        path = store.confine(recorded)
                    except StoreError:
                        continue
                    directory = posixpath.dirname(path)
                    if directory not in listings:
                        listings[directory] = store.file_stamps(directory)
                    if path not in listings[directory]:
                        out.setdefault(table, []).append(Problem(gen, f"{run_id} {record.name}", path, "is missing"))
    return out
