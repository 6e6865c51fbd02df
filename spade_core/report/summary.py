"""The summary of one generation: headline numbers from its stage records and small tables (no episode
reads), the top environments by regret, and their Markdown (the flow's artifact and the CLI's closing text).

The designer reward shown is the one the designer is trained on: the reward stage's ``designer_rewards``
rows (over the generation's whole window), as ``raw`` (the variant's value, e.g. the blend) and ``reward``
(centred per skill and scaled: the advantage; its mean over the kept designs is 0 by construction, so its
spread is given too). A generation whose reward stage has not run, or a fixed-pool run, shows n/a.
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from spade_core.pipeline.status import engine_faults
from spade_core.report.data import read_config
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord, read_listed
from spade_core.store.verdicts import final_verdicts


def variant_of(config: dict[str, Any]) -> str | None:
    """``scoring.designer_reward`` of a stored config dict (None without one).

    >>> variant_of({"scoring": {"designer_reward": "regret"}}), variant_of({})
    ('regret', None)
    """
    scoring = config.get("scoring")
    value = scoring.get("designer_reward") if isinstance(scoring, dict) else None
    return str(value) if value else None


def raw_label(variant: str | None) -> str:
    """The name of ``designer_rewards.raw`` under a variant: "raw blend" for the paper's, else "raw".

    >>> raw_label("blend"), raw_label("learning_potential"), raw_label(None)
    ('raw blend', 'raw', 'raw')
    """
    return "raw blend" if variant == "blend" else "raw"


def _rewards(store: Store, run_id: str, gen: int) -> pd.DataFrame:
    """The generation's designer_rewards rows (the reward stage's file; none before it ran)."""
    return read_listed(store, run_id, gen, ["reward"], "designer_rewards")


def generation_summary(
    store: Store, run_id: str, gen: int, records: dict[str, StageRecord], wall: dict[str, float] | None = None
) -> dict[str, Any]:
    """Headline numbers of one generation from its stage records and small tables (no episode reads).

    ``records`` maps stage names to whole-stage records; ``wall`` the seconds each stage took in this
    flow run (cache hits take almost none).
    """
    validations = final_verdicts(store, run_id, gen)
    scores = read_listed(store, run_id, gen, ["score"], "env_scores")
    pool = records.get("pool")
    pool_ids = set(pool.info.get("env_ids", [])) if pool else set()
    played = scores[scores["env_id"].isin(pool_ids)].drop_duplicates("env_id")
    rewards = _rewards(store, run_id, gen)
    rewarded = "reward" in records or not rewards.empty  # else: not run yet, or a fixed pool (never runs)
    kept = rewards.loc[~rewards["dropped"].astype(bool), "reward"]
    measured = rewards[rewards["window_win_rate"].notna()]  # not a parent copy rewarded unplayed
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
        # plays whose model call failed after rollout.model_retries: kept as rows, left out of scoring and training
        "model_errors": sum(int(r.info.get("model_errors", 0)) for r in rollouts),
        "model_retries": sum(int(r.info.get("model_retries", 0)) for r in rollouts),
        # the engine replaced while stages used it (a replica died or hung): the cause of each replacement
        "engine_faults": engine_faults(r for r in records.values() if r.status == "ran"),
        # stages that failed and were run again by the flow (a killed trainer, a lost connection)
        "stage_retries": sum(int(r.info.get("retries", 0)) for r in records.values() if r.status == "ran"),
        "win_rate": _mean(played["win_rate"]),
        "regret": _mean(played["regret"]),
        "designer_variant": variant_of(read_config(store, run_id)[1]),
        "designer_rewarded": len(measured) if rewarded else None,
        "designer_raw": _mean(measured["raw"]),
        "designer_trained": len(kept) if rewarded else None,
        "designer_reward": _mean(kept),
        "designer_reward_std": float(kept.std()) if len(kept) > 1 else None,
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
    """The generation's played environments with the highest regret (one row per environment), with the
    designer reward of their design (``designer_raw``, ``designer_reward``; None for a replayed environment,
    a dropped design's reward, or before the reward stage ran)."""
    scores = read_listed(store, run_id, gen, ["score"], "env_scores")
    scores = scores[scores["env_id"].isin(env_ids)].drop_duplicates("env_id")
    top = scores.sort_values(["regret", "env_id"], ascending=[False, True]).head(limit)
    rewards = _rewards(store, run_id, gen).drop_duplicates("design_id")
    rewards = rewards[["design_id", "raw", "reward"]].rename(
        columns={"raw": "designer_raw", "reward": "designer_reward"}
    )
    top = top.merge(rewards, on="design_id", how="left")
    columns = ["env_id", "skill", "win_rate", "regret", "designer_raw", "designer_reward"]
    rows = [{k: _value(v) for k, v in row.items()} for row in top[columns].to_dict("records")]
    for row in rows:
        row["replayed"] = row["env_id"] not in set(scores["env_id"][scores["design_id"].notna()])
    return rows


def summary_markdown(summary: dict[str, Any]) -> str:
    """The generation summary as Markdown (the flow's artifact and the CLI's closing text)."""

    def num(value: Any, digits: int = 3) -> str:
        if isinstance(value, float):
            return f"{round(value, digits) + 0.0:.{digits}f}"  # + 0.0: a mean that rounds to 0 is not "-0.000"
        return "n/a" if value is None else str(value)

    trained = raw = "n/a (no reward stage)"
    if summary.get("designer_rewarded") is not None:
        std = summary.get("designer_reward_std")
        spread = f" ± {num(std)}" if std is not None else ""
        trained = f"{num(summary['designer_reward'])}{spread} ({summary['designer_trained']})"
        raw = f"{num(summary['designer_raw'])} ({summary['designer_rewarded']})"
    lines = [
        f"# SPADE run `{summary['run_id']}`, generation {summary['gen']}",
        "",
        "| metric | value |",
        "|---|---|",
        f"| designs (valid) | {summary['designs']} ({summary['valid']}, rate {num(summary['valid_rate'], 2)}) |",
        f"| environments played (replayed) | {summary['envs']} ({summary['replayed']}) |",
        f"| episodes | {summary['episodes']} |",
        f"| plays failed in the model call, left out (retried) | {summary.get('model_errors', 0)} "
        f"({summary.get('model_retries', 0)}) |",
        f"| engine replaced after a fault (first cause) | {_faults(summary.get('engine_faults') or [])} |",
        f"| stages run again after a failure | {summary.get('stage_retries', 0)} |",
        f"| mean win rate | {num(summary['win_rate'])} |",
        f"| mean regret | {num(summary['regret'])} |",
        f"| designer reward (trained): mean ± std (designs kept) | {trained} |",
        f"| {raw_label(summary.get('designer_variant'))}: mean (designs rewarded) | {raw} |",
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


def _value(value: Any) -> Any:
    """A cell as JSON takes it: a missing float (NaN) is None."""
    return None if isinstance(value, float) and math.isnan(value) else value


def _faults(causes: list[str]) -> str:
    """``0``, or the count and the first cause (table cell text: no pipes).

    >>> _faults([]), _faults(["the server died (exit code 0): EngineDeadError | x", "hung"])
    ('0', '2 (the server died (exit code 0): EngineDeadError / x)')
    """
    return f"{len(causes)} ({causes[0][:160].replace('|', '/')})" if causes else "0"
