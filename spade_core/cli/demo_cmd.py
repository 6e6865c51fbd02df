"""``spade demo``: a quick check of the sandbox and the store on the seed library (no model).

``make demo`` runs one full SPADE generation with ``spade run``; this command checks the machine first."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from spade_core.cli.common import ConfigOpt, PresetOpt, SetOpt, StoreOpt, clean_errors, open_store, resolve
from spade_core.envs.seed_check import run_seed_check
from spade_core.store.reader import RunReader


@clean_errors
def demo(
    run_id: Annotated[str, typer.Option("--run-id", help="Run id to write under.")] = "demo",
    store: StoreOpt = None,
    preset: PresetOpt = "tiny",
    config: ConfigOpt = None,
    overrides: SetOpt = None,
) -> None:
    """Check the sandbox and the store on the seed library (no model; one full generation: spade run).

    Validates the seed environments in the jail, plays scripted episodes, writes the validations and
    episodes tables and queries them back with DuckDB.
    """
    cfg = resolve(preset, config, overrides, store)
    st = open_store(cfg)
    t0 = time.perf_counter()
    summary = run_seed_check(cfg, st, run_id)
    typer.echo(
        f"seed environments: {summary.valid}/{summary.envs} valid; {summary.episodes} scripted episodes "
        f"(reference return {summary.reference_mean_return:.2f}, empty {summary.empty_mean_return:.2f}) "
        f"in {time.perf_counter() - t0:.1f}s"
    )
    frame = RunReader(st).query(
        "select condition, count(*) as episodes, avg(episode_return) as mean_return, "
        f"avg(turns) as mean_turns from episodes where run_id = '{run_id}' group by all order by 1",
    )
    typer.echo(frame.to_string(index=False))
    typer.echo(f'store: {st.base}  (try: spade sql "select * from validations")')
