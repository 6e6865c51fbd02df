"""A run's engine belongs to the run: ``spade run`` on Prefect's ``processes`` task runner with two engine
replicas starts exactly two engines (counted from the process table, over the whole run), whichever worker
processes run the stages; both replicas serve plays; the evaluation stage scores the trained checkpoint on
the same engines; and no engine is left when the run ends."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
from test_resume import OVERRIDES, REPO, spade_command, spade_env

from spade_core.config import StoreConfig
from spade_core.llm.base import ModelError
from spade_core.llm.engine_client import EngineClient, service_file
from spade_core.processes import command_line, descendants, parents
from spade_core.store.artifacts import Store
from spade_core.store.catalog import query
from spade_core.store.markers import read_marker

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500), pytest.mark.usefixtures("jail_processes_checked")]
ENGINE_MODULE = "vllm.entrypoints.openai.api_server"


def engine_servers(root: int) -> set[int]:
    """The vLLM API servers descended from ``root`` (not their EngineCore children, which share the command)."""
    parent_of = parents()
    return {
        pid
        for pid in descendants(root)
        if ENGINE_MODULE in command_line(pid) and ENGINE_MODULE not in command_line(parent_of.get(pid, 0))
    }


def test_a_run_on_worker_processes_starts_one_engine_per_replica_and_evaluates_on_it(tmp_path: Path) -> None:
    run_id, root = "engine-run", str((tmp_path / "store").resolve())
    overrides = [o for o in OVERRIDES if not o.startswith(("training.", "model.backend"))] + [
        "model.backend=vllm",
        "orchestration.task_runner=processes",
        "orchestration.engine_replicas=2",
        "orchestration.generator_during_update=kept",  # the trainer beside the engines: no stop, no restart
        "training.enabled=true",
        "training.lora=true",
        "training.steps_per_generation=1",
        "evaluation.every=1",
        "evaluation.limit=1",
        "evaluation.max_new_tokens=8",
    ]
    command = spade_command("run", "--run-id", run_id, "--store", root, *[a for o in overrides for a in ("--set", o)])
    log = tmp_path / "run.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            command, cwd=REPO, env=spade_env(tmp_path), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    engines: set[int] = set()
    served: dict[int, int] = {}
    try:
        deadline = time.monotonic() + 1400
        while proc.poll() is None and time.monotonic() < deadline:
            engines |= engine_servers(proc.pid)
            try:  # the service as a worker sees it: its published address and key
                info = json.loads(service_file(run_id, root).read_text())
                for replica in EngineClient(info["url"], info["key"]).state()["replicas"]:
                    served[replica["index"]] = max(served.get(replica["index"], 0), replica["served"])
            except (OSError, ValueError, KeyError, ModelError):
                pass  # not published yet, or gone
            time.sleep(0.5)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
    assert proc.wait(timeout=60) == 0, log.read_text()[-4000:]
    assert len(engines) == 2, (engines, log.read_text()[-2000:])  # one per replica, for the whole run
    assert sorted(served) == [0, 1] and min(served.values()) > 0, served  # both replicas served requests
    assert not any(Path(f"/proc/{pid}").exists() for pid in engines)  # gone with the run
    assert not service_file(run_id, root).exists()
    # The evaluation stage scored checkpoint 1 through the run's replicas (reloaded in place when the step
    # changed the weights): the two engines above were all the run started, and it swapped in no other.
    store = Store.from_config(StoreConfig(root=root))
    evaluated = read_marker(store, run_id, 1, "evaluate")
    assert evaluated is not None and evaluated.status == "ran" and evaluated.policy_step == 1, evaluated
    assert evaluated.model_calls >= 1
    swaps = evaluated.info.get("weight_swaps", [])
    assert all(s["method"] == "reload" for s in swaps), swaps
    assert len(query(store, f"SELECT * FROM evals WHERE run_id = '{run_id}'")) >= 1
