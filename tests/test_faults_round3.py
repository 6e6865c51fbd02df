"""Faults, round 3: what a probe on copies of a demo store found losing data silently or accepting a bad
result — each case a test that failed before its fix.

- A checkpoint damaged in place or deleted: its marker records every file's size and digest; the train
  stage lists them, so a reuse finds a file missing and ``spade verify`` one changed; and a checkpoint is
  checked before it is loaded, locally and as it comes down from S3, so a damaged one is one line.
- An engine replaced after a fault: said on the console, in the summary and by ``spade status``.
- Two runs on one run id: the second is refused in one line naming the holder (local and S3); a killed
  run's lock is taken over.
- ``--store ""``: one line, not the default store.
- A 5 MB document with no whitespace: cut to the characters its word budget allows, not designed from whole.
- A stage the flow ran again after a failure is counted in the summary (the trainer killed mid-step is
  tests/test_train.py's: one line naming the step and the signal, its output in a log file).
- S3's bare 403 reads as access refused, naming the object, not ``[Errno None] None: 's3://…'``.
- SIGTERM to ``spade run``: stops within seconds, ends every process it started, gives the lock back and
  says how to resume, in one line.
- A table directory linked out of the store: no write or removal goes through it; ``spade sql`` names it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spade_core.config import load_config
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import (
    CheckpointError,
    checkpoint_files,
    local_checkpoint_dir,
    model_path_for_checkpoint,
    read_marker,
    write_checkpoint,
)
from spade_core.store.integrity import file_problems
from spade_core.store.markers import StageRecord

RUN = "r"


def saved_model(tmp_path: Path) -> Path:
    """A directory as ``save_pretrained`` leaves one (random weights: any change shows)."""
    src = tmp_path / "saved"
    src.mkdir()
    (src / "model.safetensors").write_bytes(os.urandom(64 * 1024))
    (src / "config.json").write_text('{"model_type": "llama"}')
    (src / "optimizer.pt").write_bytes(os.urandom(8 * 1024))
    return src


def train_record(store: Store, step: int) -> StageRecord:
    """The train stage's marker as it lists what the training of checkpoint ``step`` wrote."""
    files = checkpoint_files(store, RUN, step)
    return StageRecord(
        stage="train-s0",
        run_id=RUN,
        gen=1,
        artifact_hash="a",
        digest="d",
        files={"checkpoint": [f.path for f in files]},
        sizes={f.path: f.size for f in files},
        file_digests={f.path: f.digest for f in files},
    )


def zero_inside(path: Path) -> None:
    """Zero 4 KB in the middle of a file: its size stays, its content changes."""
    with open(path, "r+b") as fh:
        fh.seek(8192)
        fh.write(b"\0" * 4096)


def test_a_checkpoint_changed_in_place_is_refused_before_it_is_loaded_and_spade_verify_finds_it(
    tmp_path: Path,
) -> None:
    store = Store(str(tmp_path / "store"))
    write_checkpoint(store, saved_model(tmp_path), RUN, 1, {"kind": "full", "parent_step": 0})
    meta = read_marker(store, RUN, 1)
    assert set(meta["digests"]) == set(meta["sizes"]) == {"config.json", "model.safetensors", "optimizer.pt"}
    cfg = load_config("tiny")
    assert model_path_for_checkpoint(cfg, store, RUN, 1) == store.checkpoint_dir(RUN, 1)  # whole: used
    record = train_record(store, 1)
    assert len(record.files["checkpoint"]) == 4 and file_problems(store, record, weights=True) == []

    weights = Path(store.checkpoint_dir(RUN, 1)) / "model.safetensors"
    zero_inside(weights)
    with pytest.raises(CheckpointError) as refused:
        model_path_for_checkpoint(cfg, store, RUN, 1)
    assert str(refused.value) == (
        f"checkpoint run={RUN} step=1: model.safetensors has changed since it was written (digest); "
        f"'spade verify {RUN} --repair' removes it and the stages after it, then 'spade resume {RUN}' trains it again"
    )
    # spade verify reads the weights; a reuse checks their sizes (gigabytes each), the load above their bytes
    assert [(Path(p.path).name, p.reason) for p in file_problems(store, record, weights=True)] == [
        ("model.safetensors", "has changed since its stage wrote it (digest)")
    ]
    assert file_problems(store, record) == []


