"""``spade report RUN_ID``: a self-contained HTML report of one run (figures embedded, PNGs beside it)."""

from __future__ import annotations

from typing import Annotated

import typer

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve


@clean_errors
def report(
    run_id: Annotated[str, typer.Argument(help="The run to report on.")],
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="Local output directory. Default: {store}/reports/RUN_ID/ for a local store, "
            "./spade-report-RUN_ID/ for an S3 store.",
        ),
    ] = None,
    baseline: Annotated[
        str | None,
        typer.Option(
            "--baseline",
            help="Another run to compare with: its eval scores and its designer reward curve are shown beside "
            "this run's (a fixed-environment run, or a designer.train=false ablation). Default: a run whose stored "
            "config sets designer.fixed_pool, when there is one.",
        ),
    ] = None,
    top: Annotated[int, typer.Option("--top", min=1, help="Environments listed by regret, with their code.")] = 10,
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Write an HTML report of a run: validation funnel, win rate and regret, the designer reward it trains
    on (with the baseline run's curve beside it), training, evals against the base model and a baseline run,
    and the top environments by regret.

    Example: spade report my-run --baseline seeds-baseline
    """
    from spade_core.report import write_report  # matplotlib loads only when a report is made

    cfg = resolve(preset, config, overrides, store)
    index = write_report(open_store(cfg), run_id, out_dir=out, baseline=baseline, top=top)
    typer.echo(str(index))
