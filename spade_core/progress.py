"""Which stages of which generations are complete, read from the store alone (DESIGN.md §4, §10, §12).

Every stage (or shard of a stage) that finishes writes a small JSON marker LAST, after its tables:

    {root}/runs/{run_id}/config.yaml                             the run's resolved config
    {root}/runs/{run_id}/gen={g}/stages/{stage}-{shard}.json     one shard of a sharded stage
    {root}/runs/{run_id}/gen={g}/stages/{stage}.json             the whole stage

A marker records what the stage wrote (files, row counts, a content digest), the digests of the upstream
artifacts it read, the run's artifact hash, its wall time and its model calls. A stage is complete when its
marker exists; it is reused, not run again, when the marker's upstream digests match the current ones.
This works without Prefect (whose result cache is a second, faster layer keyed on the same inputs), so
``spade status`` and ``spade resume`` need nothing but the store.

A run id is bound to its config: the first generation writes ``config.yaml``; a later one with a config
that would change what is written (anything but the store location and the execution-only settings
``orchestration.task_runner``, ``dask_address``, ``retries``) is refused with a message naming the keys.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from spade_core.config import SpadeConfig, load_config
from spade_core.store import Store

# In pipeline order. "pool" plans the environments of the generation (no table: its marker lists them).
STAGES: tuple[str, ...] = (
    "documents",
    "design",
    "validate",
    "pool",
    "hint",
    "rollout",
    "score",
    "memory",
    "train",
    "evaluate",
)
DESIGNER_STAGES = ("documents", "design", "validate")
# Settings that change how a run executes, not what it writes: free to change between generations.
EXECUTION_ONLY = ("task_runner", "dask_address", "retries", "retry_delay_s")


class RunConfigMismatch(ValueError):
    """A run id reused with a config that would change its artifacts; the message names the keys."""


class StageRecord(BaseModel):
    """What one execution of a stage (or shard) wrote; the marker's content and the Prefect task result."""

    stage: str
    shard: int | None = None  # None: the whole stage
    run_id: str
    gen: int
    artifact_hash: str
    digest: str
    inputs: dict[str, str] = Field(default_factory=dict)
    files: dict[str, list[str]] = Field(default_factory=dict)
    rows: dict[str, int] = Field(default_factory=dict)
    seconds: float = 0.0
    model_calls: int = 0
    model_requests: int = 0
    info: dict[str, Any] = Field(default_factory=dict)
    finished_at: str = ""
    # How this execution got the record: ran it, reused the store's marker, or a Prefect cache hit.
    status: Literal["ran", "reused", "cached"] = "ran"

    @property
    def name(self) -> str:
        return self.stage if self.shard is None else f"{self.stage}-{self.shard}"


def digests(*records: StageRecord) -> dict[str, str]:
    """The upstream-artifact part of a cache key: ``{stage[-shard]: digest}``."""
    return {r.name: r.digest for r in records}


