from __future__ import annotations

import math
import os
from pathlib import Path

import pandas as pd
import pytest
from samples import ROWS, frame

from spade_core.hashing import short_hash
from spade_core.store.artifacts import Store, StoreError, WrittenFile
from spade_core.store.schemas import TABLES, SchemaError


@pytest.fixture(params=["local", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "local":
        return Store(str(tmp_path / "store"))
    root = request.getfixturevalue("s3_bucket")
    return Store(root, endpoint_url=request.getfixturevalue("s3_endpoint"))


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if hasattr(a, "tolist"):
        a = a.tolist()  # type: ignore[union-attr]
    return (
        a == b
        or (a is None and isinstance(b, float) and math.isnan(b))
        or (b is None and isinstance(a, float) and math.isnan(a))
    )


@pytest.mark.parametrize("table", TABLES)
def test_round_trip_every_table(store: Store, table: str) -> None:
    written = frame(table)
    path = store.write_table(table, written, run_id="r1", gen=2, stage="stage", shard=0).path
    assert path.endswith(f"tables/{table}/run=r1/gen=2/stage-0.parquet")
    back = store.read_table(table, run_id="r1", gen=2)
    assert list(back["run_id"]) == ["r1", "r1"] and list(back["gen"]) == [2, 2]
    for column, value in ROWS[table].items():
        got = back[column].iloc[1]
        if isinstance(value, list) and value and isinstance(value[0], dict):
            got = [dict(x) for x in got]
        if column == next(iter(ROWS[table])):
            value = f"{value}-1"
        assert _same(got, value), f"{table}.{column}: wrote {value!r}, read {got!r}"


def test_rewrite_replaces_never_duplicates(store: Store) -> None:
    store.write_table("episodes", frame("episodes", 3), run_id="r", gen=1, stage="rollout", shard=7)
    store.write_table("episodes", frame("episodes", 2), run_id="r", gen=1, stage="rollout", shard=7)
    files = store.table_files("episodes", "r", 1)
    assert len(files) == 1
    assert len(store.read_table("episodes")) == 2


def test_local_write_leaves_no_temp_files(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    for _ in range(3):
        store.write_table("hints", frame("hints"), run_id="r", gen=1, stage="hint")
    directory = tmp_path / "tables/hints/run=r/gen=1"
    assert sorted(os.listdir(directory)) == ["hint-0.parquet"]


def test_failed_write_keeps_the_previous_file(tmp_path: Path) -> None:
    store = Store(str(tmp_path))
    store.write_table("hints", frame("hints", 3), run_id="r", gen=1, stage="hint")
    bad = frame("hints").drop(columns=["hint"])
    with pytest.raises(SchemaError):
        store.write_table("hints", bad, run_id="r", gen=1, stage="hint")
    assert len(store.read_table("hints")) == 3


def test_missing_column_is_rejected(store: Store) -> None:
    with pytest.raises(SchemaError, match=r"table 'episodes': missing \['seed'\]"):
        store.write_table("episodes", frame("episodes").drop(columns=["seed"]), run_id="r", gen=1, stage="s")


def test_extra_column_is_rejected(store: Store) -> None:
    with pytest.raises(SchemaError, match=r"unexpected \['colour'\]"):
        store.write_table("hints", frame("hints").assign(colour="red"), run_id="r", gen=1, stage="s")


def test_mistyped_column_is_rejected() -> None:
    store = Store("/tmp/unused-spade-store")
    bad = frame("episodes").assign(seed=["3", "four"])
    with pytest.raises(
        SchemaError, match=r"column 'seed' must be int64, got dtype \w+ \(e.g. '3'\): holds (large_)?string"
    ):
        store.write_table("episodes", bad, run_id="r", gen=1, stage="s")


def test_lossy_float_to_int_is_rejected(tmp_path: Path) -> None:
    bad = frame("episodes").assign(turns=[1.5, 2.0])
    with pytest.raises(SchemaError, match="column 'turns' must be int32"):
        Store(str(tmp_path)).write_table("episodes", bad, run_id="r", gen=1, stage="s")


def test_null_in_required_column_is_rejected(tmp_path: Path) -> None:
    bad = frame("env_scores").assign(env_id=[None, "e"])
    with pytest.raises(SchemaError, match="column 'env_id' has 1 null value"):
        Store(str(tmp_path)).write_table("env_scores", bad, run_id="r", gen=1, stage="s")


@pytest.mark.parametrize("run_id", ["a/b", "x=1", "", "../up", "with space"])
def test_bad_run_ids_are_rejected(tmp_path: Path, run_id: str) -> None:
    with pytest.raises(StoreError, match="run id"):
        Store(str(tmp_path)).table_path("episodes", run_id, 1, "s")


def test_unknown_table(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="unknown table 'nope'"):
        Store(str(tmp_path)).write_table("nope", pd.DataFrame(), run_id="r", gen=1, stage="s")


def test_reading_an_empty_table_gives_typed_empty_frame(store: Store) -> None:
    empty = store.read_table("episodes")
    assert len(empty) == 0
    assert list(empty.columns)[:3] == ["run_id", "gen", "episode_id"]


def test_checkpoint_and_run_paths(store: Store) -> None:
    assert store.checkpoint_dir("r", 3).endswith("checkpoints/run=r/step=3")
    store.write_text(store.run_dir("r") + "/config.yaml", "seed: 0\n")
    assert store.read_bytes(store.run_dir("r") + "/config.yaml") == b"seed: 0\n"


def test_root_that_is_a_file(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(StoreError, match="exists and is not a directory"):
        Store(str(f))


def test_unsupported_url() -> None:
    with pytest.raises(StoreError, match="only local paths and s3:// URLs"):
        Store("gs://bucket/x")


def test_missing_bucket(s3_endpoint: str) -> None:
    with pytest.raises(StoreError, match="bucket 'no-such-bucket' does not exist"):
        Store("s3://no-such-bucket/p", endpoint_url=s3_endpoint)


def test_endpoint_from_standard_variable(s3_bucket: str, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    store = Store(s3_bucket)
    store.write_table("hints", frame("hints"), run_id="r", gen=1, stage="hint")
    assert len(store.read_table("hints")) == 2


def test_write_returns_the_file_with_rows_and_the_digest_of_its_bytes(store: Store) -> None:
    written = store.write_table("episodes", frame("episodes", 3), run_id="r", gen=1, stage="rollout", shard=2)
    assert isinstance(written, WrittenFile)
    assert (written.table, written.rows) == ("episodes", 3)
    assert written.path.endswith("tables/episodes/run=r/gen=1/rollout-2.parquet")
    assert written.digest == short_hash(store.read_bytes(written.path)) and len(written.digest) == 16


def test_empty_frame_is_written_as_a_schema_only_file(store: Store) -> None:
    written = store.write_table("hints", pd.DataFrame(), run_id="r", gen=1, stage="hint")
    assert written.rows == 0 and len(written.digest) == 16
    assert store.table_files("hints", "r", 1) == [written.path]
    back = store.read_table("hints", "r", 1)
    assert back.empty and list(back.columns) == [
        "run_id", "gen", "env_id", "hint", "leaks_solution", "model_ref", "policy_step"
    ]  # fmt: skip


def test_stage_filter_reads_only_the_named_stages_of_a_partition(store: Store) -> None:
    for stage, shard, rows in [("rollout", 0, 3), ("rollout", 1, 2), ("rollout-cli", 0, 4), ("seed_check", 0, 5)]:
        store.write_table("episodes", frame("episodes", rows), run_id="r", gen=1, stage=stage, shard=shard)
    store.write_table("episodes", frame("episodes", 7), run_id="r", gen=2, stage="rollout")
    assert len(store.read_table("episodes", "r", 1)) == 14  # no filter: every file of the partition
    assert [f.rsplit("/", 1)[-1] for f in store.table_files("episodes", "r", 1, stages=["rollout"])] == [
        "rollout-0.parquet",
        "rollout-1.parquet",
    ]
    assert len(store.read_table("episodes", "r", 1, stages=["rollout"])) == 5
    assert len(store.read_table("episodes", "r", 1, stages=["rollout-cli"])) == 4
    assert len(store.read_table("episodes", "r", 1, stages=("seed_check", "rollout"))) == 10
    assert len(store.read_table("episodes", "r", stages=["rollout"])) == 12  # every generation of the run
    assert store.read_table("episodes", "r", 1, stages=[]).empty


@pytest.mark.parametrize("stages", ["rollout", ["a/b"]])
def test_bad_stage_filters_are_rejected(tmp_path: Path, stages: object) -> None:
    with pytest.raises(StoreError, match="stage"):
        Store(str(tmp_path)).read_table("episodes", "r", 1, stages=stages)  # type: ignore[arg-type]


def test_a_shard_with_a_dash_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="shard 'a-1'"):
        Store(str(tmp_path)).table_path("episodes", "r", 1, "rollout", "a-1")


def test_column_projection_reads_only_the_named_columns(store: Store) -> None:
    store.write_table("episodes", frame("episodes", 3), run_id="r", gen=1, stage="rollout")
    back = store.read_table("episodes", "r", 1, columns=["seed", "episode_id", "gen"])
    assert list(back.columns) == ["run_id", "gen", "seed", "episode_id"]
    assert back["seed"].tolist() == frame("episodes", 3)["seed"].tolist()
    empty = store.read_table("episodes", "r", 9, columns=["seed"])
    assert list(empty.columns) == ["run_id", "gen", "seed"] and str(empty["seed"].dtype) == "int64"


def test_an_unknown_column_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match=r"table 'episodes' has no column\(s\) \['colour'\]"):
        Store(str(tmp_path)).read_table("episodes", columns=["seed", "colour"])


def test_io_counters_count_reads_listings_and_writes_of_their_own_store(store: Store) -> None:
    store.io_counts(reset=True)
    other = Store(store.root, store.endpoint_url)
    store.write_table("episodes", frame("episodes"), run_id="r", gen=1, stage="rollout", shard=0)
    store.write_table("episodes", frame("episodes"), run_id="r", gen=1, stage="rollout", shard=1)
    assert store.io_counts() == {"read": 0, "list": 0, "write": 2}
    store.read_table("episodes", "r", 1, stages=["rollout"], columns=["seed"])
    assert store.io_counts() == {"read": 2, "list": 1, "write": 2}
    store.exists(store.run_dir("r"))
    other.read_table("episodes", "r", 1, stages=["rollout"], columns=["seed"])
    assert store.io_counts(reset=True) == {"read": 2, "list": 2, "write": 2}
    assert store.io_counts() == {"read": 0, "list": 0, "write": 0}
    assert other.io_counts()["read"] == 2


def test_directory_upload_and_download_stream_every_file(store: Store, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "weights.bin").write_bytes(os.urandom(3 * 1024 * 1024))
    (src / "sub" / "tokenizer.json").write_text("{}")
    names = ["sub/tokenizer.json", "weights.bin"]
    remote = store.checkpoint_dir("r", 1)
    store.upload_files(src, remote, names)
    assert store.read_bytes(f"{remote}/sub/tokenizer.json") == b"{}"
    store.download_files(remote, tmp_path / "dst", names)
    assert (tmp_path / "dst" / "weights.bin").read_bytes() == (src / "weights.bin").read_bytes()
    assert (tmp_path / "dst" / "sub" / "tokenizer.json").read_text() == "{}"
    store.remove_dir(remote)
    assert not store.exists(f"{remote}/weights.bin")
    store.remove_dir(remote)  # already gone: no error
