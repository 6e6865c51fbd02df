"""``spade envs list|show|lineage|export``: browse the environment pool of a store, or export a run's."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve
from spade_core.envs.export import DATA_FILE, ExportFilter, build_export, write_export
from spade_core.envs.export_card import dataset_card
from spade_core.report.lineage import lineage
from spade_core.store.reader import RunReader

envs_app = typer.Typer(
    help="Browse the environments of a store (designs, validation, scores, hints), or export a run's.",
    no_args_is_help=True,
)

# The designer reward is the reward stage's (designer_rewards, over the generation's whole window): raw, the
# variant's value, and reward, the advantage trained on (null: dropped, or not rewarded: invalid, or the
# generation's reward stage has not run).
POOL_SQL = """
select d.run_id, d.gen, d.env_id, any_value(d.skill) as skill, any_value(d.kind) as kind,
       bool_or(v.ok) as valid, any_value(v.error_type) as error_type,
       any_value(s.win_rate) as win_rate, any_value(s.regret) as regret,
       any_value(r.raw) as designer_raw, any_value(r.reward) as designer_reward
from designs d
left join validations v on v.env_id = d.env_id and v.run_id = d.run_id and v.gen = d.gen
left join env_scores s on s.env_id = d.env_id and s.run_id = d.run_id and s.gen = d.gen
left join designer_rewards r on r.design_id = d.design_id and r.env_id = d.env_id and r.run_id = d.run_id
     and r.gen = d.gen
