"""In what order a generation's stage instances run: one after another, or each as soon as its inputs are
done (docs/DESIGN.md §10).

With ``orchestration.max_staleness`` 0 every stage waits for the one before it (the registry order is a
valid order of the dependency graph). With 1, step ``k``'s plays do not wait for step ``k - 1``'s update
(:func:`spade_core.pipeline.registry.stages_for` drops that input), so the two run at once: each stage
starts, on a thread of its own, as soon as every input stage of this generation is done. A thread starts in a
copy of the caller's context, so a stage run from a Prefect flow submits its tasks to that flow run.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from spade_core.pipeline.stage import Stage
from spade_core.store.markers import StageRecord


def dependencies(stages: list[Stage]) -> dict[str, set[str]]:
    """For each stage instance, the instances of the same list it waits for (its inputs that are there).

    >>> from spade_core.pipeline.stage import always
    >>> stages = [Stage("a", always), Stage("b", always, inputs=("a", "x")), Stage("c", always, inputs=("a",))]
    >>> deps = dependencies(stages)
    >>> {k: sorted(v) for k, v in deps.items()}
    {'a': [], 'b': ['a'], 'c': ['a']}
    """
    names = {s.name for s in stages}
    return {s.name: {x for x in s.inputs if x in names} for s in stages}


def run_stages(
    stages: list[Stage],
    run_one: Callable[[Stage], StageRecord],
    records: dict[str, StageRecord],
    concurrent: bool,
    workers: int = 4,
) -> dict[str, StageRecord]:
    """Run ``stages`` with ``run_one`` and put each record into ``records`` (also returned) as it finishes.

    ``run_one`` reads the records it needs from ``records``. Sequential in the list's order unless
    ``concurrent``; then every stage whose inputs are done is started. The first failure stops the
    scheduling of new stages and is raised once the running ones have finished.
    """
    if not concurrent:
        for stage in stages:
            records[stage.name] = run_one(stage)
        return records
    deps = dependencies(stages)
    todo = list(stages)
    running: dict[Future[StageRecord], Stage] = {}
    failure: BaseException | None = None
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="stage") as pool:
        while todo or running:
            if failure is None:
                for stage in [s for s in todo if deps[s.name] <= records.keys()]:
                    todo.remove(stage)
                    running[pool.submit(contextvars.copy_context().run, run_one, stage)] = stage
            if not running:
                if failure is None:  # nothing runs and nothing can start: a dependency the list lacks
                    names = {s.name: sorted(deps[s.name] - records.keys()) for s in todo}
                    raise RuntimeError(f"stages wait for stages that never run: {names}")
                break
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                stage = running.pop(future)
                try:
                    records[stage.name] = future.result()
                except BaseException as exc:
                    failure = failure or exc
    if failure is not None:
        raise failure
    return records