def combined_digest(parts: Any) -> str:
    """A stable 16-hex digest of any JSON-able value (sorted keys)."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def artifact_hash(cfg: SpadeConfig) -> str:
    """Hash of the settings that decide what a run writes (no store location, no execution-only settings)."""
    return combined_digest(_bound_settings(cfg))


def _bound_settings(cfg: SpadeConfig) -> dict[str, Any]:
    data = cfg.model_dump(mode="json")
    data.pop("store", None)
    for key in EXECUTION_ONLY:
        data.get("orchestration", {}).pop(key, None)
    return data


# -- markers -------------------------------------------------------------------------------------------
def stages_dir(store: Store, run_id: str, gen: int) -> str:
    return f"{store.run_dir(run_id)}/gen={gen}/stages"


def marker_path(store: Store, run_id: str, gen: int, stage: str, shard: int | None = None) -> str:
    name = stage if shard is None else f"{stage}-{shard}"
    return f"{stages_dir(store, run_id, gen)}/{name}.json"


def write_marker(store: Store, record: StageRecord) -> str:
    """Write the record as its stage's completion marker (atomically; the stage's files come first)."""
    path = marker_path(store, record.run_id, record.gen, record.stage, record.shard)
    stored = record.model_copy(update={"status": "ran"})
    store.write_text(path, stored.model_dump_json(indent=1))
    return path


def read_marker(store: Store, run_id: str, gen: int, stage: str, shard: int | None = None) -> StageRecord | None:
    path = marker_path(store, run_id, gen, stage, shard)
    try:
        return StageRecord.model_validate_json(store.read_bytes(path))
    except FileNotFoundError:
        return None


def list_markers(store: Store, run_id: str) -> dict[int, dict[str, StageRecord]]:
    """Every marker of a run: ``{gen: {stage[-shard]: record}}``."""
    out: dict[int, dict[str, StageRecord]] = {}
    for path in store.fs.glob(f"{store.run_dir(run_id)}/gen=*/stages/*.json"):
        record = StageRecord.model_validate_json(store.fs.cat_file(path))
        out.setdefault(record.gen, {})[record.name] = record
    return out


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


# -- what a generation needs ---------------------------------------------------------------------------
def evaluation_due(cfg: SpadeConfig, gen: int) -> bool:
    """Whether generation ``gen`` ends with an evaluation (``evaluation.every``; 0 = never)."""
    every = cfg.evaluation.every
    return every > 0 and gen % every == 0


def stages_for(cfg: SpadeConfig, gen: int) -> list[str]:
    """The stages generation ``gen`` runs: no designer stages for a fixed pool, evaluation when due."""
    names = [s for s in STAGES if not (cfg.designer.fixed_pool and s in DESIGNER_STAGES)]
    return [s for s in names if s != "evaluate" or evaluation_due(cfg, gen)]


def generation_stages(store: Store, cfg: SpadeConfig, run_id: str, gen: int) -> dict[str, str]:
    """``{stage: 'done' | 'k/n shards' | 'partial' | 'todo'}`` for one generation."""
    markers = list_markers(store, run_id).get(gen, {})
    return _stage_states(cfg, gen, markers)


def _stage_states(cfg: SpadeConfig, gen: int, markers: dict[str, StageRecord]) -> dict[str, str]:
    states = {}
    for stage in stages_for(cfg, gen):
        if stage in markers:
            states[stage] = "done"
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
    return {g: _stage_states(cfg, g, markers[g]) for g in sorted(markers)}


def next_generation(store: Store, cfg: SpadeConfig, run_id: str) -> int:
    """The first generation (from 1) that is not complete: where a new or resumed flow run starts."""
    markers = list_markers(store, run_id)
    gen = 1
    while gen in markers and all(s == "done" for s in _stage_states(cfg, gen, markers[gen]).values()):
        gen += 1
    return gen


# -- the run's config ----------------------------------------------------------------------------------
def run_config_path(store: Store, run_id: str) -> str:
    return f"{store.run_dir(run_id)}/config.yaml"


def load_run_config(store: Store, run_id: str, overrides: list[str] | tuple[str, ...] = ()) -> SpadeConfig | None:
    """The run's stored config (with ``overrides`` on top), or None for a run the store has not seen."""
    path = run_config_path(store, run_id)
    if not store.exists(path):
        return None
    with tempfile.TemporaryDirectory(prefix="spade-run-config-") as tmp:
        local = Path(tmp) / "config.yaml"
        local.write_bytes(store.read_bytes(path))
        return load_config(None, local, overrides)


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
        changed = _changed_keys(_bound_settings(stored), _bound_settings(cfg))
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
    designs = store.read_table("designs", run_id, gen)
    validations = store.read_table("validations", run_id, gen)
    scores = store.read_table("env_scores", run_id, gen)
    pool = records.get("pool")
    pool_ids = set(pool.info.get("env_ids", [])) if pool else set()
    played = scores[scores["env_id"].isin(pool_ids)].drop_duplicates("env_id")
    designed = scores[scores["design_id"].notna()]
    train = records.get("train")
    train_summary = train.info.get("summary", {}) if train else {}
    valid = int(validations["ok"].sum()) if not validations.empty else 0
    return {
        "run_id": run_id,
        "gen": gen,
        "designs": len(designs),
        "valid": valid,
        "valid_rate": valid / len(designs) if len(designs) else None,
        "envs": len(pool_ids),
        "replayed": pool.info.get("replayed", 0) if pool else 0,
        "diversity": pool.info.get("diversity") if pool else None,
        "episodes": records["rollout"].info.get("rows", {}).get("episodes", 0) if "rollout" in records else 0,
        "win_rate": _mean(played["win_rate"]),
        "regret": _mean(played["regret"]),
        "designer_reward": _mean(designed["designer_reward"]),
        "train_loss": train_summary.get("loss_mean"),
        "train_steps": train_summary.get("steps"),
        "checkpoint": train_summary.get("checkpoint"),
        "train_note": train_summary.get("skipped_reason"),
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
    scores = store.read_table("env_scores", run_id, gen)
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
