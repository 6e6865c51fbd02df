"""Whether the files a stage marker lists are still in the store, whole (docs/DESIGN.md §10, "Verified reuse").

A marker is written LAST, so when it exists its files were complete at that moment. What can happen
afterwards is outside the pipeline: a file deleted, truncated or replaced (a partial sync, a disk error, a
user's ``rm``). Two checks, by cost:

- :func:`file_problems` (every reuse, ``spade verify``): each listed file exists with its recorded size;
  one fresh listing per directory, shared across the markers of a run through ``listings``;
- :func:`deep_problems` (``spade verify --deep``): the digest of each file's bytes equals the recorded one
  and each Parquet file opens with its table's schema.

:func:`dependants` closes a set of damaged markers over the markers whose input digests name them (the
stages after them, in this generation and the next): ``spade verify --repair`` removes exactly those, so
``spade resume`` redoes exactly what the damage touched.
"""

from __future__ import annotations

import io
import posixpath
from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow.parquet as pq

from spade_core.hashing import short_hash
from spade_core.markers import StageRecord
from spade_core.schemas import SCHEMAS
from spade_core.store import Store

Listings = dict[str, dict[str, int]]  # directory -> {path: size}, one listing each


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


def file_problems(store: Store, record: StageRecord, listings: Listings | None = None) -> list[Problem]:
    """The files of ``record`` that are missing or whose size differs from the recorded one.

    A marker written before sizes were recorded is checked for existence only. ``listings`` caches one
    listing per directory across calls (pass the same dict for the markers of one run).
    """
    listings = {} if listings is None else listings
    problems = []
    for _, recorded in listed_files(record):
        path = store.locate(recorded)
        directory = posixpath.dirname(path)
        if directory not in listings:
            listings[directory] = store.file_sizes(directory)
        size = listings[directory].get(path)
        expected = record.sizes.get(recorded)
        if size is None:
            problems.append(Problem(record.gen, record.name, path, "is missing"))
        elif expected is not None and size != expected:
            problems.append(Problem(record.gen, record.name, path, f"has {size} bytes, its marker recorded {expected}"))
    return problems


def deep_problems(store: Store, record: StageRecord) -> list[Problem]:
    """The files of ``record`` whose bytes differ from the recorded digest or that do not open as their table.

    Missing files are :func:`file_problems`' to report; here they are passed over.
    """
    problems = []
    for table, recorded in listed_files(record):
        path = store.locate(recorded)
        try:
            data = store.read_bytes(path)
        except FileNotFoundError:
            continue
        expected = record.file_digests.get(recorded)
        if expected is not None and short_hash(data) != expected:
            problems.append(Problem(record.gen, record.name, path, "has changed since its stage wrote it (digest)"))
            continue
        if table not in SCHEMAS:  # a checkpoint's marker file: its digest is the check
            continue
        try:
            pq.read_table(io.BytesIO(data), schema=SCHEMAS[table])
        except Exception as exc:  # pyarrow raises several kinds for a damaged file; its first line says which
            first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            problems.append(Problem(record.gen, record.name, path, f"does not open as table {table!r}: {first}"))
    return problems


def dependants(markers: dict[int, dict[str, StageRecord]], damaged: Iterable[tuple[int, str]]) -> set[tuple[int, str]]:
    """``damaged`` (``(gen, marker name)`` pairs) and every marker that depends on one of them, transitively.

    A marker depends on another when its input digests name it (``gen{g}/{name}``): the whole marker of a
    sharded stage on its shards, a later stage on its inputs, the next generation on what it carries over.

    >>> from spade_core.markers import digests
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
