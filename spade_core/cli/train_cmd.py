"""``spade train``: (re)run the GRPO update of a stored generation, under ``accelerate launch``."""

from __future__ import annotations

from typing import Annotated

import typer

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve
from spade_core.config import ConfigError
from spade_core.progress import load_run_config
from spade_core.train_launch import TrainingError, launch_training


@clean_errors
def train(
    run_id: Annotated[str, typer.Option("--run-id", help="Run whose generation to train.")],
    gen: Annotated[int, typer.Option("--gen", help="Generation to train; writes checkpoint GEN.")],
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Do not echo the trainer's output.")] = False,
) -> None:
    """Train both roles on a stored generation with one GRPO update (TRL) under ``accelerate launch``.

    Reads the generation's no-hint episodes (agent) and designs (designer) from the store and writes
    ``checkpoints/run=RUN/gen=GEN/`` and the ``train_metrics`` table. The run's stored config is used
    when the store has one (``--set`` still applies); otherwise ``--preset``/``--config``. Set
    ``training.accelerate_config`` to a file in ``data/accelerate/`` for one or several GPUs.
    """
    if gen < 1:
        raise ConfigError(f"--gen must be >= 1 (checkpoint 0 is the base model), got {gen}")
    cfg = resolve(preset, config, overrides, store)
    st = open_store(cfg)
    if config is None:
        items = [*(overrides or []), *([f"store.root={store}"] if store else [])]
        cfg = load_run_config(st, run_id, items) or cfg
    try:
        summary = launch_training(cfg, st, run_id, gen, echo=None if quiet else typer.echo)
    except TrainingError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(summary.line())