def test_a_deleted_checkpoint_file_makes_the_train_stage_run_again_and_is_refused_at_load(tmp_path: Path) -> None:
    store = Store(str(tmp_path / "store"))
    write_checkpoint(store, saved_model(tmp_path), RUN, 1, {"kind": "full", "parent_step": 0})
    record = train_record(store, 1)
    (Path(store.checkpoint_dir(RUN, 1)) / "model.safetensors").unlink()
    assert [(Path(p.path).name, p.reason) for p in file_problems(store, record)] == [
        ("model.safetensors", "is missing")
    ]  # a reuse of the train stage finds it: the step is trained again
    with pytest.raises(CheckpointError, match=r"^checkpoint run=r step=1: model\.safetensors is missing; "):
        local_checkpoint_dir(store, RUN, 1)


def test_an_s3_checkpoint_changed_in_place_is_refused_as_it_comes_down(
    s3_bucket: str, s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    store = Store(s3_bucket, endpoint_url=s3_endpoint)
    write_checkpoint(store, saved_model(tmp_path), RUN, 1, {"kind": "full", "parent_step": 0})
    path = f"{store.checkpoint_dir(RUN, 1)}/model.safetensors"
    data = bytearray(store.read_bytes(path))
    data[8192:12288] = b"\0" * 4096
    store.write_bytes(path, bytes(data))  # same size, other bytes
    with pytest.raises(CheckpointError, match=r"model\.safetensors has changed since it was written"):
        local_checkpoint_dir(store, RUN, 1)
    assert not list((tmp_path / "cache").rglob("model.safetensors"))  # no damaged copy left to trust next time


DIED = "the server died (exit code 0): EngineDeadError"


def rollout_records() -> list[StageRecord]:
    """A rollout's shard records and its whole-stage record, as the runner writes them: one shard's engine was
    replaced after it died; the replica restarted after the trainer's turn (no error) is no fault."""
    swaps = [
        {"method": "restart", "seconds": 36.0, "error": DIED},
        {"method": "restart", "seconds": 30.0, "error": None},
        {"method": "reload", "seconds": 2.0, "error": None},
    ]
    common = {"run_id": RUN, "gen": 1, "artifact_hash": "a"}
    shard = StageRecord(stage="rollout-s0", shard=0, digest="s0", info={"weight_swaps": swaps}, **common)
    whole = StageRecord(stage="rollout-s0", digest="w", info={"shards": 1, "weight_swaps": swaps}, **common)
    return [shard, whole]


def test_an_engine_replaced_after_a_fault_is_said_on_the_console_in_the_summary_and_by_spade_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from typer.testing import CliRunner

    from flows.report import ProgressEvent
    from spade_core.cli import app
    from spade_core.cli.run_cmd import Display
    from spade_core.pipeline.run_config import bind_run_config
    from spade_core.pipeline.status import engine_faults
    from spade_core.report.summary import summary_markdown
    from spade_core.store.markers import write_marker

    records = rollout_records()
    assert engine_faults(records) == [DIED]  # the whole-stage record's, once; the planned restart is none
    # the console: a line under the stage's own
    Display()(ProgressEvent(RUN, 1, "rollout-s0", None, None, "ran", 80.0, 20, 5, 10, engine_faults=(DIED,)))
    assert f"the engine was replaced: {DIED}" in " ".join(capsys.readouterr().err.split())
    # the summary's table
    summary = {
        "run_id": RUN, "gen": 1, "designs": 0, "valid": 0, "valid_rate": None, "envs": 0, "replayed": 0,
        "episodes": 0, "win_rate": None, "regret": None, "diversity": None, "train_loss": None, "train_steps": 0,
        "model_calls": 0, "engine_faults": [DIED], "stages": [],
    }  # fmt: skip
    assert f"| engine replaced after a fault (first cause) | 1 ({DIED}) |" in summary_markdown(summary)
    # spade status
    cfg = load_config("tiny", overrides=[f"store.root={tmp_path}"])
    store = Store(str(tmp_path))
    bind_run_config(store, RUN, cfg)
    for record in records:
        write_marker(store, record)
    shown = CliRunner().invoke(app, ["status", RUN, "--store", str(tmp_path)])
    assert shown.exit_code == 0, shown.output
    assert f"the engine was replaced 1 time(s) after a fault; first: {DIED}" in shown.stdout


def test_a_second_run_of_a_run_id_is_refused_in_one_line_naming_the_holder_and_writes_nothing(
    tmp_path: Path,
) -> None:
    import subprocess
    import sys

    from typer.testing import CliRunner

    from spade_core.cli import app
    from spade_core.store.runlock import RunLock

    hold = (
        "import sys; from spade_core.store.artifacts import Store; from spade_core.store.runlock import RunLock\n"
        "with RunLock(Store(sys.argv[1]), 'demo'):\n    print('held', flush=True); sys.stdin.read()"
    )
    first = subprocess.Popen(
        [sys.executable, "-c", hold, str(tmp_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )  # the first run
    try:
        assert first.stdout is not None and first.stdout.readline().strip() == "held"
        refused = CliRunner().invoke(app, ["run", "--run-id", "demo", "--store", str(tmp_path)])
        assert refused.exit_code == 2
        assert refused.stderr.startswith(
            f"error: run 'demo' is in use by another run ({os.uname().nodename}:{first.pid} "
        )
        assert len(refused.stderr.strip().splitlines()) == 1
        assert sorted(p.name for p in (tmp_path / "runs" / "demo").iterdir()) == ["run.lock"]  # no config written
    finally:
        first.communicate("", timeout=60)
    assert not (tmp_path / "runs" / "demo").exists()  # released: nothing left
    with RunLock(Store(str(tmp_path)), "demo") as outer, RunLock(Store(str(tmp_path)), "demo") as inner:
        assert not outer.nested and inner.nested  # `spade run` holds it, the flow it starts here takes it again


def test_a_killed_runs_lock_is_taken_over_and_a_live_one_elsewhere_is_not(tmp_path: Path) -> None:
    import json
    import socket
    import subprocess
    import sys
    import time

    from spade_core.store.runlock import STALE_AFTER_S, RunLock, RunLocked, lock_path

    store = Store(str(tmp_path))
    dead = int(subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True).stdout)  # fmt: skip
    here = {"host": socket.gethostname(), "pid": dead, "token": "t", "started": "then", "heartbeat": time.time()}
    elsewhere_old = {**here, "host": "node-7", "pid": 1, "heartbeat": time.time() - STALE_AFTER_S - 5}
    elsewhere_live = {**elsewhere_old, "heartbeat": time.time()}
    for holder, taken in ((here, True), (elsewhere_old, True), (elsewhere_live, False)):
        store.write_text(lock_path(store, "r"), json.dumps(holder))
        if taken:
            with RunLock(store, "r"):
                assert json.loads(store.read_bytes(lock_path(store, "r")))["pid"] == os.getpid()
        else:
            with pytest.raises(RunLocked, match=r"in use by another run \(node-7:1 since then"):
                RunLock(store, "r").acquire()


def test_the_run_lock_holds_on_s3_too(s3_bucket: str, s3_endpoint: str) -> None:
    import json
    import socket

    from spade_core.store.runlock import RunLock, RunLocked, lock_path

    store = Store(s3_bucket, endpoint_url=s3_endpoint)
    with RunLock(store, "r"):
        other = {"host": "node-7", "pid": 1, "token": "t", "started": "now", "heartbeat": 9e12}
        store.write_text(lock_path(store, "r"), json.dumps(other))  # as another machine's run would hold it
        with pytest.raises(RunLocked, match="node-7:1"):
            RunLock(store, "r").acquire()
        store.write_text(lock_path(store, "r"), json.dumps({**other, "host": socket.gethostname(), "pid": os.getpid()}))
    with RunLock(store, "r"):
        pass


@pytest.mark.parametrize("command", [["run", "--run-id", "r"], ["status", "r"], ["verify", "r"], ["report", "r"]])
def test_an_empty_store_is_one_line_not_the_default_store(command: list[str]) -> None:
    from typer.testing import CliRunner

    from spade_core.cli import app

    done = CliRunner().invoke(app, [*command, "--store", ""])
    assert done.exit_code == 2, done.output
    assert done.stderr.strip().splitlines() == [
        "error: --store '' is empty: give a directory or s3://bucket/prefix (none: ./spade-store)"
    ]


def test_a_huge_single_line_document_is_bounded_in_characters_too(tmp_path: Path) -> None:
    import json

    from spade_core.designer.corpus import CHARS_PER_WORD, document_id, sample_documents

    blob = "a" * 5_000_000  # 5 MB, no whitespace: one "word"
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": blob}) + "\n" + json.dumps({"text": "a short lead of five words"}) + "\n")
    docs = sample_documents(str(corpus), 2, seed=0, max_words=300)
    huge = docs[docs["doc_id"] == document_id(blob)].iloc[0]
    assert len(huge["text"]) == 300 * CHARS_PER_WORD and huge["n_words"] == 1  # its id is still the whole text's
    assert "a short lead of five words" in set(docs["text"])


def test_a_stage_the_flow_ran_again_after_a_failure_is_counted_in_the_summary(tmp_path: Path) -> None:
    from dataclasses import replace

    from spade_core.pipeline.context import GenerationContext
    from spade_core.pipeline.stage import Stage, execute, finish
    from spade_core.report.summary import summary_markdown

    cfg = load_config("tiny", overrides=[f"store.root={tmp_path}"])
    ctx = GenerationContext(cfg, Store(str(tmp_path)), RUN, 1)
    stage = Stage("documents", lambda run, model: {})
    first_try = execute(stage, ctx, {}, None)
    third_try = execute(replace(stage, name="pool"), replace(ctx, attempt=3), {}, None)  # two failures before
    assert "retries" not in first_try.info and third_try.info["retries"] == 2
    shards = [execute(stage, replace(ctx, attempt=a), {}, None, shard) for shard, a in ((0, 2), (1, 1))]
    assert finish(stage, ctx, shards).info["retries"] == 1  # a sharded stage's: its shards', summed
    summary = {
        "run_id": RUN, "gen": 1, "designs": 0, "valid": 0, "valid_rate": None, "envs": 0, "replayed": 0,
        "episodes": 0, "win_rate": None, "regret": None, "diversity": None, "train_loss": None, "train_steps": 0,
        "model_calls": 0, "stage_retries": 2, "stages": [],
    }  # fmt: skip
    assert "| stages run again after a failure | 2 |" in summary_markdown(summary)


def test_s3_access_denied_reads_as_access_denied_not_errno_none(s3_endpoint: str) -> None:
    import boto3
    from flaky_s3 import FaultPlan, flaky_s3
    from samples import frame

    from spade_core.faults import fault_line
    from spade_core.store.artifacts import StoreError

    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket="spade-round3-denied")
    root = "s3://spade-round3-denied/store"
    calm = FaultPlan(drop=0, lost=0, truncate=0, slowdown=0, unavailable=0, delay=0)
    with flaky_s3(s3_endpoint, plan=calm, lifetime_s=60) as proxy:
        store = Store(root, endpoint_url=proxy.url)
        store.write_table("hints", frame("hints"), run_id="r", gen=1, stage="hint")
        path = store.table_files("hints", "r", 1)[0]
        proxy.deny.add("spade-round3-denied")
        for attempt in (lambda: store.read_bytes(path), lambda: store.fs.glob(f"{root}/runs/*")):
            with pytest.raises(PermissionError) as denied:
                attempt()
            line = fault_line(denied.value)
            assert line is not None and "refused access (403) to s3://spade-round3-denied/store" in line
            assert "Errno None" not in line
        with pytest.raises(StoreError) as unreachable:
            Store(root, endpoint_url=proxy.url)
        assert "refused access (403)" in str(unreachable.value) and "Errno None" not in str(unreachable.value)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.usefixtures("jail_processes_checked")
def test_sigterm_stops_a_run_within_seconds_leaves_nothing_running_and_says_how_to_resume(tmp_path: Path) -> None:
    import signal
    import subprocess
    import time

    from test_resume import OVERRIDES, REPO, spade_command, spade_env

    from spade_core.processes import alive, command_line, descendants
    from spade_core.store.markers import read_marker
    from spade_core.store.runlock import read_holder

    store = Store(str(tmp_path / "store"))
    command = spade_command(
        "run", "--run-id", "stop", "--store", store.base, *[a for o in OVERRIDES for a in ("--set", o)]
    )
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(command, cwd=REPO, env=spade_env(tmp_path), stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 400
        while read_marker(store, "stop", 1, "documents") is None and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()[-2000:]
            time.sleep(0.2)
        time.sleep(1.0)  # into the design stage: the model loading, jails starting
        running = descendants(proc.pid)  # Prefect's temporary server among them
        assert running, "the run started no process of its own"
        proc.send_signal(signal.SIGTERM)
        sent = time.monotonic()
        code = proc.wait(timeout=60)
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            proc.kill()
    lines = log.read_text().strip().splitlines()
    assert code == 128 + signal.SIGTERM and took < 15, (code, took, lines[-5:])
    assert lines[-1] == "SIGTERM: stopping run stop; what finished is kept — continue with: spade resume stop"
    left = {pid: command_line(pid) for pid in running if alive(pid)}  # a zombie has ended: init reaps it
    assert left == {}, left
    assert read_holder(store, "stop") is None  # the run's lock is given back
    assert read_marker(store, "stop", 1, "documents") is not None  # what finished is kept
