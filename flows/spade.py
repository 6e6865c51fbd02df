"""The SPADE flows (docs/DESIGN.md §10): ``spade`` (one generation; deployment ``iteration``), ``spade-run``
(generations 1..N; deployment ``run``) and ``spade-eval`` (checkpoints; deployment ``eval``).

Parameters are plain values so that ``prefect deployment run spade/iteration -p run_id=R`` works:
``config`` is a preset name (``tiny``, ``gpu-1x``, ``gpu-8x``) or a YAML file, ``overrides`` a list of
``key=value`` strings, ``store`` the store root. Without ``config`` a run that exists continues with its
stored config (``{store}/runs/{run_id}/config.yaml``) and a new run starts from the ``tiny`` preset.
The first generation stores the resolved config; a later call whose config would change the run's
artifacts is refused (use a new run id).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from prefect import flow, get_run_logger
from prefect.exceptions import MissingContextError

from flows.generation import design_chain, generation
from flows.runners import task_runner_for
from spade_core.config import ConfigError, SpadeConfig
from spade_core.eval import evaluate_checkpoint
from spade_core.pipeline.interrupt import rearmed
from spade_core.pipeline.leases import process_pool
from spade_core.pipeline.run_config import bind_run_config, flow_config
from spade_core.pipeline.runner import run_generations
from spade_core.pipeline.status import incomplete_generations, next_generation
from spade_core.steps import first_step
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import checkpoint_complete
from spade_core.store.runlock import RunLock
from spade_core.threads import passive_waits


@contextlib.contextmanager
def owned_run(cfg: SpadeConfig, store: Store, run_id: str) -> Iterator[None]:
    """This flow run holds run ``run_id`` for the block: its lock (one run per run id; nested under the
    command's that started it here), the command's signal handlers in place of Prefect's (a signal stops the
    run within seconds), and the run bound to its config."""
    with RunLock(store, run_id), rearmed(run_id):
        bind_run_config(store, run_id, cfg)
        yield


@contextlib.contextmanager
def run_engine(cfg: SpadeConfig, store: Store, run_id: str) -> Iterator[None]:
    """The run's engine service (``model.backend`` vllm), owned by this flow's process for the length of the
    block: every stage and worker process of the run leases it; it stops when the run ends or fails."""
    pool = process_pool()
    service = pool.serve(cfg, store, run_id)
    if service is not None:
        with contextlib.suppress(MissingContextError):  # outside a flow run (a script) there is no run log
            get_run_logger().info("run %s: engine service at %s (%d replicas)", run_id, service.url, service.count)
    try:
        yield
    finally:
        pool.release(wait=False)


def run_generation_flow(cfg: SpadeConfig, run_id: str, gen: int) -> dict[str, Any]:
    """The ``spade-generation`` subflow of ``gen`` under the run's task runner."""
    runner = task_runner_for(cfg)
    sub = generation.with_options(task_runner=runner, flow_run_name=f"{run_id}-gen-{gen}")
    return sub(cfg.model_dump(mode="json"), run_id, gen)


def run_design_chain_flow(cfg: SpadeConfig, run_id: str, gen: int) -> dict[str, Any]:
    """The ``spade-design-chain`` subflow of ``gen`` (its documents … hint) under the run's task runner."""
    runner = task_runner_for(cfg)
    sub = design_chain.with_options(task_runner=runner, flow_run_name=f"{run_id}-gen-{gen}-design")
    return sub(cfg.model_dump(mode="json"), run_id, gen)


@flow(name="spade", log_prints=True)
def spade(
    run_id: str,
    gen: int | None = None,
    config: str | None = None,
    overrides: list[str] | None = None,
    store: str | None = None,
) -> dict[str, Any]:
    """Run (or finish) one SPADE generation: sample documents, design, validate, hint, roll out, score,
    update memory, train, and evaluate when due. ``gen`` defaults to the run's first incomplete one."""
    passive_waits()
    cfg = flow_config(run_id, config, overrides, store)
    st = Store.from_config(cfg.store)
    with owned_run(cfg, st, run_id):
        gen = gen if gen is not None else next_generation(st, cfg, run_id)
        if gen < 1:
            raise ConfigError(f"gen must be >= 1 (generations are numbered from 1), got {gen}")
        get_run_logger().info("run %s generation %d (store %s, config %s)", run_id, gen, st.base, cfg.config_hash())
        with run_engine(cfg, st, run_id):
            return run_generation_flow(cfg, run_id, gen)


@flow(name="spade-run", log_prints=True)
def spade_run(
    run_id: str,
    generations: int = 1,
    config: str | None = None,
    overrides: list[str] | None = None,
    store: str | None = None,
) -> list[dict[str, Any]]:
    """Generations 1..``generations`` of a run; complete ones are skipped, an incomplete one is finished.
    With ``orchestration.async_generations`` each next generation's design chain runs beside the current
    generation's training steps."""
    passive_waits()
    cfg = flow_config(run_id, config, overrides, store)
    st = Store.from_config(cfg.store)
    with owned_run(cfg, st, run_id):
        logger = get_run_logger()
        todo = incomplete_generations(st, cfg, run_id, generations)
        for gen in sorted(set(range(1, generations + 1)) - set(todo)):
            logger.info("run %s generation %d is complete: skipped", run_id, gen)
        with run_engine(cfg, st, run_id):
            return run_generations(
                cfg,
                st,
                run_id,
                todo,
                lambda gen: run_generation_flow(cfg, run_id, gen),
                lambda gen: run_design_chain_flow(cfg, run_id, gen),
            )


@flow(name="spade-eval", log_prints=True)
def spade_eval(
    run_id: str,
    gens: list[int] | None = None,
    suites: list[str] | None = None,
    limit: int | None = None,
    store: str | None = None,
) -> dict[str, Any]:
    """Evaluate checkpoints of a run (default: the base model, gen 0, and every complete checkpoint) on the
    held-out suites; writes the ``evals`` table."""
    passive_waits()
    logger = get_run_logger()
    cfg = flow_config(run_id, None, None, store)
    st = Store.from_config(cfg.store)
    if gens is None:
        gens = [
            g
            for g in range(next_generation(st, cfg, run_id) + 1)
            if checkpoint_complete(st, run_id, first_step(cfg, g + 1))
        ]
    evaluated = {}
    for g in gens:
        frame = evaluate_checkpoint(cfg, st, run_id, g, suites=suites, limit=limit)
        evaluated[g] = frame.groupby("suite")["score"].mean().round(4).to_dict() if not frame.empty else {}
        logger.info("run %s checkpoint %d: %s", run_id, g, evaluated[g])
    return {"run_id": run_id, "evaluated": evaluated}
