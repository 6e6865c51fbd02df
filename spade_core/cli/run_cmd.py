"""The commands that run flows: ``spade run``, ``spade resume`` and ``spade serve``.

- ``spade run``: generations 1..N of a run, locally (Prefect starts a temporary server when
  ``PREFECT_API_URL`` is unset), with a progress display and the generation summary at the end;
- ``spade resume RUN_ID``: finishes the run's first incomplete generation with its stored config;
- ``spade serve``: serves the deployments ``spade/iteration``, ``spade-run/run``, ``spade-eval/eval``.

The CLI sits above the flows (it starts them), so Prefect and ``flows.*`` are imported inside the
commands, never at module level: ``spade_core`` stays importable without Prefect, and every other
command starts without loading it.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve
from spade_core.config import SpadeConfig
from spade_core.faults import debugging
from spade_core.pipeline.interrupt import stopped_by_signals
from spade_core.pipeline.run_config import RunConfigMismatch, bind_run_config, stored_config
from spade_core.pipeline.status import next_generation, run_status
from spade_core.pipeline.status import stage_names as stages_for
from spade_core.report.summary import generation_summary, summary_markdown
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord, list_markers
from spade_core.store.runlock import RunLock

if TYPE_CHECKING:
    from flows.report import ProgressEvent

VerboseOpt = Annotated[bool, typer.Option("--verbose", "-v", help="Show Prefect's own log lines too.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print the generation summaries as one JSON array.")]


def _quiet_prefect(verbose: bool) -> None:
    """Prefect's per-task log lines would scroll the progress display away; the UI keeps them. Its log
    lines keep no traceback unless debugging: a failure ends in one line (:func:`spade_core.cli.main`),
    a bug re-raises."""
    if not verbose:
        os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    # The ephemeral API server Prefect starts for a local run took over its 20 s default on this 2-core
    # machine under load ("Timed out while attempting to connect to ephemeral Prefect API server").
    os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "180")
    if not debugging() and not getattr(logging.getLogRecordFactory(), "drops_tracebacks", False):
        make = logging.getLogRecordFactory()

        def without_traceback(name: str, *args: Any, **kwargs: Any) -> logging.LogRecord:
            record = make(name, *args, **kwargs)
            if name.startswith("prefect"):
                record.exc_info, record.exc_text = None, None
            return record

        without_traceback.drops_tracebacks = True  # type: ignore[attr-defined]
        logging.setLogRecordFactory(without_traceback)


class Display:
    """One line per finished stage (and shard), a spinner for the running one."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=self.console,
            transient=True,
        )
        self.task_ids: dict[tuple[str, int], Any] = {}

    def __call__(self, event: ProgressEvent) -> None:
        key = (event.run_id, event.gen)
        if key not in self.task_ids:
            self.task_ids[key] = self.progress.add_task(f"run {event.run_id} gen {event.gen}", total=event.total)
        where = f"{event.stage}" if event.shard is None else f"{event.stage} {event.shard + 1}/{event.shards}"
        calls = f", {event.model_calls} model calls" if event.model_calls else ""
        mark = {"ran": "[green]✓[/]", "reused": "[cyan]↺[/]"}[event.status]
        self.progress.console.print(
            f"  {mark} gen {event.gen} {where:<14} {event.status:<7} {event.seconds:7.1f}s{calls}", highlight=False
        )
        for cause in event.engine_faults:  # the run goes on, on a new engine: the researcher should know
            self.progress.console.print(f"    [yellow]![/] the engine was replaced: {cause[:200]}", highlight=False)
        self.progress.update(self.task_ids[key], completed=event.done)

    def __enter__(self) -> Display:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()


def _print_summaries(summaries: list[dict[str, Any]], store: Store, run_id: str, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(summaries, default=str))
        return
    for summary in summaries:
        typer.echo(summary.get("markdown", ""))
    typer.echo(f"store: {store.base}")
    typer.echo(
        f'look at it: spade sql --store {store.base} "select s.gen, s.env_id, s.skill, s.win_rate, s.regret, '
        "r.raw as designer_raw, r.reward as designer_reward from env_scores s left join designer_rewards r "
        f"using (run_id, gen, design_id) where s.run_id = '{run_id}' order by s.gen, s.regret desc\""
    )


