"""A store's runs as the pipeline wrote them: the one reader of the store's layout (docs/DESIGN.md §4, §10).

Everything that reads a store outside the pipeline — the report, lineage, a run's stored config, the RLVE
controller, ``spade envs`` and ``spade sql`` — asks a :class:`RunReader`; nothing outside
:mod:`spade_core.store` globs the store or builds a path in it. The layout it owns::

    {root}/runs/{run_id}/config.yaml                          the run's resolved config
    {root}/runs/{run_id}/gen={g}/stages/{stage}[-{shard}].json the stage markers (spade_core.store.markers)
    {root}/tables/{table}/run={run_id}/gen={g}/*.parquet       the rows

Rows are read from the files the markers list (:meth:`RunReader.rows`, :meth:`RunReader.connect`), never
from every file of a partition: a half-written file, a file another command wrote around the pipeline, or
one left by a stage that ran again under another name cannot reach a plot, a lineage or a difficulty
decision. :meth:`RunReader.check` compares each listed file with what its marker recorded — its size, its
digest and the marker's row count — once per (path, size, stamp) (:class:`~spade_core.store.digests.Digests`,
kept between commands in ``$SPADE_CACHE/digests``), and :meth:`RunReader.connect` leaves out of its views a
file no marker vouches for, so a query answers from the rest and the caller says what was left out.

A reader memoises the markers it has read; make a new one to see a store that changed.
"""

from __future__ import annotations

import datetime as dt
import posixpath
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import duckdb
import pandas as pd
import yaml

from spade_core.hashing import short_hash
from spade_core.llm.embedded import cache_dir
from spade_core.store.artifacts import Store, StoreError
from spade_core.store.catalog import connect
from spade_core.store.integrity import Listings, Problem, file_problems, stamp
from spade_core.store.markers import MarkerScan, StageRecord, scan_markers
from spade_core.store.schemas import SCHEMAS, TABLES


@dataclass(frozen=True)
class Listed:
    """One file a marker lists: its table, path (inside the store), run, generation and marker name."""

    table: str
    path: str
    run_id: str
    gen: int
    marker: str


@dataclass
class Checked:
    """What :meth:`RunReader.check` found: the files no marker vouches for, by path, with their problems."""

    problems: list[Problem] = field(default_factory=list)
    refused: set[str] = field(default_factory=set)

    def left_out(self) -> list[Problem]:
        """The first problem of each refused file (its ``marker`` reads ``{run_id} {stage[-shard]}``)."""
        first: dict[str, Problem] = {}
        for problem in self.problems:
            if problem.path in self.refused:
                first.setdefault(problem.path, problem)
        return list(first.values())


