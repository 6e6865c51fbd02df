"""Verified reuse and ``spade verify``: a file of a finished stage deleted, truncated or corrupted after its
marker was written is found (by size at every reuse, by digest and schema with ``--deep``), the stage runs
again, and ``--repair`` removes exactly the damaged markers and those after them — on a local store and
on S3 (moto's server on loopback); end to end, ``spade run`` after a deleted file redoes that stage only."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.config import load_config
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.run_config import bind_run_config
from spade_core.pipeline.stage import Stage, execute
from spade_core.pipeline.status import generation_stages, next_generation
from spade_core.pipeline.status import stage_names as stages_for
from spade_core.store.artifacts import Store, StoreError
from spade_core.store.markers import StageRecord, list_markers, read_marker


def _docs(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        [{"doc_id": f"d{i}", "source": "s", "title": None, "text": f"text {i}", "n_words": 2} for i in range(n)]
    )


def _generation(root: str, endpoint: str | None = None) -> tuple[GenerationContext, list[StageRecord]]:
    """Every stage of a (model-free) generation 1: ``documents`` writes two files, each later stage one
    row of ``documents`` under its own name and depends on the stage before it."""
    overrides = [f"store.root={root}", "training.enabled=false"]
    cfg = load_config("tiny", overrides=overrides + ([f"store.endpoint_url={endpoint}"] if endpoint else []))
    store = Store.from_config(cfg.store)
    bind_run_config(store, "r", cfg)
    ctx = GenerationContext(cfg, store, "r", 1)
    records: list[StageRecord] = []
    for name in stages_for(cfg, 1):

        def body(run: GenerationContext, model: object, name: str = name) -> None:
            run.write("documents", _docs(2), 0)
            if name == "documents":
                run.write("documents", _docs(3), 1)

        upstream = {records[-1].name: records[-1]} if records else {}
        records.append(execute(Stage(name, body, inputs=tuple(upstream), writes=("documents",)), ctx, upstream))
    return ctx, records


def _rerun(ctx: GenerationContext, records: list[StageRecord]) -> list[str]:
    """Execute the generation's stages again with the same bodies; the statuses, in order."""
    statuses: list[str] = []
    previous: StageRecord | None = None
    for record in records:
        name = record.stage

        def body(run: GenerationContext, model: object, name: str = name) -> None:
            run.write("documents", _docs(2), 0)
            if name == "documents":
                run.write("documents", _docs(3), 1)

        upstream = {previous.name: previous} if previous else {}
        previous = execute(Stage(name, body, inputs=tuple(upstream), writes=("documents",)), ctx, upstream)
        statuses.append(previous.status)
    return statuses


def test_a_stage_whose_file_is_gone_or_resized_runs_again_and_says_which_file(tmp_path: Path, caplog) -> None:  # type: ignore[no-untyped-def]
    ctx, records = _generation(str(tmp_path))
    documents = records[0]
    assert sorted(documents.sizes) == sorted(documents.files["documents"]) and all(documents.sizes.values())
    assert _rerun(ctx, records) == ["reused"] * len(records)
    gone = documents.files["documents"][1]
    os.remove(gone)
    assert generation_stages(ctx.store, ctx.cfg, "r", 1)["documents"] == "damaged"
    assert next_generation(ctx.store, ctx.cfg, "r") == 1
    with caplog.at_level(logging.WARNING, logger="spade_core.pipeline.stage"):
        statuses = _rerun(ctx, records)
    # The damaged stage runs again; its files come back byte for byte, so the stages after it, whose input
    # digests are unchanged, are reused.
    assert statuses == ["ran"] + ["reused"] * (len(records) - 1)
    assert f"gen 1 documents: {gone} is missing: running the stage again" in caplog.text
    assert len(ctx.read("documents", ["documents"])) == 5 and next_generation(ctx.store, ctx.cfg, "r") == 2
    # A truncated file (another size) is found the same way.
    with open(gone, "r+b") as fh:
        fh.truncate(10)
    assert _rerun(ctx, records)[0] == "ran"


def test_a_read_takes_the_files_a_marker_lists_and_names_one_that_is_gone(tmp_path: Path) -> None:
    ctx, records = _generation(str(tmp_path))
    ctx.store.write_table("documents", _docs(7), run_id="r", gen=1, stage="documents", shard=9)  # not listed
    assert len(ctx.read("documents", ["documents"])) == 5
    os.remove(records[0].files["documents"][0])
    with pytest.raises(StoreError, match=r"documents-0\.parquet is listed by a stage marker but is missing"):
        ctx.read("documents", ["documents"])
    with pytest.raises(StoreError, match="stage 'nope' has no marker"):
        ctx.read("documents", ["nope"])


