"""A store written while ``env_scores`` had a ``designer_reward`` column (the variant on step 0's plays;
the designer's reward is ``designer_rewards.reward``) still reads: through ``Store.read_table`` and
``read_files``, the DuckDB catalog, ``spade sql`` and the report, an old file beside a new one, the old
column left out."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from samples import write_stage
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.hashing import short_hash
from spade_core.report import load_run
from spade_core.store.artifacts import Store
from spade_core.store.catalog import query
from spade_core.store.markers import StageRecord, write_marker
from spade_core.store.schemas import SCHEMAS

COLUMNS = ["run_id", "gen", *SCHEMAS["env_scores"].names]
OLD_SCHEMA = pa.schema([*SCHEMAS["env_scores"], pa.field("designer_reward", pa.float64(), nullable=False)])


def _row(env_id: str, regret: float) -> dict[str, object]:
    return {
        "env_id": env_id,
        "design_id": None,  # a replayed environment: valid without a design, so the report counts it
        "skill": "optimization",
        "win_rate": 0.5,
        "r_hint": 0.5 + regret,
        "r_no_hint": 0.5,
        "regret": regret,
        "hint_leaked": False,
    }


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """Generation 1 written by pyarrow with the old schema, generation 2 by the store with the new one."""
    store = Store(str(tmp_path / "store"))
    old = pa.Table.from_pylist([_row("e1", 0.25) | {"designer_reward": 0.9}], schema=OLD_SCHEMA)
    sink = io.BytesIO()
    pq.write_table(old, sink)
    path = store.table_path("env_scores", "old", 1, "score")
    store.write_bytes(path, sink.getvalue())
    data = sink.getvalue()
    write_marker(  # the marker its score stage wrote then: the file, its size, digest and row count
        store,
        StageRecord(stage="score", run_id="old", gen=1, artifact_hash="old", digest="old",
                    files={"env_scores": [path]}, sizes={path: len(data)}, file_digests={path: short_hash(data)},
                    rows={"env_scores": 1}),
    )  # fmt: skip
    write_stage(store, "old", 2, "score", {"env_scores": pa.Table.from_pylist([_row("e2", 0.5)]).to_pandas()})
    return store


def test_the_old_file_has_the_column(store: Store) -> None:
    path = store.table_path("env_scores", "old", 1, "score")
    assert "designer_reward" in pq.read_schema(path).names
    assert "designer_reward" not in SCHEMAS["env_scores"].names


def test_store_reads_old_and_new_files_with_the_new_schema(store: Store) -> None:
    frame = store.read_table("env_scores", "old", stages=["score"])
    assert list(frame.columns) == COLUMNS
    assert frame[["gen", "env_id", "regret"]].values.tolist() == [[1, "e1", 0.25], [2, "e2", 0.5]]
    old = store.read_files("env_scores", [store.table_path("env_scores", "old", 1, "score")])
    assert list(old.columns) == COLUMNS and old["win_rate"].tolist() == [0.5]
    projected = store.read_table("env_scores", "old", 1, columns=["env_id", "regret"])
    assert projected.values.tolist() == [["old", 1, "e1", 0.25]]


@pytest.mark.parametrize("read_only", [False, True])
def test_the_catalog_reads_old_and_new_files(store: Store, read_only: bool) -> None:
    frame = query(store, "select * from env_scores order by gen", read_only=read_only)
    assert list(frame.columns) == COLUMNS
    assert frame[["gen", "env_id", "regret"]].values.tolist() == [[1, "e1", 0.25], [2, "e2", 0.5]]


def test_spade_sql_reads_the_old_file_and_no_longer_has_the_column(store: Store) -> None:
    runner = CliRunner()
    args = ["sql", "--store", store.base, "--format", "json"]
    result = runner.invoke(app, [*args, "select gen, env_id, regret from env_scores order by gen"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"gen": 1, "env_id": "e1", "regret": 0.25},
        {"gen": 2, "env_id": "e2", "regret": 0.5},
    ]
    gone = runner.invoke(app, [*args, "select designer_reward from env_scores"])
    assert gone.exit_code == 2 and "designer_reward" in gone.stderr and gone.stderr.count("\n") == 1


def test_the_report_reads_the_old_file(store: Store) -> None:
    data = load_run(store, "old")
    assert data.scores[["gen", "env_id"]].values.tolist() == [[1, "e1"], [2, "e2"]]
    assert data.designer_reward.empty  # no reward stage ran: no designer reward, not a zero
