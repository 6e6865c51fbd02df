"""A run's environments leave the project: ``spade envs export`` writes a dataset that the real ``datasets``
loads and whose rows are the run's pool; every exported environment passes Gymnasium's own ``check_env``
through ``gymnasium.make("spade/<env_id>")`` in the real jail; ``designer.fixed_pool: export:DIR`` plays it.

The run is :mod:`export_samples`' tiny finished run: real seed and starter environments written as a run's
stages leave them (see there).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from export_samples import RUN, tiny_run
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.config import load_config
from spade_core.designer.pool import fixed_pool
from spade_core.envs.export import (
    DATA_FILE,
    EXPORT_SCHEMA,
    POOL_COLUMNS,
    ExportFilter,
    build_export,
    read_export,
)
from spade_core.envs.gym import register_export
from spade_core.envs.gym_check import check_registered_env
from spade_core.store.artifacts import Store
from spade_core.store.reader import RunReader

runner = CliRunner()


def _export(tmp_path: Path, *args: str) -> tuple[Store, Path]:
    store = Store(str(tmp_path / "store"))
    tiny_run(store)
    out = tmp_path / "export"
    result = runner.invoke(app, ["envs", "export", RUN, "--to", str(out), "--store", store.base, *args])
    assert result.exit_code == 0, result.output
    return store, out


def _error(tmp_path: Path, *args: str) -> str:
    result = runner.invoke(app, ["envs", "export", *args, "--store", str(tmp_path / "store")])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def test_the_export_loads_with_datasets_and_reproduces_the_pool_rows(tmp_path: Path) -> None:
    import datasets

    store, out = _export(tmp_path)
    loaded = datasets.load_dataset("parquet", data_files=str(out / DATA_FILE), cache_dir=str(tmp_path / "hf"))
    rows = loaded["train"]
    assert rows.column_names == EXPORT_SCHEMA.names
    # one row per environment, at the first generation whose pool held it: the pool table's rows
    pool = RunReader(store).rows("pool", [RUN]).sort_values(["gen", "env_id"]).drop_duplicates("env_id")
    exported = rows.to_pandas()
    assert exported[POOL_COLUMNS].to_dict("records") == pool[POOL_COLUMNS].to_dict("records")
    assert exported["gen"].tolist() == pool["gen"].tolist()
    # the card's header lets `load_dataset(DIR)` find the same data
    by_card = datasets.load_dataset(str(out), cache_dir=str(tmp_path / "hf2"))["train"]
    assert by_card.to_pandas()["env_id"].tolist() == exported["env_id"].tolist()


def test_each_row_carries_its_verdict_lineage_and_scores_per_generation(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    envs = tiny_run(store)
    a, b, c = envs["designed"]
    rows = {r["env_id"]: r for r in build_export(store, RUN).rows.to_pylist()}
    assert envs["refused"].env_id not in rows  # refused by the validator: never in a pool
    first = rows[a.env_id]
    assert (first["design_id"], first["doc_id"], first["gen"], first["gens"]) == ("d1", "doc-a", 1, [1, 2])
    assert [s["gen"] for s in first["scores"]] == [1, 2]
    assert (first["scores"][0]["win_rate"], first["scores"][0]["regret"]) == (0.25, 0.5)
    assert (first["win_rate"], first["regret"]) == (0.5, 0.0)  # the latest generation's
    assert first["valid"] and [c["check"] for c in first["checks"]] == ["parses", "one_env_class", "not_trivial"]
    mutant = rows[envs["mutant"].env_id]
    assert (mutant["parent_env_id"], mutant["lineage"], mutant["gen"]) == (a.env_id, [a.env_id], 2)
    starter = rows[envs["starter"].env_id]
    assert (starter["source"], starter["design_id"], starter["valid"], starter["checks"]) == (
        "starter",
        None,
        None,
        None,
    )
    assert rows[c.env_id]["kind"] == "tool" and rows[b.env_id]["skill"] == "logical_deduction"


def test_the_card_names_the_schema_config_hash_model_and_corpus_licence(tmp_path: Path) -> None:
    _, out = _export(tmp_path)
    card = (out / "README.md").read_text()
    assert card.startswith("---\nlicense: cc-by-sa-4.0\n")
    assert f"| config hash | `{load_config('tiny').config_hash()}` |" in card
    assert "| model | SmolLM2-135M-Instruct (embedded, Apache-2.0) |" in card
    assert "CC BY-SA 4.0" in card
    for name in EXPORT_SCHEMA.names:
        assert f"| `{name}` |" in card


def test_filters_keep_a_generation_a_skill_and_a_band(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    envs = tiny_run(store)

    def kept(**bounds: object) -> set[str]:
        return set(build_export(store, RUN, ExportFilter(**bounds)).rows.column("env_id").to_pylist())  # type: ignore[arg-type]

    a, b, c = (e.env_id for e in envs["designed"])
    mutant, starter = envs["mutant"].env_id, envs["starter"].env_id
    assert kept(gen=2) == {a, mutant}
    assert kept(skills=("logical_deduction",)) == {b, starter}
    assert kept(min_regret=0.25) == {c, mutant}
    assert kept(min_win_rate=0.5, max_win_rate=0.5) == {a, b, mutant}


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nope", "--to", "X"], "run 'nope' is not in the store"),
        ([RUN, "--to", "X", "--gen", "7"], "--gen 7: run 'tiny-run' has no pool for it (generations: 1, 2)"),
        ([RUN, "--to", "X", "--skill", "cooking"], "--skill 'cooking': no environment of run 'tiny-run' has it"),
        ([RUN, "--to", "X", "--min-win-rate", "0.9", "--max-win-rate", "0.1"], "--min-win-rate 0.9 is above"),
        ([RUN, "--to", "X", "--max-win-rate", "1.5"], "--max-win-rate 1.5 is outside [0, 1]"),
        ([RUN, "--to", "X", "--min-regret", "0.9"], "no environment of run 'tiny-run' passes the filters"),
        ([RUN, "--to", "ftp://host/x"], "only local paths and s3:// URLs are supported"),
    ],
)
def test_a_bad_run_directory_or_filter_is_one_line(tmp_path: Path, args: list[str], says: str) -> None:
    tiny_run(Store(str(tmp_path / "store")))
    args = [str(tmp_path / "X") if a == "X" else a for a in args]
    assert says in _error(tmp_path, *args)
    assert not (tmp_path / "X").exists()


def test_a_directory_that_is_not_empty_needs_force(tmp_path: Path) -> None:
    store, out = _export(tmp_path)
    assert "is not empty (--force replaces an export there)" in _error(tmp_path, RUN, "--to", str(out))
    again = runner.invoke(
        app, ["envs", "export", RUN, "--to", str(out), "--store", store.base, "--gen", "2", "--force"]
    )
    assert again.exit_code == 0, again.output
    assert len(read_export(str(out))) == 2


def test_a_run_on_s3_exports_to_s3_and_reads_back(s3_bucket: str, s3_endpoint: str) -> None:
    store = Store(s3_bucket, endpoint_url=s3_endpoint)
    tiny_run(store)
    target = s3_bucket.rsplit("/", 1)[0] + "/exports/tiny"
    args = ["envs", "export", RUN, "--to", target, "--store", s3_bucket, "--set", f"store.endpoint_url={s3_endpoint}"]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    exported = read_export(target, endpoint_url=s3_endpoint)
    assert exported["env_id"].tolist() == build_export(store, RUN).rows.column("env_id").to_pylist()


@pytest.mark.usefixtures("jail_processes_checked")
def test_every_exported_environment_passes_check_env_through_gymnasium_make(tmp_path: Path) -> None:
    import gymnasium

    _, out = _export(tmp_path)
    ids = register_export(str(out))
    assert ids == [f"spade/{e}" for e in read_export(str(out))["env_id"]]
    for gym_id in ids:
        assert check_registered_env(gym_id) == [], gym_id
    env = gymnasium.make(ids[0])
    try:
        observation, _ = env.reset(seed=3)
        solved = env.unwrapped.solution()  # type: ignore[attr-defined]
        assert observation and env.step(solved)[1] == 1.0
    finally:
        env.close()


def test_a_fixed_pool_of_the_export_is_the_exports_environments(tmp_path: Path) -> None:
    _, out = _export(tmp_path)
    cfg = load_config("tiny", overrides=[f"designer.fixed_pool=export:{out}", f"store.root={tmp_path / 'b'}"])
    pool = fixed_pool(cfg, Store(str(tmp_path / "b")), "baseline", 1)
    exported = read_export(str(out)).sort_values("env_id")
    assert pool["env_id"].tolist() == exported["env_id"].tolist()
    assert pool["code"].tolist() == exported["code"].tolist()
    assert set(pool["source"]) == {"fixed"} and pool["design_id"].isna().all()


def test_a_fixed_pool_naming_no_export_is_one_line_before_anything_is_written(tmp_path: Path) -> None:
    pool = f"designer.fixed_pool=export:{tmp_path / 'none'}"
    result = runner.invoke(app, ["run", "--run-id", "r", "--store", str(tmp_path / "s"), "--set", pool])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().count("\n") == 0 and "holds no SPADE export" in result.stderr
    assert not (tmp_path / "s").exists()


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("jail_processes_checked")
def test_a_fixed_pool_of_the_export_plays_a_generation_without_error(tmp_path: Path, micro_model_dir: str) -> None:
    """One generation of K = 1 step of another run on the export, with the production leases (the micro model
    plays, the train stage runs): its pool is the export's environments and no play broke."""
    from spade_core.pipeline.local import run_run
    from spade_core.pipeline.status import generation_complete
    from spade_core.store.catalog import query

    _, out = _export(tmp_path)
    overrides = [
        f"store.root={tmp_path / 'baseline'}",
        f"model.name_or_path={micro_model_dir}",
        "model.backend=transformers",
        f"designer.fixed_pool=export:{out}",
        "rollout.plays_no_hint=2",
        "rollout.plays_hint=0",
        "rollout.max_tokens_per_turn=8",
        "rollout.hint_max_words=12",
        "training.steps_per_generation=1",
        "training.gradient_checkpointing=false",
        "memory.report_diversity=false",
    ]
    cfg = load_config("tiny", overrides=overrides)
    store = Store(str(tmp_path / "baseline"))
    run_run(cfg, store, "baseline", [1])
    assert generation_complete(store, cfg, "baseline", 1)
    pool = query(store, "select env_id, source from pool where run_id = 'baseline' order by env_id")
    assert pool["env_id"].tolist() == sorted(read_export(str(out))["env_id"]) and set(pool["source"]) == {"fixed"}
    plays = query(
        store,
        "select env_id, count(*) n, count(error_type) errors from episodes where run_id = 'baseline' group by all",
    )
    assert sorted(plays["env_id"]) == pool["env_id"].tolist()
    assert plays["n"].tolist() == [cfg.rollout.plays_no_hint] * len(pool) and plays["errors"].sum() == 0, plays


