"""Digests and Parquet row counts of stored files, each read once per (path, size, stamp) (docs/DESIGN.md §10).

The stamp of a fresh listing changes when a file is rewritten (the local mtime, the S3 ETag), so an entry
is the file's as long as its listing says so: the whole-stage marker of a sharded stage lists its shards'
files again, and ``spade status`` asks about each generation twice. Each
:class:`~spade_core.store.artifacts.Store` owns one :class:`Digests`; a reader that checks the same files on
every command (``spade sql``) keeps the entries in a file between commands (:meth:`Digests.load` /
:meth:`Digests.save`).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

Key = tuple[str, int, str]  # (path, size, stamp) of a fresh listing
T = TypeVar("T")
KEEP_FILES = 64  # digest files of the stores used last, one per store


@dataclass
class Digests:
    """Digests and Parquet row counts of files, keyed by (path, size, stamp): each read once.

    An entry whose listing had no stamp is never kept (a rewrite of the same size would go unseen). A copy
    that travels to a worker process travels empty."""

    digests: dict[Key, str] = field(default_factory=dict)
    rows: dict[Key, int] = field(default_factory=dict)
    changed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def __getstate__(self) -> dict[str, object]:
        return {}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.digests, self.rows, self.changed, self.lock = {}, {}, False, threading.Lock()

    def digest(self, path: str, found: tuple[int, str], read: Callable[[], str]) -> str:
        """The digest of a file's bytes (``read`` computes it), given its (size, stamp) from a fresh listing."""
        return self._once(self.digests, (path, *found), read)

    def row_count(self, path: str, found: tuple[int, str], read: Callable[[], int]) -> int:
        """The rows of a Parquet file (``read`` counts them), given its (size, stamp) from a fresh listing."""
        return self._once(self.rows, (path, *found), read)

    def _once(self, table: dict[Key, T], key: Key, read: Callable[[], T]) -> T:
        """``table[key]``, read first unless known; kept only when the listing had a stamp."""
        with self.lock:
            known = table.get(key) if key[2] else None
        if known is not None:
            return known
        value = read()
        if key[2]:
            with self.lock:
                table[key] = value
                self.changed = True
        return value

    def load(self, file: Path) -> Digests:
        """Add the entries kept in ``file`` (a missing or unreadable file adds none); returns self."""
        try:
            entries = [(str(p), int(s), str(t), d, r) for p, s, t, d, r in json.loads(file.read_text())["entries"]]
        except (OSError, ValueError, KeyError, TypeError):
            return self
        with self.lock:
            for path, size, stamp, digest, rows in entries:
                if stamp:
                    if digest is not None:
                        self.digests.setdefault((path, size, stamp), str(digest))
                    if rows is not None:
                        self.rows.setdefault((path, size, stamp), int(rows))
        return self

    def save(self, file: Path, current: Mapping[str, tuple[int, str]], keep_files: int = KEEP_FILES) -> None:
        """Write the entries to ``file`` (atomically), if any changed since :meth:`load`: of a path ``current``
        lists (a fresh listing's (size, stamp)), only the entry of that (size, stamp); a path it does not
        list keeps its entries. The directory keeps the ``keep_files`` files used last (one per store)."""
        with self.lock:
            if not self.changed:
                return
            keys = [
                key
                for key in self.digests.keys() | self.rows.keys()
                if key[0] not in current or current[key[0]] == (key[1], key[2])
            ]
            entries = [[*key, self.digests.get(key), self.rows.get(key)] for key in sorted(keys)]
            self.changed = False
        file.parent.mkdir(parents=True, exist_ok=True)
        tmp = file.with_name(f".{file.name}.{os.getpid()}")
        tmp.write_text(json.dumps({"entries": entries}))
        os.replace(tmp, file)
        kept = sorted(file.parent.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
        for old in kept[keep_files:]:
            old.unlink(missing_ok=True)
