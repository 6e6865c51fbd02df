"""A run's environments as a dataset that leaves the project: one Parquet file and a dataset card.

``spade envs export RUN --to DIR`` writes, on a local path or ``s3://bucket/prefix``::

    DIR/README.md                              the dataset card (spade_core.envs.export_card)
    DIR/data/train-00000-of-00001.parquet      one row per environment, EXPORT_SCHEMA

The rows are the run's pool (every environment a generation played: valid designs, replays, starters, a fixed
pool's), one per ``env_id`` at the first generation whose pool held it, so the export's pool columns
(:data:`POOL_COLUMNS`) are the pool table's rows deduplicated by environment. Beside them: the design's source
document, its parent and the chain of ancestors the run's designs name, the validator's final verdict
(:func:`spade_core.store.verdicts.resolve`: the latest attempt, turned down by a novelty verdict), and the win
rates with and without a hint and the regret of every generation that scored it (the latest also flat, for
filtering). The data loads with ``datasets.load_dataset("parquet", data_files=DIR + "/data/*.parquet")`` (and,
through the card's ``configs``, with ``load_dataset(DIR)``); every column type is one ``datasets`` knows (no
Arrow maps: the checks are a list of ``{check, passed}``).

What reads an export: :func:`read_export` (the fixed pool ``designer.fixed_pool: export:DIR``), Gymnasium
(:func:`spade_core.envs.gym.register_export`) and TRL (:mod:`spade_core.envs.trl_envs`).
"""

from __future__ import annotations

import io
import math
import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from spade_core.config import ConfigError
from spade_core.store.artifacts import Store
from spade_core.store.fs import s3_filesystem, strict_glob
from spade_core.store.reader import RunReader
from spade_core.store.verdicts import VERDICT_COLUMNS, resolve

DATA_FILE = "data/train-00000-of-00001.parquet"  # the Hub's file naming: split "train", shard 0 of 1
CARD_FILE = "README.md"
POOL_COLUMNS = ["env_id", "design_id", "skill", "kind", "code", "source"]
MAX_LINEAGE = 1000  # a longer chain is a cycle in corrupted rows, not a lineage


def _f(name: str, type_: pa.DataType, nullable: bool, description: str) -> pa.Field:
    return pa.field(name, type_, nullable=nullable, metadata={"description": description})


_SCORE = pa.struct(
    [
        pa.field("gen", pa.int64()),
        pa.field("win_rate", pa.float64()),
        pa.field("r_hint", pa.float64()),
        pa.field("r_no_hint", pa.float64()),
        pa.field("regret", pa.float64()),
    ]
)
_CHECK = pa.struct([pa.field("check", pa.string()), pa.field("passed", pa.bool_())])

EXPORT_SCHEMA = pa.schema(
    [
        _f("env_id", pa.string(), False, "Digest of the code: the environment's id in the run's store."),
        _f("code", pa.string(), False, "The environment: one standard-library Python module (the contract)."),
        _f("skill", pa.string(), False, "The skill it was designed for (e.g. optimization, data_retrieval)."),
        _f("kind", pa.string(), False, "game (actions end in \\boxed{...}) or tool (tool calls, then <answer>)."),
        _f("source", pa.string(), False, "How it entered the pool: design, replay, starter or fixed."),
        _f("design_id", pa.string(), True, "The design that wrote it (null for a library or fixed environment)."),
        _f("doc_id", pa.string(), True, "The corpus document the design was grounded in (null: none)."),
        _f("parent_env_id", pa.string(), True, "The environment this one mutated (null: written anew)."),
        _f("lineage", pa.list_(pa.string()), False, "Its ancestors, parent first, as the run's designs name them."),
        _f("run_id", pa.string(), False, "The run that played it."),
        _f("gen", pa.int64(), False, "The first generation whose pool held it (the generation that admitted it)."),
        _f("gens", pa.list_(pa.int64()), False, "Every generation whose pool held it."),
        _f("valid", pa.bool_(), True, "The validator's final verdict on its design (null: no design)."),
        _f("checks", pa.list_(_CHECK), True, "The validator's checks on its design, in order."),
        _f("llm_verdict", pa.string(), True, "The LLM validator's verdict (yes, no, none, error; null: not judged)."),
        _f("win_rate", pa.float64(), True, "Win rate of the latest generation that scored it."),
        _f("r_hint", pa.float64(), True, "Mean return with the hint, latest scored generation."),
        _f("r_no_hint", pa.float64(), True, "Mean return without the hint, latest scored generation."),
        _f("regret", pa.float64(), True, "Regret (the hint's gain), latest scored generation."),
        _f("scores", pa.list_(_SCORE), False, "Win rates and regret of every generation that scored it."),
    ]
)


