"""``spade eval``: score a model on the held-out suites (reasoning_gym, humaneval, bfcl, bfcl_multi_turn,
tau2) and print a summary."""

from __future__ import annotations

import json
from typing import Annotated

import pandas as pd
import typer
from rich.console import Console
from rich.table import Table

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve
from spade_core.config import ConfigError
from spade_core.eval import evaluate, evaluate_checkpoint, resolve_suites, summarize
from spade_core.llm import make_generator
from spade_core.store.artifacts import WrittenFile
from spade_core.store.markers import write_command_marker


def _print_summary(summary: pd.DataFrame, title: str) -> None:
    table = Table(title=title)
    for column in summary.columns:
        table.add_column(str(column), justify="left" if column == "suite" else "right")
    for row in summary.itertuples(index=False):
        table.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row))
    Console().print(table)


@clean_errors
def eval_(
    checkpoint: Annotated[
        str | None,
        typer.Option("--checkpoint", help="Model to score: a local HF directory, a hub id or 'embedded' (not stored)."),
    ] = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Score this run's checkpoint --gen and write the evals table.")
    ] = None,
    gen: Annotated[
        int | None, typer.Option("--gen", help="With --run-id: 0 = the base model, g = checkpoint of generation g.")
    ] = None,
    suites: Annotated[
        list[str] | None, typer.Option("--suite", help="Suite, repeatable (default: evaluation.suites).")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", min=1, help="Items per suite (default: evaluation.limit).")
    ] = None,
    max_new_tokens: Annotated[
        int | None, typer.Option("--max-new-tokens", min=1, help="Tokens per reply (default: each suite's own).")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print one JSON row per item instead of the summary.")
    ] = False,
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Score a model on held-out suites with greedy decoding: pass@1 and mean score per suite.

    Without --run-id the model (--checkpoint, else model.name_or_path) is scored and nothing is written;
    with --run-id R --gen G the checkpoint of generation G is scored and the rows go to the evals table.
    """

    extra = [f"evaluation.limit={limit}"] if limit is not None else []
    cfg = resolve(preset, config, [*(overrides or []), *extra], store)
    if checkpoint is not None and (run_id is not None or gen is not None):
        raise ConfigError("use either --checkpoint or --run-id with --gen, not both")
    if (run_id is None) != (gen is None):
        raise ConfigError("--run-id and --gen go together")
    names = list(suites) if suites else list(cfg.evaluation.suites)
    resolve_suites(names)  # an unknown suite fails before any model loads
    if run_id is not None and gen is not None:
        st = open_store(cfg)
        written: list[WrittenFile] = []
        frame = evaluate_checkpoint(
            cfg, st, run_id, gen, suites=names, max_new_tokens=max_new_tokens, progress=not as_json, written=written
        )
        write_command_marker(st, cfg, run_id, gen, "eval-cli", written)  # its rows are the run's to every reader
        title = f"run {run_id} gen {gen}"
        typer.echo(f"wrote {len(frame)} rows to evals run={run_id} gen={gen}", err=True)
    else:
        model = checkpoint or cfg.model.name_or_path
        generator = make_generator(cfg.model.model_copy(update={"name_or_path": model}))
        try:
            frame = evaluate(
                generator,
                names,
                cfg.evaluation.limit,
                cfg.evaluation.seed,
                model,
                max_new_tokens=max_new_tokens,
                progress=not as_json,
            )
        finally:
            generator.close()
        title = model
    if as_json:
        for row in frame.to_dict("records"):
            typer.echo(json.dumps(row))
    else:
        _print_summary(summarize(frame), title)
