"""Progress of a generation: a Prefect progress artifact, a Markdown summary, a table of the top
environments by regret — and the same events for listeners in the flow's process (the CLI's display).

Listeners are registered for a run in this process (:func:`listening`), never passed as flow parameters: a
flow run's parameters travel with every task a process or Dask task runner sends to a worker, and a
display (a lock, a terminal) cannot."""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from spade_core.pipeline.status import restart_causes
from spade_core.report.summary import summary_markdown, top_environments
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord


@dataclass(frozen=True)
class ProgressEvent:
    """One stage (``shard`` None) or shard finished: how, how long it took here, how far the generation is."""

    run_id: str
    gen: int
    stage: str
    shard: int | None
    shards: int | None
    status: str  # ran | reused
    seconds: float
    model_calls: int
    done: int
    total: int
    engine_faults: tuple[str, ...] = ()  # why the engine was replaced while this stage (or shard) used it


Listener = Callable[[ProgressEvent], None]
_LISTENING: dict[str, tuple[Listener, ...]] = {}  # run id -> the listeners of this process
_LISTENING_LOCK = threading.Lock()


@contextlib.contextmanager
def listening(run_id: str, listeners: Sequence[Listener]) -> Iterator[None]:
    """``listeners`` hear every stage of run ``run_id`` that this process's flows report, for the block."""
    with _LISTENING_LOCK:
        _LISTENING[run_id] = tuple(listeners)
    try:
        yield
    finally:
        with _LISTENING_LOCK:
            _LISTENING.pop(run_id, None)


def listeners_of(run_id: str) -> tuple[Listener, ...]:
    with _LISTENING_LOCK:
        return _LISTENING.get(run_id, ())


def artifact_key(*parts: object) -> str:
    """A Prefect artifact key (lowercase letters, digits, dashes) from arbitrary parts.

    >>> artifact_key("spade", "My_Run.1", "gen", 3)
    'spade-my-run-1-gen-3'
    """
    return re.sub(r"-+", "-", re.sub(r"[^a-z0-9]+", "-", "-".join(str(p) for p in parts).lower())).strip("-")


class Reporter:
    """Tracks one generation's stages: updates the progress artifact and tells the run's listeners in this
    process (:func:`listening`: the CLI's display)."""

    def __init__(self, run_id: str, gen: int, stages: list[str]) -> None:
        from prefect.artifacts import create_progress_artifact

        self.run_id, self.gen, self.stages, self.listeners = run_id, gen, stages, listeners_of(run_id)
        self.done: list[str] = []
        self.wall: dict[str, float] = {}
        self._started: dict[str, float] = {}
        self.artifact_id = cast(
            UUID,
            create_progress_artifact(
                0.0, key=artifact_key("spade", run_id, "gen", gen, "progress"), description=self._description()
            ),
        )

    def _description(self) -> str:
        todo = [s for s in self.stages if s not in self.done]
        return f"run {self.run_id} gen {self.gen}: {len(self.done)}/{len(self.stages)} stages; next: {todo[:1]}"

    def start(self, stage: str) -> None:
        self._started[stage] = time.perf_counter()

    def shard(self, record: StageRecord, shards: int) -> None:
        self._emit(record, shards, time.perf_counter() - self._started.get(record.stage, time.perf_counter()))

    def finish(self, record: StageRecord) -> None:
        from prefect.artifacts import update_progress_artifact

        self.wall[record.stage] = time.perf_counter() - self._started.get(record.stage, time.perf_counter())
        self.done.append(record.stage)
        update_progress_artifact(
            self.artifact_id, 100.0 * len(self.done) / len(self.stages), description=self._description()
        )
        self._emit(record, None, self.wall[record.stage])

    def _emit(self, record: StageRecord, shards: int | None, seconds: float) -> None:
        event = ProgressEvent(
            self.run_id,
            self.gen,
            record.stage,
            record.shard,
            shards,
            record.status,
            seconds,
            record.model_calls if record.status == "ran" else 0,
            len(self.done),
            len(self.stages),
            _faults_of(record),
        )
        for listener in self.listeners:
            listener(event)


def _faults_of(record: StageRecord) -> tuple[str, ...]:
    """The engine's replacements while this stage or shard ran (a sharded stage's finish repeats its shards':
    said once, with each shard)."""
    return tuple(restart_causes(record)) if record.status == "ran" and "shards" not in record.info else ()


def publish_summary(store: Store, summary: dict[str, Any], env_ids: list[str]) -> str:
    """The generation's Markdown summary and top-environments table as Prefect artifacts; returns the text."""
    from prefect.artifacts import create_markdown_artifact, create_table_artifact

    run_id, gen = summary["run_id"], summary["gen"]
    text = summary_markdown(summary)
    create_markdown_artifact(text, key=artifact_key("spade", run_id, "gen", gen, "summary"), description=text[:200])
    top = top_environments(store, run_id, gen, env_ids)
    if top:
        create_table_artifact(
            top,
            key=artifact_key("spade", run_id, "gen", gen, "top-regret"),
            description=f"run {run_id} gen {gen}: environments by regret",
        )
    return text