class ExportError(ConfigError):
    """A run, a directory or a filter that cannot give an export, or a ``designer.fixed_pool: export:DIR`` that
    names no export; the message is one line naming it (the CLI prints it as a config error)."""


@dataclass(frozen=True)
class ExportFilter:
    """Which environments an export keeps: those in generation ``gen``'s pool, of ``skills``, whose latest
    win rate and regret lie in the bands (a band leaves out an environment never scored). None: no bound."""

    gen: int | None = None
    skills: tuple[str, ...] = ()
    min_win_rate: float | None = None
    max_win_rate: float | None = None
    min_regret: float | None = None
    max_regret: float | None = None

    def check(self) -> None:
        """Raise :class:`ExportError` for a band that is not a number, is upside down or leaves its range."""
        for name, low, high, lo_lim, hi_lim in (
            ("win-rate", self.min_win_rate, self.max_win_rate, 0.0, 1.0),
            ("regret", self.min_regret, self.max_regret, -2.0, 2.0),
        ):
            for side, value in (("min", low), ("max", high)):
                if value is not None and not (math.isfinite(value) and lo_lim <= value <= hi_lim):
                    raise ExportError(f"--{side}-{name} {value} is outside [{lo_lim:g}, {hi_lim:g}]")
            if low is not None and high is not None and low > high:
                raise ExportError(f"--min-{name} {low} is above --max-{name} {high}")

    def describe(self) -> str:
        """The filters as the command line gave them ('none' when there are none)."""
        parts = [f"--gen {self.gen}"] if self.gen is not None else []
        parts += [f"--skill {s}" for s in self.skills]
        for name, value in (
            ("min-win-rate", self.min_win_rate),
            ("max-win-rate", self.max_win_rate),
            ("min-regret", self.min_regret),
            ("max-regret", self.max_regret),
        ):
            if value is not None:
                parts.append(f"--{name} {value:g}")
        return " ".join(parts) or "none"


@dataclass
class Export:
    """What an export holds: its rows, the run they came from and what the card says about the run."""

    rows: pa.Table
    run_id: str
    filters: ExportFilter = field(default_factory=ExportFilter)
    config: dict[str, Any] = field(default_factory=dict)
    artifact_hash: str | None = None


# -- building ---------------------------------------------------------------------------------------
def build_export(store: Store, run_id: str, filters: ExportFilter | None = None) -> Export:
    """The export of ``run_id``'s environments kept by ``filters``, read through the store's markers.

    Raises:
        ExportError: the run is not in the store or has no pool yet, or a filter names a generation or a
            skill the run does not have, or keeps nothing.
    """
    filters = filters or ExportFilter()
    filters.check()
    reader = RunReader(store)
    if run_id not in reader.runs():
        known = ", ".join(reader.runs()) or "none"
        raise ExportError(f"run {run_id!r} is not in the store {store.base} (runs: {known})")
    pool = reader.rows("pool", [run_id], columns=POOL_COLUMNS)
    if pool.empty:
        raise ExportError(f"run {run_id!r} has no pool yet: no generation's pool stage has finished")
    pool = pool.sort_values(["gen", "env_id"], kind="stable").drop_duplicates(["gen", "env_id"])
    gens = pool.groupby("env_id")["gen"].agg(lambda g: sorted(int(x) for x in g))
    first = pool.drop_duplicates("env_id").reset_index(drop=True)
    first["gens"] = first["env_id"].map(gens)
    _check_choices(filters, run_id, pool)

    designs = reader.rows("designs", [run_id], columns=["design_id", "attempt", "env_id", "doc_id", "parent_env_id"])
    verdicts = _verdicts(reader, run_id)
    scores = reader.rows("env_scores", [run_id], columns=["env_id", "win_rate", "r_hint", "r_no_hint", "regret"])
    parents = _parents(designs)
    # each design's latest attempt, and each environment's scores by generation, looked up once per row
    latest = designs.sort_values("attempt", kind="stable").drop_duplicates("design_id", keep="last")
    by_design = {str(d["design_id"]): d for d in latest.to_dict("records")}
    scored = scores.sort_values("gen", kind="stable").drop_duplicates(["env_id", "gen"])
    by_env = {str(env_id): part for env_id, part in scored.groupby("env_id", sort=False)}
    records = [_record(row, by_design, verdicts, by_env, parents) for row in first.to_dict("records")]
    frame = pd.DataFrame(records, columns=EXPORT_SCHEMA.names)
    kept = frame[_kept(frame, filters)].reset_index(drop=True)
    if kept.empty:
        raise ExportError(f"no environment of run {run_id!r} passes the filters ({filters.describe()})")
    markers = reader.markers(run_id)
    hashes = [record.artifact_hash for gen in sorted(markers) for record in markers[gen].values()]
    return Export(
        rows=pa.Table.from_pandas(kept, schema=EXPORT_SCHEMA, preserve_index=False),
        run_id=run_id,
        filters=filters,
        config=reader.config(run_id),
        artifact_hash=hashes[0] if hashes else None,
    )


