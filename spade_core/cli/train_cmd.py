"""``spade train``: (re)run the GRPO update of a stored generation, under ``accelerate launch``."""

from __future__ import annotations

from typing import Annotated

import typer

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve
from spade_core.config import ConfigError
from spade_core.pipeline.run_config import load_run_config
from spade_core.train.launch import TrainingError, launch_training


@clean_errors
def train(
    run_id: Annotated[str, typer.Option("--run-id", help="Run whose generation to train.")],
    gen: Annotated[int, typer.Option("--gen", help="Generation of the step to train.")],
    step: Annotated[
        int, typer.Option("--step", help="Step within the generation, 0..K-1 (writes checkpoint (GEN-1)*K+STEP+1).")
    ] = 0,
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", help="Do not echo the trainer's output.")] = False,
) -> None:
    """One optimizer step of both roles (TRL GRPO) on a stored step of a generation, under ``accelerate launch``.

    Reads the step's no-hint episodes (agent) and, at step 0, the designs (designer) from the store, trains
    checkpoint s = (GEN-1)*K + STEP with the run's carried optimizer state and writes
    ``checkpoints/run=RUN/step=s+1/`` and the ``train_metrics`` and ``train_samples`` tables. The run's
    stored config is used when the store has one (``--set`` still applies); otherwise ``--preset``/``--config``. Set
    ``training.accelerate_config`` to a file in ``data/accelerate/`` for one or several GPUs.
    """
    if gen < 1:
        raise ConfigError(f"--gen must be >= 1 (generations are numbered from 1), got {gen}")
    cfg = resolve(preset, config, overrides, store)
    st = open_store(cfg)
    if config is None:
        items = [*(overrides or []), *([f"store.root={store}"] if store else [])]
        cfg = load_run_config(st, run_id, items) or cfg
    try:
        if not 0 <= step < cfg.training.steps_per_generation:
            raise ConfigError(f"--step must be in 0..{cfg.training.steps_per_generation - 1} (K), got {step}")
        summary = launch_training(cfg, st, run_id, gen, step, echo=None if quiet else typer.echo)
    except TrainingError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(summary.line())
