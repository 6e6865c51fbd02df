"""The embedded job end to end: seed envs validated in the jail, scripted episodes, tables, DuckDB."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.store.artifacts import Store
from spade_core.store.catalog import query

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("jail_processes_checked")]


def test_demo_writes_and_queries_the_store(tmp_path: Path) -> None:
    root = tmp_path / "store"
    result = CliRunner().invoke(app, ["demo", "--store", str(root), "--run-id", "t1"])
    assert result.exit_code == 0, result.output
    assert "seed environments: 12/12 valid" in result.stdout
    store = Store(str(root))
    frame = query(
        store, "select condition, avg(episode_return) as r, count(*) as n from episodes group by all order by 1"
    )
    assert frame.to_dict(orient="list") == {"condition": ["empty", "reference"], "r": [0.0, 1.0], "n": [24, 24]}
    checks = query(store, "select count(*) as n, bool_and(ok) as all_ok from validations where run_id = 't1'")
    assert (checks.n[0], checks.all_ok[0]) == (12, True)