def _check_choices(filters: ExportFilter, run_id: str, pool: pd.DataFrame) -> None:
    generations = sorted({int(g) for g in pool["gen"]})
    if filters.gen is not None and filters.gen not in generations:
        listed = ", ".join(map(str, generations))
        raise ExportError(f"--gen {filters.gen}: run {run_id!r} has no pool for it (generations: {listed})")
    skills = sorted(set(pool["skill"]))
    for skill in filters.skills:
        if skill not in skills:
            known = ", ".join(skills)
            raise ExportError(f"--skill {skill!r}: no environment of run {run_id!r} has it (skills: {known})")


def _verdicts(reader: RunReader, run_id: str) -> pd.DataFrame:
    """The final verdict of each design of the run (the rule of :mod:`spade_core.store.verdicts`, per
    generation), with the checks and the LLM verdict of the attempt it is about."""
    columns = [*VERDICT_COLUMNS, "checks", "llm_verdict"]
    validations = reader.rows("validations", [run_id], columns=columns)
    novelty = reader.rows("novelty", [run_id], columns=["design_id", "attempt", "novel", "similarity", "threshold"])
    frames = []
    for gen, part in validations.groupby("gen"):
        final = resolve(part[VERDICT_COLUMNS], novelty[novelty["gen"] == gen])
        extra = part[["design_id", "attempt", "checks", "llm_verdict"]].drop_duplicates(["design_id", "attempt"])
        frames.append(final.merge(extra, on=["design_id", "attempt"], how="left"))
    if not frames:
        return pd.DataFrame(columns=[*columns])
    return pd.concat(frames, ignore_index=True).drop_duplicates("design_id", keep="last").set_index("design_id")


def _parents(designs: pd.DataFrame) -> dict[str, str]:
    """env_id → the parent its first design names."""
    named = designs[designs["env_id"].notna() & designs["parent_env_id"].notna()]
    named = named.sort_values(["gen", "attempt"], kind="stable").drop_duplicates("env_id")
    return dict(zip(named["env_id"], named["parent_env_id"], strict=True))


def lineage_of(env_id: str, parents: dict[str, str]) -> list[str]:
    """The ancestors of ``env_id``, parent first, as far as ``parents`` names them (a cycle stops the walk).

    >>> lineage_of("c", {"c": "b", "b": "a"})
    ['b', 'a']
    >>> lineage_of("x", {"x": "y", "y": "x"})
    ['y']
    """
    chain: list[str] = []
    seen = {env_id}
    current = parents.get(env_id)
    while current is not None and current not in seen and len(chain) < MAX_LINEAGE:
        chain.append(current)
        seen.add(current)
        current = parents.get(current)
    return chain


def _record(
    row: dict[str, Any],
    designs: dict[str, dict[str, Any]],
    verdicts: pd.DataFrame,
    scores: dict[str, pd.DataFrame],
    parents: dict[str, str],
) -> dict[str, Any]:
    design_id = row["design_id"] if isinstance(row["design_id"], str) else None
    design = designs.get(design_id) if design_id is not None else None
    verdict = verdicts.loc[design_id] if design_id is not None and design_id in verdicts.index else None
    played = scores.get(row["env_id"], pd.DataFrame(columns=["gen"]))
    history = [
        {"gen": int(s.gen), "win_rate": s.win_rate, "r_hint": s.r_hint, "r_no_hint": s.r_no_hint, "regret": s.regret}
        for s in played.itertuples()
    ]
    latest = history[-1] if history else {}
    checks = verdict["checks"] if verdict is not None and isinstance(verdict["checks"], dict) else None
    return {
        **{c: row[c] for c in POOL_COLUMNS},
        "design_id": design_id,
        "doc_id": _text(design["doc_id"]) if design is not None else None,
        "parent_env_id": parents.get(row["env_id"]),
        "lineage": lineage_of(row["env_id"], parents),
        "run_id": row["run_id"],
        "gen": int(row["gen"]),
        "gens": row["gens"],
        "valid": bool(verdict["ok"]) if verdict is not None else None,
        "checks": [{"check": k, "passed": bool(v)} for k, v in checks.items()] if checks is not None else None,
        "llm_verdict": _text(verdict["llm_verdict"]) if verdict is not None else None,
        **{k: latest.get(k) for k in ("win_rate", "r_hint", "r_no_hint", "regret")},
        "scores": history,
    }


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _kept(frame: pd.DataFrame, filters: ExportFilter) -> pd.Series:
    keep = pd.Series(True, index=frame.index)
    if filters.gen is not None:
        keep &= frame["gens"].map(lambda gens: filters.gen in gens)
    if filters.skills:
        keep &= frame["skill"].isin(filters.skills)
    for column, low, high in (
        ("win_rate", filters.min_win_rate, filters.max_win_rate),
        ("regret", filters.min_regret, filters.max_regret),
    ):
        values = pd.to_numeric(frame[column], errors="coerce")
        if low is not None:
            keep &= values >= low  # NaN (never scored) compares False
        if high is not None:
            keep &= values <= high
    return keep


