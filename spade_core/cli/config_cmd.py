"""``spade config``: show the resolved configuration and its hash."""

from __future__ import annotations

import typer

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, clean_errors, resolve
from spade_core.config import available_presets

config_app = typer.Typer(help="Inspect configuration presets and resolved configs.", no_args_is_help=True)


@config_app.command("show")
@clean_errors
def show(preset: PresetOpt = "tiny", config: ConfigOpt = None, overrides: SetOpt = None) -> None:
    """Print the resolved config as YAML, with its hash (part of every cache key)."""
    cfg = resolve(preset, config, overrides)
    typer.echo(f"# preset: {preset}  config_hash: {cfg.config_hash()}")
    typer.echo(cfg.to_yaml(), nl=False)


@config_app.command("presets")
def presets() -> None:
    """List the presets in data/configs/."""
    for name in available_presets():
        typer.echo(name)
