"""`spade sql` over local and S3 stores, through the real CLI entry point: the views read the files the stage
markers list, each checked against its marker (a file that fails is left out and named, the rest answers),
and nothing writes a file (into the store or anywhere) unless `--allow-write`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from samples import frame, write_stage
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.cli.catalog_cmd import READ_ONLY_HINT
from spade_core.store.artifacts import Store
from spade_core.store.catalog import query
from spade_core.store.markers import read_marker, write_marker
from spade_core.store.reader import RunReader
from spade_core.store.schemas import SCHEMAS, TABLES

runner = CliRunner()


def _fill(store: Store) -> None:
    for gen in (1, 2):
        write_stage(store, "run-a", gen, "rollout", {"episodes": frame("episodes", 3)}, shard=0)
        write_stage(store, "run-a", gen, "rollout", {"episodes": frame("episodes", 2)}, shard=1)
    write_stage(store, "007", 1, "rollout", {"episodes": frame("episodes", 4)})


@pytest.fixture(params=["local", "s3"])
def filled(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Store, list[str]]:
    if request.param == "local":
        store, args = Store(str(tmp_path / "st")), ["--store", str(tmp_path / "st")]
    else:
        endpoint = request.getfixturevalue("s3_endpoint")
        root = request.getfixturevalue("s3_bucket")
        store, args = Store(root, endpoint_url=endpoint), ["--store", root, "--set", f"store.endpoint_url={endpoint}"]
    _fill(store)
    return store, args


def test_group_by_example_from_the_readme(filled: tuple[Store, list[str]]) -> None:
    _, args = filled
    q = "select run_id, gen, count(*) as n from episodes group by all order by run_id, gen"
    result = runner.invoke(app, ["sql", *args, "--format", "json", q])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"run_id": "007", "gen": 1, "n": 4},
        {"run_id": "run-a", "gen": 1, "n": 5},
        {"run_id": "run-a", "gen": 2, "n": 5},
    ]


def test_all_digit_run_id_stays_text(filled: tuple[Store, list[str]]) -> None:
    store, _ = filled
    out = query(store, "select typeof(run_id) as t, typeof(gen) as g from episodes limit 1")
    assert (out.t[0], out.g[0]) == ("VARCHAR", "BIGINT")


def test_nested_columns_are_queryable(filled: tuple[Store, list[str]]) -> None:
    store, _ = filled
    out = query(store, "select transcript[1].role as role, rewards[2] as r, len(token_ids) as n from episodes limit 1")
    assert (out.role[0], out.r[0], out.n[0]) == ("user", 1.0, 3)


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_table_and_csv_formats(filled: tuple[Store, list[str]], fmt: str) -> None:
    _, args = filled
    result = runner.invoke(app, ["sql", *args, "--format", fmt, "select count(*) as n from episodes"])
    assert result.exit_code == 0, result.output
    assert "14" in result.stdout


def test_empty_store_has_every_view(tmp_path: Path) -> None:
    for table in TABLES:
        result = runner.invoke(
            app, ["sql", "--store", str(tmp_path / "empty"), "--format", "json", f"select * from {table}"]
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout) == []


def test_empty_s3_store(s3_bucket: str, s3_endpoint: str) -> None:
    result = runner.invoke(
        app,
        [
            "sql",
            "--store",
            s3_bucket,
            "--set",
            f"store.endpoint_url={s3_endpoint}",
            "--format",
            "json",
            "select run_id, gen, count(*) from episodes group by all",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == []


def test_bad_sql_is_one_line(tmp_path: Path) -> None:
    result = runner.invoke(app, ["sql", "--store", str(tmp_path), "select * from nope"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: Catalog Error") and result.stderr.count("\n") == 1


def test_bad_store_url_is_one_line() -> None:
    result = runner.invoke(app, ["sql", "--store", "gs://x/y", "select 1"])
    assert result.exit_code == 2
    assert result.stderr == "error: store root 'gs://x/y': only local paths and s3:// URLs are supported\n"


def test_installed_entry_point_reads_s3_with_standard_variables(s3_bucket: str, s3_endpoint: str) -> None:
    store = Store(s3_bucket, endpoint_url=s3_endpoint)
    _fill(store)
    env = {**os.environ, "AWS_ENDPOINT_URL": s3_endpoint}
    spade = Path(sys.executable).parent / "spade"
    out = subprocess.run(
        [str(spade), "sql", "--store", s3_bucket, "--format", "json", "select count(*) as n from episodes"],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    assert json.loads(out.stdout) == [{"n": 14}]


def test_views_have_the_same_columns_empty_or_filled(filled: tuple[Store, list[str]], tmp_path: Path) -> None:
    store, _ = filled
    full = query(store, "select * from episodes limit 0")
    empty = query(Store(str(tmp_path / "none")), "select * from episodes limit 0")
    assert list(full.columns) == list(empty.columns) == ["run_id", "gen", *SCHEMAS["episodes"].names]


def _refused(result) -> str:  # type: ignore[no-untyped-def]
    """The one line a refused statement prints, after checking it exited 1 and printed nothing else."""
    assert result.exit_code == 1, result.output
    assert result.stdout == "" and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and result.stderr.endswith(f"({READ_ONLY_HINT})\n")
    return result.stderr


def test_sql_cannot_write_into_the_store_or_anywhere_else(filled: tuple[Store, list[str]]) -> None:
    store, args = filled
    before = sorted(store.fs.find(store.base))
    outside = Path(tempfile.gettempdir()) / f"spade-sql-{uuid.uuid4().hex[:8]}.csv"
    targets = {
        "store root": f"{store.base}/x.csv",
        "table dir": store.table_glob("episodes").split("**")[0] + "run=run-a/gen=1/rollout-9.parquet",
        "tmp": str(outside),
    }
    for name, target in targets.items():
        line = _refused(runner.invoke(app, ["sql", *args, f"copy (select 42 as n) to '{target}'"]))
        assert "refused" in line, f"{name}: {line}"
    assert not outside.exists() and sorted(store.fs.find(store.base)) == before
    for statement in [
        "set enable_external_access = true",
        "set lock_configuration = false",
        "set allowed_configs = ['enable_external_access']",
        f"set temp_directory = '{outside.with_suffix('')}'",
        f"attach '{outside.with_suffix('.db')}' as other",
        f"export database '{outside.with_suffix('')}'",
        "select * from read_text('/etc/hostname')",
    ]:
        _refused(runner.invoke(app, ["sql", *args, statement]))
    assert not outside.with_suffix(".db").exists() and not outside.with_suffix("").exists()
    # Queries still read every table, in-memory tables included.
    result = runner.invoke(app, ["sql", *args, "--format", "json", "select count(*) as n from episodes"])
    assert result.exit_code == 0 and json.loads(result.stdout) == [{"n": 14}], result.output
    statement = "set threads = 1; create table t as select 1 as x; select * from t"
    result = runner.invoke(app, ["sql", *args, "--format", "json", statement])
    assert result.exit_code == 0 and json.loads(result.stdout) == [{"x": 1}], result.output


def test_allow_write_exports(filled: tuple[Store, list[str]], tmp_path: Path) -> None:
    _, args = filled
    out = tmp_path / "counts.csv"
    copy = f"copy (select run_id, count(*) as n from episodes group by all order by all) to '{out}'"
    result = runner.invoke(app, ["sql", *args, "--allow-write", copy])
    assert result.exit_code == 0, result.output
    assert out.read_text().splitlines() == ["run_id,n", "007,4", "run-a,10"]


def test_the_installed_entry_point_refuses_a_write_in_one_line(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "st"))
    _fill(store)
    spade = Path(sys.executable).parent / "spade"
    out = subprocess.run(
        [str(spade), "sql", "--store", str(tmp_path / "st"), f"copy (select 42) to '{tmp_path / 'st' / 'x.csv'}'"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr == f"error: file access refused: {tmp_path / 'st' / 'x.csv'} ({READ_ONLY_HINT})\n"


def _count(result: Any) -> int:
    assert result.exit_code == 0, result.output
    return int(json.loads(result.stdout)[0]["n"])


def _left_out(result: Any) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("warning: left out ")]


COUNT = ["--format", "json", "select count(*) as n from episodes"]


def test_a_file_cut_short_is_left_out_in_one_line_and_the_rest_answers(filled: tuple[Store, list[str]]) -> None:
    store, args = filled
    damaged = store.table_files("episodes", "run-a", 1)[0]
    store.write_bytes(damaged, b"not a parquet file")
    result = runner.invoke(app, ["sql", *args, *COUNT])
    assert _count(result) == 14 - 3  # run-a gen 1 shard 0's three rows are gone, the rest answer
    [line] = _left_out(result)
    assert (
        damaged.removeprefix("s3://") in line and "bytes, its marker recorded" in line and "spade verify run-a" in line
    )
    every = runner.invoke(app, ["sql", *args, "--all-files", *COUNT])  # every file, unchecked: DuckDB's own error
    assert every.exit_code == 1 and every.stdout == "", every.output
    assert every.stderr.startswith("error: a stored file is damaged (") and every.stderr.count("\n") == 1
    assert damaged.removeprefix("s3://") in every.stderr and "spade verify RUN --deep" in every.stderr


def _same_size_corruption(store: Store, path: str) -> None:
    """Flip bytes inside a data page (the file still opens, its size is the same): altered cells, not an error."""
    data = bytearray(store.read_bytes(path))
    middle = len(data) // 3
    data[middle : middle + 4] = bytes(b ^ 0xFF for b in data[middle : middle + 4])
    store.write_bytes(path, bytes(data))


def test_a_file_changed_in_place_is_named_and_left_out(filled: tuple[Store, list[str]]) -> None:
    store, args = filled
    changed = store.table_files("episodes", "run-a", 2)[1]
    size = len(store.read_bytes(changed))
    _same_size_corruption(store, changed)
    assert len(store.read_bytes(changed)) == size
    result = runner.invoke(app, ["sql", *args, *COUNT])
    assert _count(result) == 14 - 2
    [line] = _left_out(result)
    assert changed.removeprefix("s3://") in line and "has changed since its stage wrote it (digest)" in line


def test_a_file_replaced_by_another_of_the_same_schema_is_left_out(filled: tuple[Store, list[str]]) -> None:
    """Another valid file (three rows, another shard's) in place of a finished stage's two: its digest and row
    count are not the marker's, so its rows never reach the answer (15 rows if they did)."""
    store, args = filled
    replaced = store.table_files("episodes", "run-a", 1)[1]
    store.write_bytes(replaced, store.read_bytes(store.table_files("episodes", "run-a", 1)[0]))
    result = runner.invoke(app, ["sql", *args, *COUNT])
    assert _count(result) == 14 - 2
    [line] = _left_out(result)
    assert replaced.removeprefix("s3://") in line


def test_a_marker_whose_row_count_differs_names_the_file(filled: tuple[Store, list[str]]) -> None:
    store, args = filled
    record = read_marker(store, "007", 1, "rollout")
    assert record is not None and record.rows == {"episodes": 4}
    write_marker(store, record.model_copy(update={"rows": {"episodes": 5}}))
    result = runner.invoke(app, ["sql", *args, *COUNT])
    assert _count(result) == 10
    [line] = _left_out(result)
    assert "holds 4 rows of episodes, its marker recorded 5" in line and "run=007" in line


def test_files_no_marker_lists_are_not_read_and_are_named(filled: tuple[Store, list[str]]) -> None:
    store, args = filled
    stray = store.write_table("episodes", frame("episodes", 6), run_id="run-a", gen=1, stage="rollout-cli")
    result = runner.invoke(app, ["sql", *args, *COUNT])
    assert _count(result) == 14
    assert "no stage marker lists" in result.stderr and stray.path.removeprefix("s3://") in result.stderr
    assert _count(runner.invoke(app, ["sql", *args, "--all-files", *COUNT])) == 20
    quiet = runner.invoke(app, ["sql", *args, "--format", "json", "select count(*) as n from hints"])
    assert quiet.exit_code == 0 and quiet.stderr == "", quiet.output  # only the tables a statement names


def test_each_file_is_checked_once_across_commands(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The digests of a check are kept under $SPADE_CACHE: a second query reads each file once (DuckDB),
    not twice; a file rewritten since (a new stamp) is checked again."""
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    store = Store(str(tmp_path / "st"))
    _fill(store)
    reader = RunReader(Store(store.root))
    assert reader.check(["episodes"]).problems == []
    reads = reader.store.io_counts(reset=True)["read"]
    assert reads >= 5  # five files, each read for its digest and its footer
    again = RunReader(Store(store.root))
    assert again.check(["episodes"]).problems == [] and again.store.io_counts()["read"] == 0
    changed = store.table_files("episodes", "run-a", 2)[0]
    time.sleep(0.01)
    _same_size_corruption(store, changed)
    third = RunReader(Store(store.root))
    assert [p.path for p in third.check(["episodes"]).problems] == [changed]
    kept = list((tmp_path / "cache" / "digests").glob("*.json"))
    assert (
        len(kept) == 1 and len(json.loads(kept[0].read_text())["entries"]) == 5
    )  # the rewritten file's old entry gone
    for n in range(70):  # other stores' files: the directory keeps the ones used last
        (kept[0].parent / f"other-{n}.json").write_text('{"entries": []}')
    time.sleep(0.01)
    RunReader(Store(store.root)).check(["episodes"])  # nothing new to keep: no write
    _same_size_corruption(store, store.table_files("episodes", "007", 1)[0])  # a new stamp: a digest to keep
    RunReader(Store(store.root)).check(["episodes"])
    assert len(list(kept[0].parent.glob("*.json"))) == 64 and kept[0].exists()


def test_a_commands_own_write_is_read_under_its_marker_and_keeps_its_earlier_files(tmp_path: Path) -> None:
    """``spade eval --run-id`` / ``spade rollout --run-id`` write into a run around the pipeline under a marker
    of their own: their rows are queried, checked like a stage's, and a second write (another suite) keeps
    the files of the first."""
    from spade_core.config import load_config
    from spade_core.store.markers import write_command_marker

    store = Store(str(tmp_path / "st"))
    cfg = load_config("tiny", overrides=[f"store.root={store.root}"])
    first = store.write_table("episodes", frame("episodes", 3), run_id="r", gen=1, stage="rollout-cli", shard=0)
    write_command_marker(store, cfg, "r", 1, "rollout-cli", [first])
    second = store.write_table("episodes", frame("episodes", 2), run_id="r", gen=1, stage="rollout-cli", shard=1)
    record = write_command_marker(store, cfg, "r", 1, "rollout-cli", [second])
    assert record.files == {"episodes": [first.path, second.path]} and record.rows == {"episodes": 5}
    result = runner.invoke(app, ["sql", "--store", store.root, *COUNT])
    assert _count(result) == 5 and result.stderr == "", result.output
    again = store.write_table("episodes", frame("episodes", 4), run_id="r", gen=1, stage="rollout-cli", shard=0)
    record = write_command_marker(store, cfg, "r", 1, "rollout-cli", [again])  # shard 0 rewritten: 4 + 2 rows
    assert sorted(record.files["episodes"]) == sorted([first.path, second.path]) and record.rows == {"episodes": 6}
    assert _count(runner.invoke(app, ["sql", "--store", store.root, *COUNT])) == 6
