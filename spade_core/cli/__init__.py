"""The ``spade`` command line. Every command has ``--help``; config-reading commands take ``--preset``,
``--config FILE`` and repeated ``--set key=value``."""

from __future__ import annotations

import typer

from spade_core.cli import (
    catalog_cmd,
    config_cmd,
    corpus_cmd,
    demo_cmd,
    design_cmd,
    env_cmd,
    envs_cmd,
    eval_cmd,
    report_cmd,
    rollout_cmd,
    train_cmd,
    verify_cmd,
)

app = typer.Typer(
    name="spade",
    help="SPADE: self-play of one LLM as environment designer and agent, in sandboxed generated environments. "
    "A store fault (full disk, unreachable S3, damaged file) ends a command with one line and exit code 1; "
    "add --debug anywhere (or set SPADE_DEBUG=1) for the traceback.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("sql")(catalog_cmd.sql)
app.command("validate")(env_cmd.validate)
app.command("rollout")(rollout_cmd.rollout)
app.command("design")(design_cmd.design)
app.command("demo")(demo_cmd.demo)
app.command("train")(train_cmd.train)
app.command("report")(report_cmd.report)
app.command("eval")(eval_cmd.eval_)
app.command("verify")(verify_cmd.verify)
app.add_typer(env_cmd.env_app, name="env")
app.add_typer(envs_cmd.envs_app, name="envs")
app.add_typer(corpus_cmd.corpus_app, name="corpus")
app.add_typer(config_cmd.config_app, name="config")


def main() -> None:
    app()
