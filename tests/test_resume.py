"""Kill the flow process (SIGKILL) with two generations in flight — generation 2's design chain beside
generation 1's steps, some stages and shards finished, others half done — resume, and check that nothing
is lost, duplicated or redone — on the local store and on S3 (moto's server on loopback). The flow runs as
``spade run`` in its own process group (with its temporary Prefect server and its jails), exactly as a
user runs it. (A kill inside one generation is the same case with one generation fewer: its finished
shards and stages are the markers this test checks.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from spade_core.store.artifacts import Store
from spade_core.store.catalog import query
from spade_core.store.markers import read_marker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500), pytest.mark.usefixtures("jail_processes_checked")]

REPO = Path(__file__).resolve().parent.parent
# The cheapest generation that still runs every stage: one short design (validated, most likely invalid),
# two replayed seed environments in one-environment rollout shards, short plays, no training; on the
# transformers backend (tiny's vLLM engine takes a minute to start: tests/test_vllm_engine.py runs it).
OVERRIDES = [
    "model.backend=transformers",
    "designer.documents_per_generation=1",
    "designer.group_size=1",
    "designer.max_new_tokens=24",
    "designer.skills_per_generation=1",
    "designer.kind=game",
    "designer.memory_positive=0",
    "designer.memory_negative=0",
    "corpus.max_words=40",
    "corpus.max_words_tool=40",
    "rollout.replay_envs=2",
    "rollout.starter_envs=0",
    "rollout.plays_no_hint=2",
    "rollout.plays_hint=2",
    "rollout.max_turns=2",
    "rollout.max_tokens_per_turn=8",
    "rollout.hint_max_words=16",
    "memory.report_diversity=false",
    "orchestration.shard_size=1",
    "training.enabled=false",
    "training.steps_per_generation=2",
]
IDS = {  # what identifies a row of each table within one generation
    "documents": "doc_id",  # the retries' fresh documents too (a resample of a used one: 1 in ~10,000)
    "designs": "design_id || ':' || attempt",  # every attempt of a prompt is a row of its own
    "validations": "design_id || ':' || attempt",
    "pool": "env_id",
    "hints": "env_id",
    "episodes": "episode_id",
    "env_scores": "coalesce(design_id, env_id)",
    "memory": "env_id",
}


def spade_env(tmp_path: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        # A loaded 2-core machine can take longer than the default to start the temporary server.
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180",
        PYTHONUNBUFFERED="1",
        **(extra or {}),
    )
    return env


def spade_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "spade_core.cli", *args]


def kill_with_two_generations_in_flight(
    cmd: list[str], env: dict[str, str], store: Store, run_id: str, log: Path
) -> dict[str, bytes]:
    """Start ``cmd``; SIGKILL its process group once generation 2's design chain has finished a stage while
    generation 1 is still in its steps. Returns every marker in the store at the kill, by path."""
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    killed = False
    try:
        deadline = time.monotonic() + 1200
        while time.monotonic() < deadline and proc.poll() is None and not killed:
            if read_marker(store, run_id, 2, "documents") is not None:
                os.killpg(proc.pid, signal.SIGKILL)
                killed = True
            time.sleep(0.05)
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the flow ended before the kill:\n{log.read_text()[-3000:]}"
    for _ in range(100):
        if not subprocess.run(["ps", "-u", "65534", "-o", "pid="], capture_output=True, text=True).stdout.strip():
            break
        time.sleep(0.1)
    paths = store.fs.glob(f"{store.run_dir(run_id)}/gen=*/stages/*.json")
    return {p: store.fs.cat_file(p) for p in paths}


ASYNC_STEPS = 5  # steps per generation of the two-generations-in-flight runs


def async_kill_and_resume(
    tmp_path: Path, model: str, root: str, endpoint: str | None = None, steps: int = ASYNC_STEPS
) -> None:
    """Two generations in flight (generation 2's design chain beside generation 1's steps), SIGKILL, then
    ``spade resume`` and the same ``spade run`` again: nothing lost, nothing duplicated, every stage that
    had finished (of both generations) reused, never redone. ``model``: the micro model (what is tested is
    what the store keeps across a kill, not what the model writes). ``steps``: generation 1's steps, enough
    to keep it busy until generation 2's chain has written its first marker."""
    run_id = "overlap"
    env = spade_env(tmp_path, {"AWS_ENDPOINT_URL": endpoint} if endpoint else None)
    store = Store(root, endpoint_url=endpoint)
    # Five steps keep generation 1 busy while generation 2's chain starts (training is off: steps are plays);
    # with three, a loaded machine could finish them before generation 2's first stage.
    overrides = [
        *OVERRIDES[:-1],
        f"training.steps_per_generation={steps}",
        "orchestration.async_generations=true",
        f"model.name_or_path={model}",
    ]
    run = [
        "run",
        "--run-id",
        run_id,
        "--store",
        root,
        "--generations",
        "2",
        *[a for o in overrides for a in ("--set", o)],
    ]
    before = kill_with_two_generations_in_flight(spade_command(*run), env, store, run_id, tmp_path / "killed.log")
    gen1_done = {p.rsplit("/", 1)[-1].removesuffix(".json") for p in before if "/gen=1/" in p}
    assert "memory" in gen1_done and "reward" not in gen1_done, sorted(gen1_done)  # generation 1 in its steps

    status = subprocess.run(
        spade_command("status", run_id, "--store", root), cwd=REPO, env=env, capture_output=True, text=True
    )
    assert status.returncode == 0, status.stderr[-2000:]
    assert "gen 1 incomplete [step" in status.stdout and "gen 2 incomplete [design chain" in status.stdout, (
        status.stdout
    )

    resumed = subprocess.run(
        spade_command("resume", run_id, "--store", root, "--json"), cwd=REPO, env=env, capture_output=True,
        text=True, timeout=1200,
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    again = subprocess.run(
        spade_command(*run, "--json"), cwd=REPO, env=env, capture_output=True, text=True, timeout=1200
    )
    assert again.returncode == 0, again.stderr[-3000:]
    (gen2,) = json.loads(again.stdout.strip().splitlines()[-1])  # generation 1 was complete: skipped
    stages = {s["stage"]: s for s in gen2["stages"]}
    assert stages["documents"]["status"] == "reused"
    # Every marker written before the kill is untouched: no finished stage or step of either generation ran again.
    for path, content in before.items():
        assert store.fs.cat_file(path) == content, path
    for gen in (1, 2):
        for table, key in IDS.items():
            rows = query(
                store,
                f"select count(*) as n, count(distinct {key}) as ids from {table} where run_id = ? and gen = ?",
                [run_id, gen],
            ).iloc[0]
            assert rows.n == rows.ids > 0, f"gen {gen} {table}: {rows.n} rows for {rows.ids} ids"
        played = query(
            store, "select count(*) as n, count(distinct env_id) as envs from episodes where run_id = ? and gen = ?",
            [run_id, gen],
        ).iloc[0]  # fmt: skip
        # Step 0: 2 no-hint + 2 hinted plays per environment; every later step: 2 no-hint plays each.
        per_env = 4 + 2 * (steps - 1)
        assert played.n == per_env * played.envs, f"gen {gen}: {played.n} plays of {played.envs} environments"
    # The chain of generation 2 ran on the newest checkpoint at its start: recorded on its rows.
    used = query(store, "select distinct policy_step from designs where run_id = ? and gen = 2", [run_id])
    assert set(used["policy_step"]) <= set(range(steps + 1))
    final = subprocess.run(
        spade_command("status", run_id, "--store", root), cwd=REPO, env=env, capture_output=True, text=True
    )
    assert "gen 1 complete" in final.stdout and "gen 2 complete" in final.stdout, final.stdout


def test_kill_with_two_generations_in_flight_then_resume_on_the_local_store(
    tmp_path: Path, micro_model_dir: str
) -> None:
    # ten steps: on a quiet machine five plays-only steps could end before generation 2's chain started
    async_kill_and_resume(tmp_path, micro_model_dir, str(tmp_path / "store"), steps=10)