# -- the directory ----------------------------------------------------------------------------------
def export_fs(directory: str, endpoint_url: str | None = None) -> tuple[fsspec.AbstractFileSystem, str]:
    """The filesystem of an export directory (local, or S3 on ``endpoint_url`` / ``$AWS_ENDPOINT_URL``) and
    the directory as that filesystem names it."""
    text = str(directory).strip()
    if not text:
        raise ExportError("the export directory is empty; give a local path or s3://bucket/prefix")
    if text.startswith("s3://"):
        if not text[len("s3://") :].strip("/"):
            raise ExportError(f"export directory {text!r} names no bucket; use s3://bucket/prefix")
        return s3_filesystem(endpoint_url), text.rstrip("/")
    if "://" in text and not text.startswith("file://"):
        raise ExportError(f"export directory {text!r}: only local paths and s3:// URLs are supported")
    return fsspec.filesystem("file"), str(Path(text.removeprefix("file://")).expanduser().resolve())


def write_export(
    export: Export, directory: str, card: str, *, endpoint_url: str | None = None, overwrite: bool = False
) -> list[str]:
    """Write ``export`` to ``directory``: the data file, then ``card`` (its dataset card,
    :func:`spade_core.envs.export_card.dataset_card`) as ``README.md``; returns the paths written.

    Raises:
        ExportError: ``directory`` is a file, or already holds files and ``overwrite`` is False.
    """
    fs, base = export_fs(directory, endpoint_url)
    if fs.isfile(base):
        raise ExportError(f"export directory {directory!r} is a file")
    if fs.isdir(base) and fs.ls(base) and not overwrite:
        raise ExportError(f"export directory {directory!r} is not empty (--force replaces an export there)")
    buffer = io.BytesIO()
    pq.write_table(export.rows, buffer)
    written = []
    for name, data in ((DATA_FILE, buffer.getvalue()), (CARD_FILE, card.encode())):
        path = posixpath.join(base, name)
        fs.makedirs(posixpath.dirname(path), exist_ok=True)
        with fs.open(path, "wb") as fh:
            fh.write(data)
        written.append(path)
    return written


def read_export(directory: str, *, endpoint_url: str | None = None) -> pd.DataFrame:
    """The rows of the export in ``directory`` (every ``data/*.parquet``), in file then row order.

    Raises:
        ExportError: there is no export there, or its data lacks a column of :data:`EXPORT_SCHEMA`.
    """
    fs, base = export_fs(directory, endpoint_url)
    files = strict_glob(fs, posixpath.join(base, "data", "*.parquet"))
    if not files:
        raise ExportError(f"{directory!r} holds no SPADE export (no data/*.parquet)")
    tables = []
    for path in files:
        with fs.open(path, "rb") as fh:
            table = pq.read_table(fh)
        missing = [name for name in EXPORT_SCHEMA.names if name not in table.column_names]
        if missing:
            raise ExportError(f"{path} is not a SPADE export's data: no column {', '.join(missing)}")
        tables.append(table.select(EXPORT_SCHEMA.names).cast(EXPORT_SCHEMA))
    return pa.concat_tables(tables).to_pandas()


def export_ids(frame: pd.DataFrame) -> Sequence[str]:
    """The env_ids of an export's rows, in order; raises :class:`ExportError` on a repeated one."""
    ids = list(frame["env_id"])
    repeated = sorted({e for e in ids if ids.count(e) > 1})
    if repeated:
        raise ExportError(f"the export repeats env_id {', '.join(repeated[:3])}")
    return ids
