"""Which stages of which generations are complete, the run's bound config, and generation summaries —
all read from the store alone (docs/DESIGN.md §4, §10, §12), so ``spade status`` and ``spade resume``
need nothing but the store.

The stage list comes from :func:`spade_core.pipeline.registry.stages_for`; completeness from the stage markers
(:mod:`spade_core.pipeline.markers`). A run id is bound to its config: the first generation writes
``runs/{run_id}/config.yaml``; a later one with a config that would change what is written (anything but
the store location and the execution-only settings ``orchestration.task_runner``, ``dask_address``,
``retries``, ``retry_delay_s``) is refused with a message naming the keys.
"""

from __future__ import annotations

from typing import Any

from spade_core.config import SpadeConfig, load_config_text
from spade_core.pipeline.markers import StageRecord, artifact_hash, bound_settings, list_markers
from spade_core.pipeline.names import STEP_STAGES, instance_name
from spade_core.pipeline.registry import chain_for
from spade_core.pipeline.registry import stages_for as _stages_for
from spade_core.pipeline.verdicts import final_verdicts
from spade_core.pipeline.verify import Listings, file_problems
from spade_core.store import Store


class RunConfigMismatch(ValueError):
    """A run id reused with a config that would change its artifacts; the message names the keys."""


# -- what a generation needs ---------------------------------------------------------------------------
def stages_for(cfg: SpadeConfig, gen: int) -> list[str]:
    """The names of the stages generation ``gen`` runs (the registry's ``applies``), in order."""
    return [s.name for s in _stages_for(cfg, gen)]


def generation_stages(store: Store, cfg: SpadeConfig, run_id: str, gen: int) -> dict[str, str]:
    """``{stage: 'done' | 'damaged' | 'k/n shards' | 'partial' | 'todo'}`` for one generation."""
    markers = list_markers(store, run_id).get(gen, {})
    return _stage_states(cfg, gen, markers, store)


def _stage_states(cfg: SpadeConfig, gen: int, markers: dict[str, StageRecord], store: Store) -> dict[str, str]:
    """Each stage's state from the generation's markers. A stage whose marker (or a shard's) lists a file
    that is missing or has another size is ``damaged``: not done, so a run or resume redoes it (one listing
    per directory, shared by the generation's markers)."""
    listings: Listings = {}
    broken = {m.stage for m in markers.values() if file_problems(store, m, listings)}
    states = {}
    for stage in stages_for(cfg, gen):
        if stage in markers:
            states[stage] = "damaged" if stage in broken else "done"
            continue
        shards = [m for m in markers.values() if m.stage == stage and m.shard is not None]
        total = shards[0].info.get("shards") if shards else None
        states[stage] = (f"{len(shards)}/{total} shards" if total else "partial") if shards else "todo"
    return states


def generation_complete(store: Store, cfg: SpadeConfig, run_id: str, gen: int) -> bool:
    return all(state == "done" for state in generation_stages(store, cfg, run_id, gen).values())


def run_status(store: Store, cfg: SpadeConfig, run_id: str) -> dict[int, dict[str, str]]:
    """Stage states of every generation the run has started, in order."""
    markers = list_markers(store, run_id)
    return {g: _stage_states(cfg, g, markers[g], store) for g in sorted(markers)}


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
    markers = list_markers(store, run_id)
    gen = 1
    while gen in markers and all(s == "done" for s in _stage_states(cfg, gen, markers[gen], store).values()):
        gen += 1
    return gen


# -- the run's config ----------------------------------------------------------------------------------
def run_config_path(store: Store, run_id: str) -> str:
    return f"{store.run_dir(run_id)}/config.yaml"


def load_run_config(store: Store, run_id: str, overrides: list[str] | tuple[str, ...] = ()) -> SpadeConfig | None:
    """The run's stored config (with ``overrides`` on top), or None for a run the store has not seen."""
    try:
        text = store.read_bytes(run_config_path(store, run_id)).decode()
    except FileNotFoundError:
        return None
    return load_config_text(text, overrides)


def bind_run_config(store: Store, run_id: str, cfg: SpadeConfig) -> SpadeConfig:
    """Store ``cfg`` as the run's config, or check it against the stored one.

    Raises:
        RunConfigMismatch: the run was started with settings that would change its artifacts; names the keys.
    """
    stored = load_run_config(store, run_id)
    if stored is None:
        store.write_text(run_config_path(store, run_id), cfg.to_yaml())
        return cfg
    if artifact_hash(stored) != artifact_hash(cfg):
        changed = _changed_keys(bound_settings(stored), bound_settings(cfg))
        shown = ", ".join(f"{k}: {a!r} -> {b!r}" for k, a, b in changed[:4]) + (" ..." if len(changed) > 4 else "")
        raise RunConfigMismatch(
            f"run {run_id!r} was started with a different config ({shown}); use a new run id, "
            f"or `spade resume {run_id}` to continue with its stored config"
        )
    return cfg