def stored_summary(cfg: SpadeConfig, store: Store, run_id: str, gen: int) -> dict[str, Any]:
    """The summary of a complete generation from its stage markers (what its flow run reported)."""
    markers = list_markers(store, run_id).get(gen, {})
    records: dict[str, StageRecord] = {
        name: markers[name].model_copy(update={"status": "reused"}) for name in stages_for(cfg, gen) if name in markers
    }
    summary = generation_summary(store, run_id, gen, records)
    summary["markdown"] = summary_markdown(summary)
    return summary


def _run_flow(fn: Any, **params: Any) -> Any:
    """Run flow ``fn`` in this process with the progress display listening to its run."""
    from flows.report import listening  # the flows load with the command that runs one

    with Display() as display, listening(params["run_id"], [display]):
        return fn(**params)


def _bind(st: Store, run_id: str, cfg: SpadeConfig) -> None:
    try:
        bind_run_config(st, run_id, cfg)
    except RunConfigMismatch as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(2) from None


@clean_errors
def run(
    run_id: Annotated[str | None, typer.Option("--run-id", help="Run id (default: run-YYYYmmdd-HHMMSS).")] = None,
    generations: Annotated[int, typer.Option("--generations", "-n", help="Run generations 1..N.")] = 1,
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Run generations 1..N of a SPADE run with Prefect, locally (no server needed), showing progress.

    Complete generations are skipped and an interrupted one is finished from its stored artifacts, so
    running the same command again is cheap. The config is stored with the run; reusing a run id with a
    config that would change its artifacts is an error.
    """
    if generations < 1:
        raise typer.BadParameter(f"--generations must be >= 1, got {generations}")
    cfg = resolve(preset, config, overrides, store)
    st = open_store(cfg)
    run_id = run_id or time.strftime("run-%Y%m%d-%H%M%S")
    with RunLock(st, run_id) as lock, stopped_by_signals(run_id, lock.release):  # one run per run id
        _bind(st, run_id, cfg)
        _quiet_prefect(verbose)
        from flows.spade import spade_run  # Prefect loads only for the commands that run a flow

        typer.echo(f"run {run_id}: generations 1..{generations}, store {st.base}, config {cfg.config_hash()}", err=True)
        summaries = _run_flow(
            spade_run, run_id=run_id, generations=generations, overrides=overrides or [], store=cfg.store.root
        )
    if not summaries:
        typer.echo(f"run {run_id}: generations 1..{generations} were already complete", err=True)
        summaries = [stored_summary(cfg, st, run_id, g) for g in range(1, generations + 1)]
    _print_summaries(summaries, st, run_id, as_json)


@clean_errors
def resume(
    run_id: Annotated[str, typer.Argument(help="The run to resume.")],
    store: StoreOpt = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", help="Execution-only override, e.g. --set orchestration.task_runner=dask."),
    ] = None,
    verbose: VerboseOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Finish the run's first incomplete generation with its stored config (completed stages are reused)."""
    cfg = stored_config(run_id, store, overrides)
    st = open_store(cfg)
    with RunLock(st, run_id) as lock, stopped_by_signals(run_id, lock.release):
        _bind(st, run_id, cfg)
        gen = next_generation(st, cfg, run_id)
        if gen > 1 and gen not in run_status(st, cfg, run_id):  # the markers alone say what was started
            typer.echo(
                f"run {run_id}: generations 1..{gen - 1} are complete; nothing to resume "
                f"(add generations with: spade run --run-id {run_id} --generations {gen})",
                err=True,
            )
            return
        _quiet_prefect(verbose)
        from flows.spade import spade  # Prefect loads only for the commands that run a flow

        typer.echo(f"run {run_id}: resuming generation {gen} (store {st.base})", err=True)
        summary = _run_flow(spade, run_id=run_id, gen=gen, overrides=overrides or [], store=cfg.store.root)
    _print_summaries([summary], st, run_id, as_json)


def serve(
    limit: Annotated[int, typer.Option("--limit", help="Flow runs at once in this process.")] = 1,
) -> None:
    """Serve the deployments of prefect.yaml (spade/iteration, spade-run/run, spade-eval/eval) from this process.

    Needs a Prefect server (PREFECT_API_URL); then start runs with e.g.
    prefect deployment run spade/iteration -p run_id=my-run
    """
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        print(
            "error: spade serve needs a Prefect server: start one with `prefect server start` and set "
            "PREFECT_API_URL=http://127.0.0.1:4200/api",
            file=sys.stderr,
        )
        raise typer.Exit(2)
    from prefect import serve as prefect_serve

    from flows.deployments import runner_deployments  # Prefect loads only for the commands that run a flow

    prefect_serve(*runner_deployments(), limit=limit)