@pytest.mark.parametrize(
    ("value", "ok"),
    [("export:", False), ("export: out", False), ("export:my exports/r 1", True), ("export:s3://b/x", True)],
)
def test_an_export_pool_names_a_directory(value: str, ok: bool) -> None:
    import pydantic

    from spade_core.config import DesignerConfig

    if ok:
        assert DesignerConfig(fixed_pool=value).fixed_pool == value
    else:
        with pytest.raises(pydantic.ValidationError, match="fixed_pool"):
            DesignerConfig(fixed_pool=value)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("jail_processes_checked")
def test_a_real_tiny_runs_export_loads_and_every_environment_passes_check_env(
    tmp_path: Path, micro_model_dir: str
) -> None:
    """A generation the real pipeline ran (the micro model designs, its noise refused by the validator; the pool
    holds the starters and the memory's replays) exports through the command, loads with ``datasets`` and every
    exported environment passes ``check_env`` through ``gymnasium.make``."""
    import datasets

    from spade_core.pipeline.local import run_run

    overrides = [
        f"store.root={tmp_path / 'store'}",
        f"model.name_or_path={micro_model_dir}",
        "model.backend=transformers",
        "designer.documents_per_generation=1",
        "designer.group_size=1",
        "designer.max_new_tokens=24",
        "designer.skills_per_generation=1",
        "designer.kind=game",
        "corpus.max_words=40",
        "rollout.replay_envs=2",
        "rollout.starter_envs=2",
        "rollout.plays_no_hint=2",
        "rollout.plays_hint=2",
        "rollout.max_turns=2",
        "rollout.max_tokens_per_turn=8",
        "rollout.hint_max_words=16",
        "memory.report_diversity=false",
        "training.enabled=false",
        "training.steps_per_generation=1",
    ]
    store = Store(str(tmp_path / "store"))
    run_run(load_config("tiny", overrides=overrides), store, "tiny", [1])
    out = tmp_path / "export"
    args = ["envs", "export", "tiny", "--to", str(out), "--store", store.base]
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    rows = datasets.load_dataset("parquet", data_files=str(out / DATA_FILE), cache_dir=str(tmp_path / "hf"))["train"]
    pool = RunReader(store).rows("pool", ["tiny"]).sort_values("env_id")
    assert sorted(rows["env_id"]) == pool["env_id"].tolist() and len(pool) >= 2
    assert {"starter", "replay"} <= set(rows["source"])  # the micro model writes no valid design
    assert all(s and s[0]["gen"] == 1 for s in rows["scores"])  # every pool environment was played and scored
    for gym_id in register_export(str(out)):
        assert check_registered_env(gym_id, max_turns=2) == [], gym_id