where d.env_id is not null {filters}
group by all
order by regret desc nulls last, d.gen, d.env_id
limit ?
"""


@envs_app.command("list")
@clean_errors
def list_envs(
    run_id: Annotated[str | None, typer.Option("--run-id", help="Only this run.")] = None,
    gen: Annotated[int | None, typer.Option("--gen", help="Only this generation.")] = None,
    valid_only: Annotated[bool, typer.Option("--valid-only", help="Only environments that passed validation.")] = False,
    limit: Annotated[int, typer.Option("--limit", help="At most this many rows.")] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON array of row objects.")] = False,
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """List designed environments with validation outcome, win rate, regret and the designer reward trained
    on (designer_raw: the variant's value; designer_reward: the advantage; empty when not rewarded)."""
    cfg = resolve(preset, config, overrides, store)
    filters: list[str] = []
    params: list[object] = []
    if run_id is not None:
        filters.append("and d.run_id = ?")
        params.append(run_id)
    if gen is not None:
        filters.append("and d.gen = ?")
        params.append(gen)
    sql = POOL_SQL.format(filters=" ".join(filters))
    frame = RunReader(open_store(cfg)).query(sql, [*params, limit])
    if valid_only:
        frame = frame[frame["valid"].fillna(False).astype(bool)]
    if as_json:
        typer.echo(frame.to_json(orient="records"))
    elif frame.empty:
        typer.echo("no environments in this store yet")
    else:
        typer.echo(frame.to_string(index=False, float_format=lambda x: f"{x:.3f}"))


@envs_app.command("show")
@clean_errors
def show_env(
    env_id: Annotated[str, typer.Argument(help="The environment's id (16 hex).")],
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Show one environment: its code, validation checks, scores, designer reward and hint."""
    reader = RunReader(open_store(resolve(preset, config, overrides, store)))  # one reading of the markers
    designs = reader.query(
        "select run_id, gen, design_id, skill, kind, code from designs where env_id = ? order by gen limit 1",
        [env_id],
    )
    if designs.empty:
        raise FileNotFoundError(f"environment {env_id!r} is not in the store's designs table")
    d = designs.iloc[0]
    typer.echo(f"env {env_id}  run={d.run_id} gen={d.gen} design={d.design_id} skill={d.skill} kind={d.kind}")
    checks = reader.query("select ok, error_type, message, checks from validations where env_id = ? limit 1", [env_id])
    if not checks.empty:
        c = checks.iloc[0]
        typer.echo(f"validation: {'ok' if c.ok else c.error_type}  {c.message or ''}")
        typer.echo("checks: " + json.dumps({k: bool(v) for k, v in dict(c.checks).items()}))
    scores = reader.query(
        "select win_rate, r_hint, r_no_hint, regret from env_scores where run_id = ? and gen = ? and env_id = ? "
        "limit 1",
        [str(d.run_id), int(d.gen), env_id],
    )
    if not scores.empty:
        typer.echo("scores: " + ", ".join(f"{k}={v:.3f}" for k, v in scores.iloc[0].items()))
    typer.echo(_designer_reward(reader, d))
    hints = reader.query("select hint, leaks_solution from hints where env_id = ? limit 1", [env_id])
    if not hints.empty:
        typer.echo(f"hint{' (LEAKS SOLUTION)' if hints.leaks_solution[0] else ''}: {hints.hint[0]}")
    typer.echo("\n" + str(d.code))


def _designer_reward(reader: RunReader, design: Any) -> str:
    """The line saying what the design's designer was rewarded: the reward stage's row of the design."""
    rewards = reader.query(
        "select raw, dropped, reward, train_step from designer_rewards "
        "where run_id = ? and gen = ? and design_id = ? limit 1",
        [str(design.run_id), int(design.gen), str(design.design_id)],
    )
    if rewards.empty:
        return "designer reward: n/a (not rewarded: invalid, every play broken, or its reward stage has not run)"
    r = rewards.iloc[0]
    if r.dropped:
        return f"designer reward: raw={r.raw:.3f}, dropped (raw < 0: never trained)"
    return f"designer reward: raw={r.raw:.3f}, trained={r.reward:+.3f} at step {int(r.train_step)}"


@envs_app.command("lineage")
@clean_errors
def show_lineage(
    env_id: Annotated[str, typer.Argument(help="The environment's id (16 hex).")],
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON array of row objects, the environment first.")
    ] = False,
    run_ids: Annotated[
        list[str] | None,
        typer.Option(
            "--run-id",
            help="Only this run's rows (and those of the runs its config names) name parents; repeatable "
            "(default: every run of the store).",
        ),
    ] = None,
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """An environment's parent chain (designer.mode mutate or parameters): each ancestor with its origin (a
    design of the store, a starter or seed environment), generation, skill and its latest win rate and regret.
    Only rows in files a stage marker lists are read; with --run-id, only those of that run and of the runs
    its config names (designer.fixed_pool run:ID)."""
    chain = lineage(open_store(resolve(preset, config, overrides, store)), env_id, run_ids or None)
    if as_json:
        typer.echo(chain.to_json(orient="records"))
        return
    for row in chain.itertuples():
        where = f"gen {row.gen} of {row.run_id}" if row.origin == "design" else row.origin
        scored = (
            f"win rate {row.win_rate:.3f}  regret {row.regret:+.3f}"
            if row.win_rate is not None and row.win_rate == row.win_rate
            else "not played"
        )
        label = "env" if row.depth == 0 else "parent"
        typer.echo(f"{'  ' * row.depth}{label} {row.env_id}  {where}  skill {row.skill}  {scored}")


@envs_app.command("export")
@clean_errors
def export_envs(
    run_id: Annotated[str, typer.Argument(help="The run whose environments to export.", metavar="RUN")],
    to: Annotated[str, typer.Option("--to", help="The export directory: a local path or s3://bucket/prefix.")],
    gen: Annotated[int | None, typer.Option("--gen", help="Only the environments of this generation's pool.")] = None,
    skills: Annotated[
        list[str] | None, typer.Option("--skill", help="Only environments of this skill; repeatable.")
    ] = None,
    min_win_rate: Annotated[float | None, typer.Option("--min-win-rate", help="Latest win rate at least this.")] = None,
    max_win_rate: Annotated[float | None, typer.Option("--max-win-rate", help="Latest win rate at most this.")] = None,
    min_regret: Annotated[float | None, typer.Option("--min-regret", help="Latest regret at least this.")] = None,
    max_regret: Annotated[float | None, typer.Option("--max-regret", help="Latest regret at most this.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Write into a directory that is not empty.")] = False,
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Export a run's environments (its pool, one row per environment) as a Hugging Face dataset: DIR/data/*.parquet
    and a dataset card, DIR/README.md. Each row holds the code, env_id, skill, kind, source document, parent and
    lineage, the validator's verdict, and the win rates with and without hint and the regret per generation. The
    bands filter on the latest scored generation and leave out environments never scored. Load it with
    datasets.load_dataset("parquet", data_files="DIR/data/*.parquet"), play it through Gymnasium with
    spade_core.envs.gym.register_export(DIR), train on it with TRL (spade_core.envs.trl_envs), or play it as a
    fixed pool: --set designer.fixed_pool=export:DIR. An S3 directory uses the store's endpoint."""
    cfg = resolve(preset, config, overrides, store)
    started = time.perf_counter()
    filters = ExportFilter(
        gen=gen,
        skills=tuple(skills or ()),
        min_win_rate=min_win_rate,
        max_win_rate=max_win_rate,
        min_regret=min_regret,
        max_regret=max_regret,
    )
    export = build_export(open_store(cfg), run_id, filters)
    write_export(export, to, dataset_card(export), endpoint_url=cfg.store.endpoint_url, overwrite=force)
    skills_in = sorted(set(export.rows.column("skill").to_pylist()))
    typer.echo(
        f"exported {export.rows.num_rows} environments of run {run_id} ({len(skills_in)} skills) to {to} "
        f"in {time.perf_counter() - started:.1f} s; load with "
        f'datasets.load_dataset("parquet", data_files="{to.rstrip("/")}/{DATA_FILE}")'
    )
