"""What a stage reads and writes is declared: the context refuses the rest, names files after the writing
stage, and every file a stage produces (the trainer's checkpoint included) is listed in its marker, so the
markers are the only resume rule. Real stores and, for the train stage, a real ``accelerate launch``."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from spade_core.config import load_config
from spade_core.pipeline.context import GenerationContext, UndeclaredTable
from spade_core.pipeline.registry import STAGES, stage
from spade_core.pipeline.stage import Stage, execute
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import MARKER
from spade_core.store.integrity import file_problems
from spade_core.store.schemas import SCHEMAS


def _ctx(tmp_path: Path, *overrides: str) -> GenerationContext:
    cfg = load_config("tiny", overrides=[f"store.root={tmp_path}", *overrides])
    return GenerationContext(cfg, Store(str(tmp_path)), "r", 1)


def _docs(n: int) -> pd.DataFrame:
    return pd.DataFrame(
        [{"doc_id": f"d{i}", "source": "s", "title": None, "text": "t", "n_words": 1} for i in range(n)]
    )


def test_every_registry_stage_declares_tables_that_exist_and_writes_something() -> None:
    for s in STAGES:
        assert set(s.reads) <= set(SCHEMAS), s.name
        assert s.writes and set(s.writes) <= {*SCHEMAS, "checkpoint"}, s.name


def test_a_write_of_an_undeclared_table_is_refused_and_names_the_stage_and_table(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)

    def body(run: GenerationContext, model: object) -> None:
        run.write("documents", _docs(1))
        run.write("designs", pd.DataFrame())  # not declared

    with pytest.raises(
        UndeclaredTable, match=r"stage documents writes table 'designs' but declares writes of \['documents'\]"
    ):
        execute(Stage("documents", body, writes=("documents",)), ctx, {})
    assert not ctx.store.fs.exists(f"{ctx.store.run_dir('r')}/gen=1/stages")  # no marker: the stage failed


def test_a_read_of_an_undeclared_table_is_refused(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)

    def writes_documents(run: GenerationContext, model: object) -> None:
        run.write("documents", _docs(2))

    execute(Stage("documents", writes_documents, writes=("documents",)), ctx, {})

    def reads_documents(run: GenerationContext, model: object) -> None:
        run.read("documents", ["documents"])

    with pytest.raises(UndeclaredTable, match=r"stage hint reads table 'documents' but declares reads of \['pool'\]"):
        execute(Stage("hint", reads_documents, reads=("pool",), writes=("hints",)), ctx, {})
    with pytest.raises(UndeclaredTable, match=r"reads table 'memory'"):
        execute(Stage("hint", lambda run, model: {"n": len(run.previous_memory())}, writes=("hints",)), ctx, {})


def test_files_are_named_after_the_stage_that_writes_them(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)

    def body(run: GenerationContext, model: object) -> None:
        run.write("documents", _docs(1), 3)
        run.write("designs", pd.DataFrame(), 3)

    record = execute(Stage("validate", body, writes=("documents", "designs")), ctx, {}, shard=3)
    names = sorted(Path(p).name for paths in record.files.values() for p in paths)
    assert names == ["validate-3.parquet", "validate-3.parquet"]
    assert {Path(p).parent.parent.parent.name for paths in record.files.values() for p in paths} == {
        "documents",
        "designs",
    }
    with pytest.raises(UndeclaredTable, match="outside a stage execution"):
        ctx.write("documents", _docs(1))


@pytest.mark.timeout(900)
def test_the_train_stage_lists_its_checkpoint_and_runs_again_when_it_is_gone(tmp_path: Path) -> None:
    """Nothing to train: the trainer still writes checkpoint 1 (unchanged, pointing at its parent). The
    stage's marker lists the checkpoint's marker file; with that file gone the stage is damaged and runs
    again (no other rule reuses or skips a checkpoint)."""
    ctx = _ctx(tmp_path)
    train = stage("train-s0", ctx.cfg, 1)
    first = execute(train, ctx, {})
    checkpoint = f"{ctx.store.checkpoint_dir('r', 1)}/{MARKER}"
    assert first.status == "ran" and first.files["checkpoint"] == [checkpoint]
    assert execute(train, ctx, {}).status == "reused"
    ctx.store.fs.rm(checkpoint)
    assert [p.path for p in file_problems(ctx.store, first)] == [checkpoint]
    again = execute(train, ctx, {})
    assert again.status == "ran" and ctx.store.fs.exists(checkpoint)
