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

import contextvars
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger

from flows.generation import design_chain, generation
from flows.runners import task_runner_for
from spade_core.config import ConfigError, SpadeConfig, StoreConfig, available_presets, load_config
from spade_core.devices import use_generation_devices
from spade_core.pipeline.markers import read_marker
from spade_core.progress import bind_run_config, generation_complete, load_run_config, next_generation
from spade_core.store import Store

DEFAULT_PRESET = "tiny"
MEMORY_POLL_S = 1.0  # how often spade-run looks for a generation's memory marker (asynchronous generations)


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
    use_generation_devices(cfg)
    runner = task_runner_for(cfg)
    sub = generation.with_options(task_runner=runner, flow_run_name=f"{run_id}-gen-{gen}")
    return sub(cfg.model_dump(mode="json"), run_id, gen)


def run_design_chain_flow(cfg: SpadeConfig, run_id: str, gen: int) -> dict[str, Any]:
    """The ``spade-design-chain`` subflow of ``gen`` (its documents … hint) under the run's task runner."""
    use_generation_devices(cfg)
    runner = task_runner_for(cfg)
    sub = design_chain.with_options(task_runner=runner, flow_run_name=f"{run_id}-gen-{gen}-design")
    return sub(cfg.model_dump(mode="json"), run_id, gen)


def _in_thread(pool: ThreadPoolExecutor, fn: Any, *args: Any) -> Future[Any]:
    """``fn(*args)`` on a thread of ``pool``, in a copy of this context: a subflow it calls is a child of
    this flow run."""
    return pool.submit(contextvars.copy_context().run, fn, *args)


def _memory_written(store: Store, run_id: str, gen: int, current: Future[Any]) -> bool:
    """Wait until generation ``gen`` has written its memory (True) or its flow run ended without it. A store
    error while looking is logged and looked past: the generation itself is not affected by it."""

    def written() -> bool:
        try:
            return read_marker(store, run_id, gen, "memory") is not None
        except Exception as exc:
            get_run_logger().warning("run %s: could not read generation %d's memory marker: %s", run_id, gen, exc)
            return False

    while not current.done():
        if written():
            return True
        time.sleep(MEMORY_POLL_S)
    return written()


def _join_chain(ahead: Future[Any] | None, run_id: str, gen: int) -> None:
    """Wait for generation ``gen``'s design chain run ahead. Its failure is logged, not raised: generation
    ``gen``'s own flow run runs whatever stage of the chain has no marker (and fails there if it must)."""
    if ahead is None:
        return
    try:
        ahead.result()
    except Exception as exc:
        get_run_logger().warning(
            "run %s: generation %d's design chain, run ahead, failed (%s: %s); its flow run redoes the rest",
            run_id, gen, type(exc).__name__, exc,
        )  # fmt: skip


def overlapped_generations(cfg: SpadeConfig, store: Store, run_id: str, gens: list[int]) -> list[dict[str, Any]]:
    """Generations ``gens`` (in order) with each next one's design chain running beside (docs/DESIGN.md §10).

    Generation g runs on one thread; once its memory marker is in the store (step 0's plays are scored),
    generation g+1's design chain starts on another, on the newest checkpoint at that moment. Generation
    g+1's own flow run starts after g's ends and after the chain is joined: its chain stages are then
    reused from their markers. A failure of generation g is raised once the chain beside it has ended (the
    store keeps what finished); a failure of the chain is logged and left to g+1's own flow run.
    """
    logger = get_run_logger()
    summaries: list[dict[str, Any]] = []
    ahead: Future[Any] | None = None
    with ThreadPoolExecutor(max_workers=2, thread_name_prefix="generation") as pool:
        for i, gen in enumerate(gens):
            _join_chain(ahead, run_id, gen)  # this generation's chain, run ahead: joined before its first step
            ahead = None
            current = _in_thread(pool, run_generation_flow, cfg, run_id, gen)
            following = gens[i + 1] if i + 1 < len(gens) else None
            if following is not None and _memory_written(store, run_id, gen, current):
                logger.info("run %s: generation %d's design chain starts beside generation %d", run_id, following, gen)
                ahead = _in_thread(pool, run_design_chain_flow, cfg, run_id, following)
            try:
                summaries.append(current.result())
            except BaseException:
                _join_chain(ahead, run_id, following or gen)  # never leave a chain writing behind a failed run
                raise
    return summaries


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
    """Generations 1..``generations`` of a run; complete ones are skipped, an incomplete one is finished.
    With ``orchestration.async_generations`` each next generation's design chain runs beside the current
    generation's training steps."""
    cfg = resolve_run_config(run_id, config, overrides, store)
    st = Store.from_config(cfg.store)
    bind_run_config(st, run_id, cfg)
    logger = get_run_logger()
    todo = []
    for gen in range(1, generations + 1):
        if generation_complete(st, cfg, run_id, gen):
            logger.info("run %s generation %d is complete: skipped", run_id, gen)
        else:
            todo.append(gen)
    if cfg.orchestration.async_generations:
        return overlapped_generations(cfg, st, run_id, todo)
    return [run_generation_flow(cfg, run_id, gen) for gen in todo]


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
