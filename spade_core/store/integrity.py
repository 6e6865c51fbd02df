"""Whether the files a stage marker lists are still in the store, whole (docs/DESIGN.md §10, "Verified reuse").

A marker is written LAST, so when it exists its files were complete at that moment. What can happen
afterwards is outside the pipeline: a file deleted, truncated, replaced or changed in place (a partial sync,
a disk error, a user's ``rm``), or a marker edited to name a file elsewhere. :func:`file_problems` finds each:
a listed file lies inside the store (:meth:`~spade_core.store.artifacts.Store.confine`: no ``..``, no path
elsewhere, no symbolic link), exists with its recorded size (one fresh listing per directory, shared through
``listings``) and has its recorded digest (the sha256 of its bytes, read in chunks; ``content=False`` skips
it). A checkpoint's weights (gigabytes each) are read for their digest only when ``weights`` is asked for.

A file's digest is read once per store for one (path, size, stamp) of a fresh listing
(:class:`~spade_core.store.digests.Digests`).
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from functools import partial

from spade_core.store.artifacts import Store, StoreError
from spade_core.store.checkpoints import MARKER as CHECKPOINT_MARKER
from spade_core.store.markers import StageRecord

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


def stamp(store: Store, path: str, listings: Listings) -> tuple[int, str] | None:
    """(size, stamp) of ``path`` from one fresh listing of its directory (kept in ``listings``); None: missing."""
    directory = posixpath.dirname(path)
    if directory not in listings:
        listings[directory] = store.file_stamps(directory)
    return listings[directory].get(path)


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
        found = stamp(store, path, listings)
        expected = record.sizes.get(recorded)
        if found is None:
            problems.append(Problem(record.gen, record.name, path, "is missing"))
        elif expected is not None and found[0] != expected:
            reason = f"has {found[0]} bytes, its marker recorded {expected}"
            problems.append(Problem(record.gen, record.name, path, reason))
        elif (
            content
            and (weights or not _weights(table, path))
            and record.file_digests.get(recorded)
            not in (None, store.digests.digest(path, found, partial(store.file_digest, path)))
        ):
            problems.append(Problem(record.gen, record.name, path, "has changed since its stage wrote it (digest)"))
    return problems


def _weights(table: str, path: str) -> bool:
    """Whether a listed file is one of a checkpoint's own files (its weights, its optimizer state), not the
    checkpoint's small marker."""
    return table == "checkpoint" and posixpath.basename(path) != CHECKPOINT_MARKER