def _changed_keys(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            out += _changed_keys(va, vb, f"{prefix}{key}.")
        elif va != vb:
            out.append((f"{prefix}{key}", va, vb))
    return out


# -- the summary of a generation ------------------------------------------------------------------------
def generation_summary(
    store: Store, run_id: str, gen: int, records: dict[str, StageRecord], wall: dict[str, float] | None = None
) -> dict[str, Any]:
    """Headline numbers of one generation from its stage records and small tables (no episode reads).

    ``records`` maps stage names to whole-stage records; ``wall`` the seconds each stage took in this
    flow run (cache hits take almost none).
    """
    validations = final_verdicts(store, run_id, gen)
    scores = store.read_table("env_scores", run_id, gen, stages=["score"])
    pool = records.get("pool")
    pool_ids = set(pool.info.get("env_ids", [])) if pool else set()
    played = scores[scores["env_id"].isin(pool_ids)].drop_duplicates("env_id")
    designed = scores[scores["design_id"].notna()]
    trains = [r.info.get("summary", {}) for name, r in records.items() if r.stage.startswith("train-s")]
    losses = [t["loss_mean"] for t in trains if t.get("loss_mean") is not None]
    notes = sorted({t["skipped_reason"] for t in trains if t.get("skipped_reason")})
    valid = int(validations["ok"].sum()) if not validations.empty else 0
    rollouts = [r for r in records.values() if r.stage.startswith("rollout-s")]
    return {
        "run_id": run_id,
        "gen": gen,
        "designs": len(validations),
        "valid": valid,
        "valid_rate": valid / len(validations) if len(validations) else None,
        "envs": len(pool_ids),
        "replayed": pool.info.get("replayed", 0) if pool else 0,
        "diversity": pool.info.get("diversity") if pool else None,
        "episodes": sum(r.info.get("rows", {}).get("episodes", 0) for r in rollouts),
        "win_rate": _mean(played["win_rate"]),
        "regret": _mean(played["regret"]),
        "designer_reward": _mean(designed["designer_reward"]),
        "train_loss": sum(losses) / len(losses) if losses else None,
        "train_steps": sum(int(t.get("steps") or 0) for t in trains),
        "checkpoint": trains[-1].get("checkpoint") if trains else None,
        "train_note": "; ".join(notes) or None,
        "evaluation": records["evaluate"].info if "evaluate" in records else None,
        "model_calls": sum(r.model_calls for r in records.values() if r.status == "ran"),
        "stages": [
            {
                "stage": name,
                "status": r.status,
                "seconds": round((wall or {}).get(name, r.seconds), 2),
                "model_calls": r.model_calls if r.status == "ran" else 0,
            }
            for name, r in records.items()
        ],
    }


def top_environments(store: Store, run_id: str, gen: int, env_ids: list[str], limit: int = 10) -> list[dict[str, Any]]:
    """The generation's played environments with the highest regret (one row per environment)."""
    scores = store.read_table("env_scores", run_id, gen, stages=["score"])
    scores = scores[scores["env_id"].isin(env_ids)].drop_duplicates("env_id")
    top = scores.sort_values(["regret", "env_id"], ascending=[False, True]).head(limit)
    columns = ["env_id", "skill", "win_rate", "regret", "designer_reward"]
    rows = top[columns].to_dict("records")
    for row in rows:
        row["replayed"] = row["env_id"] not in set(scores["env_id"][scores["design_id"].notna()])
    return rows


def summary_markdown(summary: dict[str, Any]) -> str:
    """The generation summary as Markdown (the flow's artifact and the CLI's closing text)."""

    def num(value: Any, digits: int = 3) -> str:
        return "n/a" if value is None else f"{value:.{digits}f}" if isinstance(value, float) else str(value)

    lines = [
        f"# SPADE run `{summary['run_id']}`, generation {summary['gen']}",
        "",
        "| metric | value |",
        "|---|---|",
        f"| designs (valid) | {summary['designs']} ({summary['valid']}, rate {num(summary['valid_rate'], 2)}) |",
        f"| environments played (replayed) | {summary['envs']} ({summary['replayed']}) |",
        f"| episodes | {summary['episodes']} |",
        f"| mean win rate | {num(summary['win_rate'])} |",
        f"| mean regret | {num(summary['regret'])} |",
        f"| mean designer reward | {num(summary['designer_reward'])} |",
        f"| pool diversity (Vendi) | {num(summary['diversity'], 2)} |",
        f"| train loss (steps) | {num(summary['train_loss'], 4)} ({num(summary['train_steps'])}) |",
        f"| model calls this run | {summary['model_calls']} |",
    ]
    if summary.get("train_note"):
        lines.append(f"| training | {summary['train_note']} |")
    if summary.get("evaluation"):
        lines.append(f"| evaluation | {summary['evaluation']} |")
    lines += ["", "| stage | status | wall s | model calls |", "|---|---|---|---|"]
    lines += [f"| {s['stage']} | {s['status']} | {s['seconds']:.2f} | {s['model_calls']} |" for s in summary["stages"]]
    return "\n".join(lines) + "\n"


def _mean(series: Any) -> float | None:
    return float(series.mean()) if len(series) else None
