"""The ``spade`` command line: one Typer app, every command registered here, and the console script
:func:`main`. Every command has ``--help``; config-reading commands take ``--preset``, ``--config FILE``
and repeated ``--set key=value``. The commands live one topic a module (``*_cmd.py``); ``run_cmd`` starts
the Prefect flows and imports them inside its commands, so nothing here loads Prefect."""

from __future__ import annotations

import os
import sys

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
    run_cmd,
    store_cmd,
    train_cmd,
)
from spade_core.faults import DEBUG_ENV, debugging, fault_line
from spade_core.threads import passive_waits

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
app.command("verify")(store_cmd.verify)
app.command("run")(run_cmd.run)
app.command("resume")(run_cmd.resume)
app.command("status")(store_cmd.status)
app.command("serve")(run_cmd.serve)
app.add_typer(env_cmd.env_app, name="env")
app.add_typer(envs_cmd.envs_app, name="envs")
app.add_typer(corpus_cmd.corpus_app, name="corpus")
app.add_typer(config_cmd.config_app, name="config")


def main() -> None:
    """The console script: every command, with a store fault said in one line (:mod:`spade_core.faults`)."""
    passive_waits()
    if "--debug" in sys.argv[1:]:
        sys.argv.remove("--debug")
        os.environ[DEBUG_ENV] = "1"
    try:
        app()
    except Exception as exc:
        line = None if debugging() else fault_line(exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        raise SystemExit(1) from None