def _check_verify(root: str, corrupt: Path | None, records: list[StageRecord], store: Store) -> None:
    runner = CliRunner()
    clean = runner.invoke(app, ["verify", "r", "--store", root, "--deep"])
    assert clean.exit_code == 0, clean.output
    assert f"{len(records)} markers, {len(records) + 1} files checked (digests and schemas): 0 damaged" in clean.stdout
    first = records[0].files["documents"][0]
    third = records[2].files["documents"][0]
    store.remove_file(first)
    data = store.read_bytes(third)
    store.write_bytes(third, bytes(len(data)))  # same size, other bytes: only the digest sees it
    if corrupt is not None:
        assert corrupt.stat().st_size == len(data)
    quick = runner.invoke(app, ["verify", "r", "--store", root, "--quick"])
    assert quick.exit_code == 1 and quick.stdout.count("damaged: ") == 1, quick.output
    assert f"damaged: gen 1 documents: {store.locate(first)} is missing" in quick.stdout
    for args in ([], ["--deep"]):
        found = runner.invoke(app, ["verify", "r", "--store", root, *args])
        assert found.exit_code == 1 and found.stdout.count("damaged: ") == 2, found.output
        assert f"{records[2].name}: {store.locate(third)} has changed since its stage wrote it" in found.stdout
    repaired = runner.invoke(app, ["verify", "r", "--store", root, "--repair"])
    assert repaired.exit_code == 0, repaired.output
    # Every stage depends on the one before it: the damaged first one takes them all.
    left = list_markers(store, "r").get(1, {})
    assert left == {} and f"removed {len(records)} markers" in repaired.stdout
    assert "next: spade resume r" in repaired.stdout


def test_spade_verify_finds_missing_and_corrupted_files_and_repair_removes_their_markers(tmp_path: Path) -> None:
    ctx, records = _generation(str(tmp_path))
    _check_verify(str(tmp_path), Path(records[2].files["documents"][0]), records, ctx.store)
    unknown = CliRunner().invoke(app, ["verify", "nope", "--store", str(tmp_path)])
    assert unknown.exit_code == 2 and "run 'nope' has no stage markers" in unknown.stderr


def test_spade_verify_on_s3(s3_bucket: str, s3_endpoint: str, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_endpoint)
    root = s3_bucket
    ctx, records = _generation(root, s3_endpoint)
    _check_verify(root, None, records, ctx.store)


def test_repair_takes_only_the_damaged_stage_and_those_after_it(tmp_path: Path) -> None:
    ctx, records = _generation(str(tmp_path))
    middle = len(records) // 2
    os.remove(records[middle].files["documents"][0])
    result = CliRunner().invoke(app, ["verify", "r", "--store", str(tmp_path), "--repair"])
    assert result.exit_code == 0, result.output
    kept = set(list_markers(ctx.store, "r")[1])
    assert kept == {r.name for r in records[:middle]}
    assert read_marker(ctx.store, "r", 1, records[middle].name) is None


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.usefixtures("jail_processes_checked")
def test_spade_run_after_a_file_of_a_finished_generation_is_deleted_redoes_that_stage_only(
    tmp_path: Path, micro_model_dir: str
) -> None:
    """The case a user met: a finished run's rollout file deleted, then ``spade run`` reused every stage,
    ``spade status`` said complete and the episodes were gone from every query. Now status says the stage
    is damaged, and the same ``spade run`` redoes that shard (and only what its digest changes)."""
    import subprocess

    from test_resume import OVERRIDES, REPO, spade_command, spade_env

    from spade_core.store.catalog import query

    root = str(tmp_path / "store")
    sets = [f"--set={o}" for o in [*OVERRIDES, f"model.name_or_path={micro_model_dir}"]]
    command = spade_command("run", "--run-id", "v", "--store", root, *sets)
    env = spade_env(tmp_path)

    def run() -> None:
        done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert done.returncode == 0, done.stderr[-3000:]

    def episodes() -> tuple[int, int]:
        rows = query(Store(root), "select count(*), count(distinct episode_id) from episodes")
        return int(rows.iloc[0, 0]), int(rows.iloc[0, 1])

    run()
    store = Store(root)
    before = {path: store.read_bytes(path) for path in store.fs.glob(f"{root}/runs/v/gen=1/stages/*.json")}
    count = episodes()
    shard = read_marker(store, "v", 1, "rollout-s0", 0)
    assert shard is not None and count[0] == count[1] > 0
    os.remove(shard.files["episodes"][0])
    status = subprocess.run(
        spade_command("status", "v", "--store", root), cwd=REPO, env=env, capture_output=True, text=True
    )
    assert "gen 1 incomplete" in status.stdout and "rollout-s0:damaged" in status.stdout, status.stdout
    run()
    after = {path: store.read_bytes(path) for path in before}
    changed = {Path(path).stem for path in before if before[path] != after[path]}
    # The damaged shard ran again; every stage before the plays is untouched.
    assert "rollout-s0-0" in changed
    assert not changed & {"documents", "design", "validate", "pool", "hint", "rollout-s0-1"}, changed
    assert episodes() == count