@dataclass
class RunReader:
    """The runs of one store, read as the pipeline wrote them (see the module)."""

    store: Store
    _scans: dict[str, MarkerScan] = field(default_factory=dict, repr=False)
    _configs: dict[str, str | None] = field(default_factory=dict, repr=False)

    # -- layout -------------------------------------------------------------------------------------
    def runs(self) -> list[str]:
        """Every run id that has a run directory (markers, a config) or a table partition, sorted."""
        names = {posixpath.basename(p.rstrip("/")) for p in self.store.glob(self.store.path("runs", "*"), dirs=True)}
        for path in self.store.glob(self.store.path("tables", "*", "run=*"), dirs=True):
            names.add(posixpath.basename(path.rstrip("/")).removeprefix("run="))
        return sorted(name for name in names if _valid_run(self.store, name))

    def config_text(self, run_id: str) -> str | None:
        """The run's stored config as text (read once per reader); None when it has none."""
        if run_id not in self._configs:
            path = self.store.config_path(run_id)
            text = self.store.read_bytes(path).decode("utf-8", errors="replace") if self.store.exists(path) else None
            self._configs[run_id] = text
        return self._configs[run_id]

    def config(self, run_id: str) -> dict[str, Any]:
        """The run's stored config as a dict (empty when it has none or it does not parse)."""
        text = self.config_text(run_id)
        try:
            parsed = yaml.safe_load(text) if text is not None else None
        except yaml.YAMLError:
            parsed = None
        return parsed if isinstance(parsed, dict) else {}

    def has_markers(self, run_id: str) -> bool:
        """Whether the run has any stage marker file (valid or not)."""
        scan = self.scan(run_id)
        return bool(scan.records or scan.bad)

    def scan(self, run_id: str) -> MarkerScan:
        """Every marker file of the run, read once per reader."""
        if run_id not in self._scans:
            self._scans[run_id] = scan_markers(self.store, run_id)
        return self._scans[run_id]

    def markers(self, run_id: str) -> dict[int, dict[str, StageRecord]]:
        """Every valid marker of the run: ``{gen: {stage[-shard]: record}}``."""
        return self.scan(run_id).records

    # -- listed files -------------------------------------------------------------------------------
    def listed(
        self,
        table: str,
        runs: Iterable[str] | None = None,
        *,
        stages: Callable[[str], bool] | None = None,
        gens: Callable[[int], bool] | None = None,
    ) -> list[Listed]:
        """The files of ``table`` that the markers of ``runs`` (None: every run) list — only markers of the
        ``stages`` and ``gens`` the predicates accept — each once (a sharded stage's whole-stage marker lists
        its shards' files again), in path order. A listed path outside the store is left out
        (:meth:`check` names it)."""
        found: dict[str, Listed] = {}
        for run in self.runs() if runs is None else runs:
            for gen, records in self.markers(run).items():
                if gens is not None and not gens(gen):
                    continue
                for record in records.values():
                    if stages is not None and not stages(record.stage):
                        continue
                    for recorded in record.files.get(table, []):
                        try:
                            path = self.store.confine(recorded)
                        except StoreError:
                            continue
                        found.setdefault(path, Listed(table, path, run, gen, record.name))
        return [found[path] for path in sorted(found)]

    def rows(
        self,
        table: str,
        runs: Iterable[str] | None = None,
        *,
        stages: Callable[[str], bool] | None = None,
        gens: Callable[[int], bool] | None = None,
        columns: Sequence[str] | None = None,
    ) -> pd.DataFrame:
        """The rows of ``table`` in the files :meth:`listed` names, with ``run_id`` and ``gen``; a listed file
        that is gone is a ``FileNotFoundError`` naming it, not missing rows."""
        files = [f.path for f in self.listed(table, runs, stages=stages, gens=gens)]
        return self.store.read_files(table, files, columns=columns)

    def write_times(self, run_id: str) -> pd.DataFrame:
        """One row per table file the run's markers list: its generation and modification time (UTC)."""
        listed = [f for table in TABLES for f in self.listed(table, [run_id])]
        times: dict[str, dict[str, Any]] = {}
        for directory in sorted({posixpath.dirname(f.path) for f in listed}):
            try:
                entries = self.store.fs.ls(directory, detail=True)
            except FileNotFoundError:
                continue
            for entry in entries:
                name = str(entry["name"])
                times[name if not self.store.is_s3 or name.startswith("s3://") else f"s3://{name}"] = entry
        rows = [{"gen": f.gen, "time": _mtime(times[f.path])} for f in listed if f.path in times]
        return pd.DataFrame(rows, columns=["gen", "time"])

    # -- checks and queries -------------------------------------------------------------------------
    def check(
        self, tables: Iterable[str], runs: Iterable[str] | None = None, listings: Listings | None = None
    ) -> Checked:
        """Each file of ``tables`` that the markers of ``runs`` list, against its markers: inside the store,
        present, its recorded size and digest, and the marker's row count of the table over the files that
        marker wrote. A file is refused when no marker listing it agrees with it (a file another command
        rewrote on purpose is vouched for by that command's marker); the problems name every disagreement."""
        wanted = set(tables)
        cache = cache_dir() / "digests" / f"{short_hash(self.store.base)}.json"
        self.store.digests.load(cache)
        listings = {} if listings is None else listings  # one listing per directory, shared with the caller
        out = Checked()
        vouched: set[str] = set()
        doubted: set[str] = set()
        for run in self.runs() if runs is None else list(runs):
            for _, records in sorted(self.markers(run).items()):
                for record in records.values():
                    if not wanted.intersection(record.files):
                        continue
                    shown = record.model_copy(update={"files": {t: p for t, p in record.files.items() if t in wanted}})
                    problems = file_problems(self.store, shown, listings)
                    problems += self._row_problems(shown, records, listings, {p.path for p in problems})
                    bad = {p.path for p in problems}
                    out.problems += [_in_run(p, run) for p in problems]
                    for paths in shown.files.values():
                        for recorded in paths:
                            try:
                                path = self.store.confine(recorded)
                            except StoreError:
                                continue
                            (doubted if path in bad else vouched).add(path)
        out.refused = doubted - vouched
        self.store.digests.save(
            cache, {path: found for listing in listings.values() for path, found in listing.items()}
        )
        return out

    def _row_problems(
        self, record: StageRecord, generation: dict[str, StageRecord], listings: Listings, known: set[str]
    ) -> list[Problem]:
        """The tables of ``record`` whose files it wrote (not those of its shards, which their own markers
        count) hold another number of rows than it recorded."""
        shards = {
            path
            for other in generation.values()
            if other.stage == record.stage and other.shard is not None and record.shard is None
            for paths in other.files.values()
            for path in paths
        }
        problems: list[Problem] = []
        for table, paths in record.files.items():
            if table not in SCHEMAS or table not in record.rows:
                continue
            own = [p for p in paths if p not in shards]
            total, checked = 0, []
            for recorded in own:
                try:
                    path = self.store.confine(recorded)
                except StoreError:  # file_problems names it; this table's count cannot be taken
                    break
                found = stamp(self.store, path, listings)
                if found is None or path in known:
                    break
                total += self.store.digests.row_count(path, found, partial(self.store.parquet_rows, path))
                checked.append(path)
            else:
                if total != record.rows[table]:
                    many = f" (with {len(checked) - 1} more file(s) of its)" if len(checked) > 1 else ""
                    reason = f"holds {total} rows of {table}{many}, its marker recorded {record.rows[table]}"
                    problems += [Problem(record.gen, record.name, path, reason) for path in checked]
        return problems

    def connect(
        self, *, read_only: bool = False, checked: Iterable[str] = (), runs: Iterable[str] | None = None
    ) -> tuple[duckdb.DuckDBPyConnection, Checked]:
        """A DuckDB connection with one view per table over the files the markers of ``runs`` (None: every
        run) list (:mod:`spade_core.store.catalog`); the files of the ``checked`` tables are checked first
        (:meth:`check`) and those refused are left out of their views, as is a listed file that is gone from
        a table that was not checked."""
        scope = self.runs() if runs is None else list(runs)
        listings: Listings = {}  # one listing per directory for the check and the views
        found = self.check(checked, scope, listings) if checked else Checked()
        files = {
            t: [
                f.path
                for f in self.listed(t, scope)
                if f.path not in found.refused and stamp(self.store, f.path, listings) is not None
            ]
            for t in TABLES
        }  # a view's files must exist when DuckDB binds it, read or not
        return connect(self.store, read_only=read_only, files=files), found

    def query(self, sql: str, params: list[object] | None = None, *, runs: Iterable[str] | None = None) -> pd.DataFrame:
        """Run ``sql`` (``?`` placeholders bound to ``params``) over :meth:`connect`'s views; a DataFrame."""
        con, _ = self.connect(runs=runs)
        try:
            return con.execute(sql, params or []).df()
        finally:
            con.close()

    def unlisted(self, tables: Iterable[str]) -> list[str]:
        """The files of ``tables`` in the store that no marker lists (a command's or a stage's left-over)."""
        listed = {f.path for table in tables for f in self.listed(table)}
        return [path for table in tables for path in self.store.table_files(table) if path not in listed]


def _valid_run(store: Store, name: str) -> bool:
    try:
        store.run_dir(name)
    except StoreError:
        return False
    return True


def _in_run(problem: Problem, run_id: str) -> Problem:
    return Problem(problem.gen, f"{run_id} {problem.marker}", problem.path, problem.reason)


def _mtime(info: dict[str, Any]) -> dt.datetime | None:
    """Modification time of a file-info dict from a local (``mtime``) or S3 (``LastModified``) filesystem."""
    value = info.get("mtime", info.get("LastModified"))
    if isinstance(value, dt.datetime):
        return value if value.tzinfo else value.replace(tzinfo=dt.UTC)
    if isinstance(value, int | float):
        return dt.datetime.fromtimestamp(value, tz=dt.UTC)
    return None
