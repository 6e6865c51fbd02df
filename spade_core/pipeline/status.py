"""Which stages of which generations of a run are complete, read from the store alone (docs/DESIGN.md §10),
so ``spade status`` and ``spade resume`` need nothing but the store.

The stage list comes from :func:`spade_core.pipeline.registry.stages_for`; completeness from the stage
markers (:mod:`spade_core.store.markers`): a stage is done when its marker is there and every file it
lists is intact.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from spade_core.config import SpadeConfig
from spade_core.pipeline.registry import chain_for, stages_for
from spade_core.stage_names import STEP_STAGES, instance_name
from spade_core.store.artifacts import Store
from spade_core.store.integrity import Listings, file_problems
from spade_core.store.markers import MarkerScan, StageRecord, scan_markers


def stage_names(cfg: SpadeConfig, gen: int) -> list[str]:
    """The names of the stages generation ``gen`` runs (the registry's ``applies``), in order."""
    return [s.name for s in stages_for(cfg, gen)]


def generation_stages(store: Store, cfg: SpadeConfig, run_id: str, gen: int) -> dict[str, str]:
    """``{stage: 'done' | 'damaged' | 'k/n shards' | 'partial' | 'todo'}`` for one generation."""
    scan = scan_markers(store, run_id)
    return _stage_states(cfg, gen, scan.records.get(gen, {}), store, _bad_names(scan, gen))


def _bad_names(scan: MarkerScan, gen: int) -> set[str]:
    return {bad.name for bad in scan.bad if bad.gen == gen}


def _stage_states(
    cfg: SpadeConfig, gen: int, markers: dict[str, StageRecord], store: Store, bad: Collection[str] = ()
) -> dict[str, str]:
    """Each stage's state from the generation's markers. A stage whose marker (or a shard's) lists a file
    that is missing, has another size or another digest, or whose marker file is damaged (``bad``: the
    names of those markers), is ``damaged``: not done, so a run or resume redoes it (one listing per
    directory, shared by the generation's markers)."""
    listings: Listings = {}
    broken = {m.stage for m in markers.values() if file_problems(store, m, listings)}
    states = {}
    for stage in stage_names(cfg, gen):
        if any(name == stage or _is_shard_of(name, stage) for name in bad):
            states[stage] = "damaged"
            continue
        if stage in markers:
            states[stage] = "damaged" if stage in broken else "done"
            continue
        shards = [m for m in markers.values() if m.stage == stage and m.shard is not None]
        total = shards[0].info.get("shards") if shards else None
        states[stage] = (f"{len(shards)}/{total} shards" if total else "partial") if shards else "todo"
    return states


def _is_shard_of(name: str, stage: str) -> bool:
    """Whether the marker name ``name`` is a shard of ``stage`` (``rollout-s0-3`` of ``rollout-s0``)."""
    return name.startswith(f"{stage}-") and name[len(stage) + 1 :].isdigit()


def model_faults(markers: dict[str, StageRecord]) -> tuple[int, int]:
    """Plays of a generation whose model call failed (left out of scoring and training) and plays started
    again after one, from its rollout stages' records (a sharded stage's whole-stage record sums its shards)."""
    whole = [r for r in markers.values() if r.shard is None and r.stage.startswith("rollout-s")]
    return (
        sum(int(r.info.get("model_errors", 0)) for r in whole),
        sum(int(r.info.get("model_retries", 0)) for r in whole),
    )


def restart_causes(record: StageRecord) -> list[str]:
    """Why the engine was replaced while this stage (or shard) used it, one line per replacement: the
    ``error`` of each ``restart`` weight swap — a replica died or hung, a reload failed. A restart after the
    trainer's turn stopped the engine is planned and has none."""
    swaps = record.info.get("weight_swaps", [])
    return [str(s["error"]) for s in swaps if s.get("method") == "restart" and s.get("error")]


def engine_faults(records: Iterable[StageRecord]) -> list[str]:
    """:func:`restart_causes` of the whole-stage records (a sharded stage's lists its shards'; the shard
    records are skipped, so each replacement counts once)."""
    return [cause for record in records if record.shard is None for cause in restart_causes(record)]


def generation_complete(store: Store, cfg: SpadeConfig, run_id: str, gen: int) -> bool:
    return all(state == "done" for state in generation_stages(store, cfg, run_id, gen).values())


def run_status(store: Store, cfg: SpadeConfig, run_id: str) -> dict[int, dict[str, str]]:
    """Stage states of every generation the run has started, in order."""
    scan = scan_markers(store, run_id)
    gens = sorted(set(scan.records) | {bad.gen for bad in scan.bad})
    return {g: _stage_states(cfg, g, scan.records.get(g, {}), store, _bad_names(scan, g)) for g in gens}


def generation_phase(cfg: SpadeConfig, gen: int, states: dict[str, str]) -> str:
    """Where a generation is, from its stage states: ``complete``, ``not started``, ``design chain i/n``
    (the stages before the steps; with asynchronous generations they run beside the previous generation's
    training), ``step k/K`` (the first step not done) or ``finishing`` (the stages after the steps)."""
    if all(v == "done" for v in states.values()):
        return "complete"
    if all(v == "todo" for v in states.values()):
        return "not started"
    chain = [s.name for s in chain_for(cfg, gen)]
    done = sum(states.get(name) == "done" for name in chain)
    if done < len(chain):
        return f"design chain {done}/{len(chain)}"
    k = cfg.training.steps_per_generation
    for step in range(k):
        if any(states.get(instance_name(x, step), "done") != "done" for x in STEP_STAGES):
            return f"step {step + 1}/{k}"
    return "finishing"


def next_generation(store: Store, cfg: SpadeConfig, run_id: str) -> int:
    """The first generation (from 1) that is not complete: where a new or resumed flow run starts."""
    scan = scan_markers(store, run_id)
    gen = 1
    while gen in scan.records and all(
        s == "done" for s in _stage_states(cfg, gen, scan.records[gen], store, _bad_names(scan, gen)).values()
    ):
        gen += 1
    return gen


def incomplete_generations(store: Store, cfg: SpadeConfig, run_id: str, generations: int) -> list[int]:
    """The generations of 1..``generations`` that are not complete, in order: what a run of that many
    generations still has to do (a complete one is skipped, an interrupted one finished)."""
    return [gen for gen in range(1, generations + 1) if not generation_complete(store, cfg, run_id, gen)]
