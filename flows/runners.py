"""The task runner of a run, from ``orchestration.task_runner`` (docs/DESIGN.md §10).

- ``threads`` (default): Prefect's thread pool in the flow's process.
- ``processes``: Prefect's process pool (each worker process loads its own model once).
- ``dask``: ``prefect-dask`` on a temporary local Dask cluster, or on the scheduler at
  ``orchestration.dask_address`` (``tcp://host:8786``) so that the sharded stages (validation, rollouts)
  spread over machines without code changes. Every worker needs the project installed and the store
  reachable; tasks are stateless against the store.
"""

from __future__ import annotations

from typing import Any

from spade_core.config import SpadeConfig


def task_runner_for(cfg: SpadeConfig) -> Any:
    """A new task runner for one flow run of ``cfg``."""
    kind = cfg.orchestration.task_runner
    if kind == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner()
    if kind == "processes":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner()
    try:
        from prefect_dask import DaskTaskRunner
    except ModuleNotFoundError:
        raise RuntimeError(
            "orchestration.task_runner is 'dask' but prefect-dask is not installed: pip install prefect-dask"
        ) from None
    if cfg.orchestration.dask_address:
        return DaskTaskRunner(address=cfg.orchestration.dask_address)
    # A local cluster: one single-threaded worker process per core (jails and models are the parallelism),
    # no dashboard port to collide with other users of the machine.
    return DaskTaskRunner(cluster_kwargs={"processes": True, "threads_per_worker": 1, "dashboard_address": None})
