"""The one runner of a run of generations (:func:`spade_core.pipeline.runner.run_generations`): with
asynchronous generations the next design chain starts once the current generation has the markers the
registry says the chain waits for, runs beside it, and is joined before the next generation starts. The
generations here are plain functions that write real markers into a real store: the point is the schedule."""

from __future__ import annotations

import datetime as dt
import threading
from pathlib import Path

import pytest
from samples import write_stage

from spade_core.config import load_config
from spade_core.pipeline.runner import chain_trigger, run_generations
from spade_core.store.artifacts import Store

WAIT_S = 30.0


def _cfg(tmp_path: Path, asynchronous: bool):  # type: ignore[no-untyped-def]
    flag = "true" if asynchronous else "false"
    return load_config("tiny", overrides=[f"store.root={tmp_path}", f"orchestration.async_generations={flag}"])


def test_the_chain_waits_for_what_its_stages_declare_from_the_previous_generation(tmp_path: Path) -> None:
    assert chain_trigger(_cfg(tmp_path, True), 2) == ["memory"]  # the last update is released
    assert chain_trigger(_cfg(tmp_path, False), 2) == ["memory", "train-s1"]  # K = 2: the last step


def test_the_next_chain_runs_beside_the_generation_once_its_trigger_is_there(tmp_path: Path) -> None:
    cfg, store = _cfg(tmp_path, True), Store(str(tmp_path))
    events: list[str] = []
    chain_started = {g: threading.Event() for g in (2, 3)}

    def generation(gen: int) -> int:
        events.append(f"gen {gen} starts")
        write_stage(store, "r", gen, "memory", {})
        if gen + 1 in chain_started:  # the chain of gen + 1 starts while this generation still runs
            assert chain_started[gen + 1].wait(WAIT_S), f"chain {gen + 1} never started beside gen {gen}"
        events.append(f"gen {gen} ends")
        return gen * 10

    def chain(gen: int) -> None:
        events.append(f"chain {gen}")
        chain_started[gen].set()

    assert run_generations(cfg, store, "r", [1, 2, 3], generation, chain, poll_s=0.01) == [10, 20, 30]
    assert events == [
        "gen 1 starts", "chain 2", "gen 1 ends", "gen 2 starts", "chain 3", "gen 2 ends", "gen 3 starts", "gen 3 ends",
    ]  # fmt: skip


def test_a_generation_that_ends_without_the_trigger_starts_no_chain(tmp_path: Path) -> None:
    cfg, store = _cfg(tmp_path, True), Store(str(tmp_path))
    chains: list[int] = []
    assert run_generations(cfg, store, "r", [1, 2], lambda g: g, chains.append, poll_s=0.01) == [1, 2]
    assert chains == []


def test_synchronous_generations_run_one_after_another_without_chains(tmp_path: Path) -> None:
    cfg, store = _cfg(tmp_path, False), Store(str(tmp_path))
    chains: list[int] = []

    def generation(gen: int) -> int:
        write_stage(store, "r", gen, "memory", {})
        return gen

    assert run_generations(cfg, store, "r", [1, 2], generation, chains.append, poll_s=0.01) == [1, 2]
    assert chains == []


def test_a_failed_chain_is_left_to_its_generation_and_a_failed_generation_is_raised_after_its_chain(
    tmp_path: Path,
) -> None:
    cfg, store = _cfg(tmp_path, True), Store(str(tmp_path))
    ran: list[str] = []
    chain_ended = threading.Event()

    def generation(gen: int) -> int:
        ran.append(f"gen {gen}")
        write_stage(store, "r", gen, "memory", {})
        if gen == 2:
            assert chain_ended.wait(WAIT_S)
            raise RuntimeError("generation 2 broke")
        return gen

    def chain(gen: int) -> None:
        ran.append(f"chain {gen}")
        if gen == 2:
            raise ValueError("chain 2 broke")  # logged; generation 2 redoes the chain's stages itself
        chain_ended.set()

    with pytest.raises(RuntimeError, match="generation 2 broke"):
        run_generations(cfg, store, "r", [1, 2, 3], generation, chain, poll_s=0.01)
    assert ran == ["gen 1", "chain 2", "gen 2", "chain 3"]  # gen 3 never starts; chain 3 was joined first


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.usefixtures("jail_processes_checked")
def test_the_local_runner_overlaps_two_real_generations_with_the_production_leases(
    tmp_path: Path, micro_model_dir: str
) -> None:
    """The real stages, jails and model leases (the micro model): generation 2's design chain starts once
    generation 1's memory is stored, before generation 1 has ended, and both generations complete."""
    from test_resume import OVERRIDES

    from spade_core.pipeline.local import run_run
    from spade_core.pipeline.status import generation_complete
    from spade_core.report.timeline import parse_time
    from spade_core.store.markers import read_marker

    overrides = [*OVERRIDES[:-1], "training.steps_per_generation=3", "orchestration.async_generations=true"]
    cfg = load_config("tiny", overrides=[*overrides, f"store.root={tmp_path}", f"model.name_or_path={micro_model_dir}"])
    store = Store(str(tmp_path))
    records = run_run(cfg, store, "r", [1, 2])
    assert [r["pool"].gen for r in records] == [1, 2]
    assert all(generation_complete(store, cfg, "r", g) for g in (1, 2))
    chain_start = read_marker(store, "r", 2, "documents")
    memory, last = read_marker(store, "r", 1, "memory"), read_marker(store, "r", 1, "rollout-s2")
    assert chain_start is not None and memory is not None and last is not None
    # Beside generation 1's steps: after its memory, before its last plays ended (finished_at is to the second).
    began, stored, ended = (parse_time(t) for t in (chain_start.started_at, memory.finished_at, last.finished_at))
    assert began is not None and stored is not None and ended is not None
    assert stored <= began < ended + dt.timedelta(seconds=1)
