"""``spade rollout``: play environment files with the configured model and print returns."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import pandas as pd
import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve
from spade_core.cli.env_cmd import read_env_files
from spade_core.envs.contract import env_id_for
from spade_core.llm import make_generator
from spade_core.play.rollout import EpisodeSpec, RolloutEngine
from spade_core.store.markers import write_command_marker


@clean_errors
def rollout(
    paths: Annotated[list[Path], typer.Argument(help="Environment .py files.")],
    plays: Annotated[int, typer.Option("--plays", help="Episodes per file (seeds 0..N-1).")] = 2,
    hint: Annotated[str | None, typer.Option("--hint", help="Play the hinted condition with this hint.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON row per episode.")] = False,
    run_id: Annotated[
        str | None,
        typer.Option("--run-id", help="Also write the rows to the episodes table of this run (stage 'rollout-cli')."),
    ] = None,
    gen: Annotated[int, typer.Option("--gen", help="Generation to write under (with --run-id).")] = 1,
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Play environment files with the configured model (in the jail) and print the returns.

    Useful for environment authors: see how the model plays your environment, turn by turn with --json.
    """
    cfg = resolve(preset, config, overrides, store)
    st = open_store(cfg) if run_id is not None else None  # a bad store fails before the model loads
    specs = []
    for code in read_env_files(paths):
        condition = "hint" if hint else "no_hint"
        specs += [EpisodeSpec(env_id_for(code), code, seed, condition, hint) for seed in range(plays)]
    generator = make_generator(cfg.model)
    engine = RolloutEngine.from_config(cfg, generator)
    with Progress(
        TextColumn("rollout"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), transient=True, disable=as_json
    ) as bar:
        task = bar.add_task("episodes", total=len(specs))
        rows = engine.run(specs, on_turn=lambda done, total: bar.update(task, completed=done))
    generator.close()
    if st is not None and run_id is not None:
        frame = pd.DataFrame(rows)
        if "logprobs" not in frame.columns:
            frame["logprobs"] = None
        frame["policy_step"] = -1  # the configured model, not a checkpoint of the run's steps
        written = st.write_table("episodes", frame, run_id=run_id, gen=gen, stage="rollout-cli")
        write_command_marker(st, cfg, run_id, gen, "rollout-cli", [written])  # the run's rows to every reader
        typer.echo(f"wrote {written.rows} episodes to {written.path}", err=True)
    names = {env_id_for(code): str(p) for p, code in zip(paths, read_env_files(paths), strict=True)}
    for row in rows:
        if as_json:
            typer.echo(json.dumps({**row, "path": names[row["env_id"]]}))
        else:
            err = f"  error={row['error_type']}" if row["error_type"] else ""
            typer.echo(
                f"{names[row['env_id']]} seed={row['seed']} {row['condition']}: return={row['episode_return']:.2f} "
                f"turns={row['turns']}{err}"
            )
    if not as_json:
        mean = sum(r["episode_return"] for r in rows) / len(rows) if rows else 0.0
        typer.echo(f"{len(rows)} episodes, mean return {mean:.3f}, {engine.stats.generated_tokens} tokens generated")
