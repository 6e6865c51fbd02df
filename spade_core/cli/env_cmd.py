"""``spade validate``, ``spade env play`` and ``spade env check``: environment files, always run inside the jail."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Any

import typer

from sandbox.session import EnvSession, Replay
from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, clean_errors, resolve
from spade_core.envs.gym_check import check_jailed_env
from spade_core.envs.validate import limits_from_config, validate_many

env_app = typer.Typer(help="Play and inspect environment files (in the jail).", no_args_is_help=True)


def read_env_files(paths: list[Path]) -> list[str]:
    """The sources of environment files; a missing, unreadable or non-UTF-8 file is one clear error."""
    sources = []
    for p in paths:
        if not p.exists():
            raise FileNotFoundError(f"environment file {str(p)!r} does not exist")
        if not p.is_file():
            raise FileNotFoundError(f"environment file {str(p)!r} is not a file")
        try:
            sources.append(p.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise FileNotFoundError(f"environment file {str(p)!r} cannot be read: {exc}") from None
    return sources


@clean_errors
def validate(
    paths: Annotated[list[Path], typer.Argument(help="Environment .py files.")],
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per file per line.")] = False,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Validate environment files in the jail against the contract (exit 0 when all pass, else 1).

    Checks, in order: parses, one env class, reset types, step accepts any string, deterministic reset,
    ends within max_turns, solution reaches the goal, not trivial.
    """
    cfg = resolve(preset, config, overrides)
    results = validate_many(read_env_files(paths), cfg.validation)
    for path, res in zip(paths, results, strict=True):
        if as_json:
            typer.echo(
                json.dumps(
                    {
                        "path": str(path),
                        "env_id": res.env_id,
                        "ok": res.ok,
                        "error_type": res.error_type,
                        "message": res.message,
                        "kind": res.kind,
                        "checks": res.checks,
                        "seconds": round(res.seconds, 3),
                    }
                )
            )
        else:
            mark = "ok  " if res.ok else "FAIL"
            detail = f"  {res.error_type}: {res.message}" if not res.ok else f"  ({res.kind}, {res.seconds:.2f}s)"
            typer.echo(f"{mark} {path} [{res.env_id}]{detail}")
    raise typer.Exit(0 if all(r.ok for r in results) else 1)


def _transcript(session: EnvSession, seed: int | None, actions: list[str]) -> dict[str, Any]:
    opened = session.open()
    if not opened.ok:
        return asdict(Replay(error_type=opened.error_type, message=opened.message))
    return asdict(session.replay(seed, actions))


@env_app.command("play")
@clean_errors
def play(
    path: Annotated[Path, typer.Argument(help="Environment .py file.")],
    seed: Annotated[int | None, typer.Option("--seed", help="Episode seed.")] = None,
    actions: Annotated[
        list[str] | None,
        typer.Option("--action", help="Replay this action (repeatable); without any, play interactively."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the transcript as JSON.")] = False,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Play an environment in the jail: interactively, or replay --action values and print the transcript."""
    cfg = resolve(preset, config, overrides)
    code = read_env_files([path])[0]
    with EnvSession(
        code,
        max_turns=cfg.validation.max_turns,
        limits=limits_from_config(cfg.validation),
        call_timeout_s=cfg.validation.call_timeout_s,
    ) as session:
        if actions:
            out = _transcript(session, seed, actions)
            if as_json:
                typer.echo(json.dumps(out))
            else:
                for i, obs in enumerate(out["observations"]):
                    if i:
                        typer.echo(f"> {actions[i - 1]}\n  reward={out['rewards'][i - 1]}")
                    typer.echo(obs)
                if out["error_type"]:
                    typer.echo(f"error: {out['error_type']}: {out['message']}")
            raise typer.Exit(1 if out["error_type"] else 0)
        _interactive(session, seed)


def _interactive(session: EnvSession, seed: int | None) -> None:
    result = session.open()
    if result.ok:
        result = session.reset(seed)
    if not result.ok:
        typer.echo(f"error: {result.error_type}: {result.message}")
        raise typer.Exit(1)
    typer.echo(result.data["obs"])
    total_turns = 0
    while True:
        try:
            action = input("\naction> ")
        except EOFError:
            typer.echo("")
            return
        step = session.step(action)
        total_turns += 1
        if not step.ok:
            typer.echo(f"error: {step.error_type}: {step.message}")
            raise typer.Exit(1)
        d = step.data
        typer.echo(f"{d['obs']}\n[reward={d['reward']} terminated={d['terminated']} truncated={d['truncated']}]")
        if d["terminated"] or d["truncated"]:
            typer.echo(f"episode over after {total_turns} turn(s); return={d['reward'] if d['terminated'] else 0.0}")
            return


@env_app.command("check")
@clean_errors
def check(
    paths: Annotated[list[Path], typer.Argument(help="Environment .py files.")],
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Run Gymnasium's own checker (gymnasium.utils.env_checker.check_env) on environment files in the jail.

    Each file is made as a Gymnasium user makes it, gymnasium.make("spade/Jailed-v0", code=...), with the
    validation section's max_turns and jail limits; check_env then runs on it with its render and close
    checks. One line per finding: "warn" for a warning Gymnasium logged, "FAIL" for the error that stopped
    the check; "ok" when a file has none. Exit code 0 when no file has a finding, else 1.

    This is the Gymnasium user's view; admission to the pipeline is decided by `spade validate`'s checks.
    """
    cfg = resolve(preset, config, overrides)
    sources = read_env_files(paths)
    clean = True
    for path, code in zip(paths, sources, strict=True):
        findings = check_jailed_env(
            code=code,
            max_turns=cfg.validation.max_turns,
            limits=limits_from_config(cfg.validation),
            call_timeout_s=cfg.validation.call_timeout_s,
        )
        for finding in findings:
            typer.echo(f"{'FAIL' if finding.level == 'error' else 'warn'} {path}: {finding.message}")
        if not findings:
            typer.echo(f"ok   {path}")
        clean = clean and not findings
    raise typer.Exit(0 if clean else 1)
