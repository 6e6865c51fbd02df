"""What one execution of a stage sees: the run, the generation, its shard, its inputs, and the store.

A stage declares the tables it reads and writes (:class:`~spade_core.pipeline.stage.Stage` ``reads`` and
``writes``; ``checkpoint`` for the trainer's weights). In an execution the context refuses any other: a
read or write of an undeclared table is an :class:`UndeclaredTable` error naming the stage, the table and
what it declared. Every file is named after the stage that writes it (``{stage}-{shard}.parquet``), and
every file it produces, through :meth:`GenerationContext.write` or handed in by the trainer or the
evaluator (:meth:`GenerationContext.adopt`), is listed in its marker.

Reads name the stages (and columns) they want and take exactly the files those stages' markers list (never
a glob), so files that other commands or stages wrote into the same partition (``spade demo``'s
``seed_check``, ``spade rollout --run-id``'s ``rollout-cli``) never leak into a generation, and a listed
file that is gone is an error naming it rather than missing rows. The few records every later stage needs
(the pool, the previous memory snapshot) are read at most once per execution.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import pandas as pd

from spade_core.config import SpadeConfig
from spade_core.designer.batch import DesignRun
from spade_core.designer.memory import Memory
from spade_core.method.scoring import SCORED_COLUMNS
from spade_core.play.hints import leaked_env_ids
from spade_core.play.plays import PlayRun
from spade_core.stage_names import instance_name
from spade_core.steps import first_step, top_up_steps
from spade_core.store.artifacts import Store, StoreError, WrittenFile
from spade_core.store.markers import listed_files
from spade_core.store.verdicts import final_designs

if TYPE_CHECKING:
    from spade_core.store.markers import StageRecord


class UndeclaredTable(RuntimeError):
    """A stage read or wrote a table it does not declare (a bug in the stage or its declaration)."""


@dataclass
class GenerationContext:
    """The run, generation and (for a sharded stage) shard of one stage execution."""

    cfg: SpadeConfig
    store: Store
    run_id: str
    gen: int
    stage: str = ""  # the executing stage instance (``rollout-s1``): the name its files are written under
    shard: int | None = None
    upstream: dict[str, StageRecord] = field(default_factory=dict)  # input records by stage name
    echo: Callable[[str], None] | None = None  # where a stage's subprocess output goes (a logger)
    step: int | None = None  # the step k within the generation, for the per-step stages
    policy_step: int | None = None  # the checkpoint the stage's model lease serves (resolved at its start)
    written: list[WrittenFile] = field(default_factory=list)  # every file written by this execution
    reads: frozenset[str] | None = None  # the tables this execution may read (None: outside a stage)
    writes: frozenset[str] | None = None  # the tables this execution may write (None: outside a stage)
    attempt: int = 1  # which try of the stage this is (the flow retries a stage that failed)
    _memo: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def seed(self) -> int:
        """The generation's seed: documents, skills and rollout seeds derive from it."""
        return self.cfg.seed * 100_003 + self.gen

    @property
    def shard_size(self) -> int:
        return self.cfg.orchestration.shard_size

    def execution(
        self,
        stage: str = "",
        shard: int | None = None,
        upstream: dict[str, StageRecord] | None = None,
        step: int | None = None,
        policy_step: int | None = None,
        reads: Sequence[str] | None = None,
        writes: Sequence[str] | None = None,
    ) -> GenerationContext:
        """A fresh context for one execution: its ``written`` list is exactly that execution's files, and it
        reads and writes only the tables ``reads`` and ``writes`` (all, when None)."""
        return GenerationContext(
            self.cfg,
            self.store,
            self.run_id,
            self.gen,
            stage,
            shard,
            dict(upstream or {}),
            self.echo,
            step,
            policy_step,
            reads=None if reads is None else frozenset(reads),
            writes=None if writes is None else frozenset(writes),
            attempt=self.attempt,
        )

    def _declared(self, table: str, how: str) -> None:
        declared = self.reads if how == "read" else self.writes
        if declared is not None and table not in declared:
            raise UndeclaredTable(
                f"stage {self.stage or '?'} {how}s table {table!r} but declares {how}s of "
                f"{sorted(declared) or 'none'} (spade_core/pipeline/registry.py)"
            )

    @property
    def steps(self) -> int:
        """K: the steps of each generation (``training.steps_per_generation``)."""
        return self.cfg.training.steps_per_generation

    @property
    def first_step(self) -> int:
        """The global step at which this generation starts: ``(gen - 1) · K`` (:mod:`spade_core.steps`)."""
        return first_step(self.cfg, self.gen)

    @property
    def global_step(self) -> int:
        """The global step of this execution: ``(gen - 1) · K + k`` (the first step for stages without one)."""
        return self.first_step + (self.step or 0)

    @property
    def model_step(self) -> int:
        """The checkpoint this execution's model rows come from (``policy_step``; without a resolved one,
        the step's own checkpoint): what the rows' ``policy_step`` column stores."""
        return self.global_step if self.policy_step is None else self.policy_step

    def write(self, table: str, frame: pd.DataFrame, shard: int | str = 0) -> pd.DataFrame:
        """Write ``frame`` as this stage's file ``{stage}-{shard}`` of this generation's ``table`` (empty:
        schema only)."""
        self._declared(table, "write")
        if not self.stage:
            raise UndeclaredTable(f"a write of table {table!r} outside a stage execution (it names no stage)")
        self.written.append(
            self.store.write_table(table, frame, run_id=self.run_id, gen=self.gen, stage=self.stage, shard=shard)
        )
        return frame

    def adopt(self, files: Sequence[WrittenFile]) -> None:
        """List files this stage's trainer or evaluator wrote (checkpoint, evals) in its marker."""
        for written in files:
            self._declared(written.table, "write")
        self.written.extend(files)

    def read(
        self, table: str, stages: Sequence[str], columns: Sequence[str] | None = None, *, keys: bool = True
    ) -> pd.DataFrame:
        """This generation's rows of ``table`` written by ``stages`` (all their shards), optionally some columns
        (``keys=False``: without the partition columns ``run_id`` and ``gen``).

        The files are those the stages' markers list (the input records this execution was given, else the
        markers in the store); a stage without a marker, or a listed file that is gone, is a
        :class:`~spade_core.store.artifacts.StoreError` naming it.
        """
        self._declared(table, "read")
        files = [path for stage in stages for path in self._listed(table, stage)]
        try:
            return self.store.read_files(table, files, columns=columns, keys=keys)
        except FileNotFoundError as exc:
            raise StoreError(
                f"run {self.run_id} gen {self.gen}: {exc.filename or exc} is listed by a stage marker but is "
                f"missing; check the store with `spade verify {self.run_id} --repair`, then resume"
            ) from None

    def _listed(self, table: str, stage: str) -> list[str]:
        """The files of ``table`` that ``stage``'s marker lists (a sharded stage's lists its shards' files)."""

        files = listed_files(self.store, self.run_id, self.gen, stage, table, record=self.upstream.get(stage))
        if files is None:
            raise StoreError(f"run {self.run_id} gen {self.gen}: stage {stage!r} has no marker (it has not finished)")
        return files

    def read_shard(self, table: str, stage: str, shard: int) -> pd.DataFrame:
        """Exactly the (stage, shard) file of this generation's ``table``, taken from the files ``stage``'s
        marker lists (a file of that name the marker does not list is not read)."""
        self._declared(table, "read")
        name = PurePosixPath(self.store.table_path(table, self.run_id, self.gen, stage, shard)).name
        files = [path for path in self._listed(table, stage) if PurePosixPath(path).name == name]
        if not files:
            raise StoreError(f"run {self.run_id} gen {self.gen}: stage {stage!r}'s marker lists no {table} file {name}")
        return self.store.read_files(table, files, keys=False)

    def pool(self) -> pd.DataFrame:
        """The environments this generation plays, as the pool stage wrote them (read once)."""
        self._declared("pool", "read")
        if "pool" not in self._memo:
            self._memo["pool"] = self.read("pool", ["pool"], keys=False)
        return self._memo["pool"]

    def first_plays(self) -> pd.DataFrame:
        """The plays of the generation's first step (hinted and no-hint), with the columns scoring reads: what
        the score and memory stages judge an environment by."""
        columns = list(SCORED_COLUMNS)
        return self.read("episodes", [instance_name("rollout", 0)], columns, keys=False)[columns]

    def leaked_envs(self) -> frozenset[str]:
        """The environments whose stored hint still leaks the solution: they get no regret term (none without
        ``scoring.zero_leaked_regret``; :func:`spade_core.play.hints.leaked_env_ids`)."""
        if not self.cfg.scoring.zero_leaked_regret:
            return frozenset()
        return frozenset(leaked_env_ids(self.read("hints", ["hint"], ["env_id", "leaks_solution"])))

    def previous_memory(self) -> Memory:
        """The memory snapshot of generation ``gen - 1`` (the seeded memory before the first), read once."""
        self._declared("memory", "read")
        if "memory" not in self._memo:
            self._memo["memory"] = Memory.load(self.store, self.run_id, self.gen - 1, self.cfg.memory)
        return self._memo["memory"]

    def read_previous(self, table: str, stage: str) -> pd.DataFrame:
        """Generation ``gen - 1``'s rows of ``table`` from the files ``stage``'s marker there lists (empty before
        the first generation, or when that stage has no marker there)."""
        self._declared(table, "read")
        files = listed_files(self.store, self.run_id, self.gen - 1, stage, table) if self.gen > 1 else None
        return self.store.read_files(table, files or [], keys=False)

    def final_designs(self, *, novelty: bool = True, steps: Sequence[str] = ()) -> pd.DataFrame:
        """This generation's designs with their final verdicts (:func:`spade_core.store.verdicts.final_designs`;
        ``steps``: the per-step top-ups whose designs count too)."""
        for table in ("designs", "validations", *(("novelty",) if novelty else ())):
            self._declared(table, "read")
        return final_designs(self.store, self.run_id, self.gen, novelty=novelty, steps=steps)

    def design_run(self) -> DesignRun:
        """What this execution's design rows depend on (:mod:`spade_core.designer.batch`); the previous memory is
        read on first use."""
        return DesignRun(self.cfg, self.run_id, self.gen, self.seed, self.model_step, self.previous_memory)

    def play_run(self) -> PlayRun:
        """What this execution's plays and hints depend on (:mod:`spade_core.play.plays`)."""
        return PlayRun(self.cfg, self.gen, self.seed, self.step, self.model_step)

    def step_pool(self, upto: int | None = None) -> pd.DataFrame:
        """The pool as step ``upto`` (default: this execution's step) plays it: the pool stage's rows, then the rows
        the top-ups (``refill-s{k}``) of steps 1 .. ``upto`` added, in step order."""
        at = (self.step or 0) if upto is None else upto
        stages = [instance_name("refill", k) for k in top_up_steps(self.cfg) if k <= at]
        if not stages:
            return self.pool()
        added = self.read("pool", stages, keys=False)
        return pd.concat([self.pool(), added], ignore_index=True) if not added.empty else self.pool()
