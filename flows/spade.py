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

from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from flows.generation import generation
from flows.runners import task_runner_for
from spade_core.config import ConfigError, SpadeConfig, StoreConfig, available_presets, load_config
from spade_core.progress import bind_run_config, generation_complete, load_run_config, next_generation
from spade_core.store import Store

DEFAULT_PRESET = "tiny"


def resolve_run_config(
    run_id: str, config: str | None = None, overrides: list[str] | None = None, store: str | None = None
) -> SpadeConfig:
    """The config a flow run uses (see the module doc); one-line :class:`ConfigError` for a bad value."""
    items = [*(overrides or []), *([f"store.root={store}"] if store else [])]
    if config is None:
        stored = load_run_config(Store(store or StoreConfig().root), run_id, items)
        return stored if stored is not None else load_config(DEFAULT_PRESET, None, items)
    if config in available_presets():
        return load_config(config, None, items)
    if not Path(config).is_file():
        presets = ", ".join(available_presets())
        raise ConfigError(f"config {config!r} is neither a preset ({presets}) nor a YAML file")
    return load_config(None, config, items)


def run_generation_flow(cfg: SpadeConfig, run_id: str, gen: int) -> dict[str, Any]:
    """The ``spade-generation`` subflow of ``gen`` under the run's task runner."""
    runner = task_runner_for(cfg)
    sub = generation.with_options(task_runner=runner, flow_run_name=f"{run_id}-gen-{gen}")
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
    cfg = resolve_run_config(run_id, config, overrides, store)
    st = Store.from_config(cfg.store)
    bind_run_config(st, run_id, cfg)
    gen = gen if gen is not None else next_generation(st, cfg, run_id)
    if gen < 1:
        raise ConfigError(f"gen must be >= 1 (generations are numbered from 1), got {gen}")
    get_run_logger().info("run %s generation %d (store %s, config %s)", run_id, gen, st.base, cfg.config_hash())
    return run_generation_flow(cfg, run_id, gen)


@flow(name="spade-run", log_prints=True)
def spade_run(
    run_id: str,
    generations: int = 1,
    config: str | None = None,
    overrides: list[str] | None = None,
    store: str | None = None,
) -> list[dict[str, Any]]:
    """Generations 1..``generations`` of a run; complete ones are skipped, an incomplete one is finished."""
    cfg = resolve_run_config(run_id, config, overrides, store)
    st = Store.from_config(cfg.store)
    bind_run_config(st, run_id, cfg)
    logger = get_run_logger()
    summaries = []
    for gen in range(1, generations + 1):
        if generation_complete(st, cfg, run_id, gen):
            logger.info("run %s generation %d is complete: skipped", run_id, gen)
            continue
        summaries.append(run_generation_flow(cfg, run_id, gen))
    return summaries


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
    from spade_core.checkpoints import checkpoint_complete
    from spade_core.eval import evaluate_checkpoint

    logger = get_run_logger()
    cfg = resolve_run_config(run_id, None, None, store)

    st = Store.from_config(cfg.store)
    if gens is None:
        markers = next_generation(st, cfg, run_id)
        k = cfg.training.steps_per_generation
        gens = [g for g in range(markers + 1) if checkpoint_complete(st, run_id, g * k)]
    evaluated = {}
    for g in gens:
        frame = evaluate_checkpoint(cfg, st, run_id, g, suites=suites, limit=limit)
        evaluated[g] = frame.groupby("suite")["score"].mean().round(4).to_dict() if not frame.empty else {}
        logger.info("run %s checkpoint %d: %s", run_id, g, evaluated[g])
    return {"run_id": run_id, "evaluated": evaluated}
