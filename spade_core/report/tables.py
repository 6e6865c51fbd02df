"""The report's tables as pure frame functions (docs/DESIGN.md §7): the designer's reward per generation, the
eval comparison against the base model and the baseline run, the learning curve's per-step table, and the
pool sources in the order the report shows them. :mod:`spade_core.report.data` reads the frames they take.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

DESIGNER_REWARD_COLUMNS = [
    "gen",
    "designs",
    "raw_mean",
    "raw_std",
    "raw_se",
    "raw_min",
    "raw_max",
    "trained",
    "trained_mean",
    "trained_std",
    "train_step",
]


def designer_reward_table(rows: pd.DataFrame, generations: list[int], rewarded: set[int]) -> pd.DataFrame:
    """One row per generation (:data:`DESIGNER_REWARD_COLUMNS`): the run's ``designer_rewards`` aggregates
    (``rows``, from the reward-stage query), every generation of ``generations`` and ``rewarded`` (those whose
    reward stage has a marker) included. A generation whose reward stage ran without a row counts 0 designs;
    one whose reward stage has not run has no value (NaN, never 0). Empty when the run rewarded nothing yet
    (a fixed-pool run, or before its first reward stage).

    >>> rows = pd.DataFrame({"gen": [1], "designs": [3], "raw_mean": [0.5], "trained": [2]})
    >>> table = designer_reward_table(rows, [1, 2, 3], {1, 2})
    >>> table[["gen", "designs", "raw_mean", "trained"]].to_dict("list")  # doctest: +NORMALIZE_WHITESPACE
    {'gen': [1, 2, 3], 'designs': [3.0, 0.0, nan], 'raw_mean': [0.5, nan, nan], 'trained': [2.0, 0.0, nan]}
    >>> designer_reward_table(rows.iloc[0:0], [1, 2], set()).empty
    True
    """
    rows = rows.reindex(columns=DESIGNER_REWARD_COLUMNS)
    if rows.empty and not rewarded:
        return pd.DataFrame(columns=DESIGNER_REWARD_COLUMNS)
    rows["raw_se"] = rows["raw_std"] / rows["designs"].astype(float) ** 0.5  # NaN for a single design
    gens = sorted({int(g) for g in rows["gen"]} | set(generations) | set(rewarded))
    table = pd.DataFrame({"gen": gens}).merge(rows.astype({"gen": int}), on="gen", how="left")
    empty = table["gen"].isin(sorted(rewarded)) & table["designs"].isna()
    table.loc[empty, ["designs", "trained"]] = 0
    return table.astype({c: float for c in DESIGNER_REWARD_COLUMNS} | {"gen": int})


def eval_comparison(
    evals: pd.DataFrame, run_id: str, baseline_id: str | None, *, steps: tuple[int, int] = (1, 1)
) -> pd.DataFrame:
    """One row per suite and training step: the run's mean score and pass@1, and the deltas against the base
    model (generation 0) and against the baseline run at the same training step.

    ``steps`` = (K of the run, K of the baseline): generation g's checkpoint is training step g·K, so a SPADE
    run (K = 4 in the paper's games preset) and a fixed-RLVE run (K = 1) are compared after the same number of
    optimizer steps. A step the baseline evaluated that is no generation's end in the run has gen None.

    >>> e = pd.DataFrame({"run_id": ["r", "r", "b"], "gen": [0, 1, 1], "suite": ["s"] * 3, "items": [2] * 3,
    ...                   "mean_score": [0.5, 0.75, 0.625], "pass_at_1": [0.5, 0.5, float("nan")]})
    >>> row = eval_comparison(e, "r", "b").iloc[1]
    >>> float(row.vs_base), float(row.baseline_score), float(row.vs_baseline)
    (0.25, 0.625, 0.125)
    >>> e.loc[2, "gen"] = 4  # the baseline's generation 4 of K = 1 is the run's generation 1 of K = 4
    >>> row = eval_comparison(e, "r", "b", steps=(4, 1)).iloc[1]
    >>> int(row.step), int(row.gen), float(row.baseline_score)
    (4, 1, 0.625)
    """
    columns = ["suite", "gen", "items", "mean_score", "pass_at_1", "vs_base", "baseline_score", "vs_baseline", "step"]
    if evals.empty:
        return pd.DataFrame(columns=columns)
    run_k, baseline_k = steps
    rows = []
    for suite, data in evals.groupby("suite", sort=True):
        ours = data[data["run_id"] == run_id].set_index("gen")
        other = data[data["run_id"] == baseline_id].set_index("gen") if baseline_id else data.iloc[0:0]
        base = ours.loc[0, "mean_score"] if 0 in ours.index else other["mean_score"].get(0, float("nan"))
        ours_at = {int(g) * run_k: g for g in ours.index}
        other_at = {int(g) * baseline_k: g for g in other.index}
        for step in sorted(set(ours_at) | set(other_at)):
            # step 0 is the shared base model: the baseline's row stands in when the run has none
            source = ours if step in ours_at else other if step == 0 else None
            row = source.loc[ours_at.get(step, 0)] if source is not None else None
            score = float(row["mean_score"]) if row is not None else float("nan")
            theirs = float(other.loc[other_at[step], "mean_score"]) if step in other_at and step > 0 else float("nan")
            rows.append(
                {
                    "suite": suite,
                    "gen": int(ours_at[step]) if step in ours_at else (step // run_k if step % run_k == 0 else None),
                    "items": int(row["items"]) if row is not None else 0,
                    "mean_score": score,
                    "pass_at_1": float(row["pass_at_1"]) if row is not None else float("nan"),
                    "vs_base": score - float(base) if step > 0 else float("nan"),
                    "baseline_score": theirs,
                    "vs_baseline": score - theirs,
                    "step": step,
                }
            )
    return pd.DataFrame(rows, columns=columns)


SOURCES = ("design", "replay", "starter", "fixed")  # pool sources, in the order the report shows them


def ordered_sources(values: object) -> list[str]:
    """The distinct pool sources among ``values``: the known ones in :data:`SOURCES` order, then the rest.

    >>> ordered_sources(["unknown", "replay", "design", "replay"])
    ['design', 'replay', 'unknown']
    """
    present = {str(v) for v in pd.Series(values).dropna()}
    return [s for s in SOURCES if s in present] + sorted(present - set(SOURCES))


def steps_per_generation(config: dict[str, Any], curve: pd.DataFrame) -> int | None:
    """K: ``training.steps_per_generation`` of the stored config, else inferred from the learning curve.

    Without a config, generation g ≥ 2 starts at step (g−1)·K, so its first step gives K; with only one
    generation, K is at least the number of steps it played.

    >>> steps_per_generation({"training": {"steps_per_generation": 4}}, pd.DataFrame())
    4
    >>> curve = pd.DataFrame({"level": "overall", "step": [0, 1, 3, 4], "gen": [1, 1, 2, 2]})
    >>> steps_per_generation({}, curve)  # generation 2 starts at step 3, though generation 1 shows only 2 steps
    3
    >>> steps_per_generation({}, curve[curve["gen"] == 1])
    2
    >>> steps_per_generation({}, pd.DataFrame()) is None
    True
    """
    training = config.get("training")
    value = training.get("steps_per_generation") if isinstance(training, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1:
        return value
    if curve.empty:
        return None
    overall = curve[curve["level"] == "overall"]
    first = overall.groupby("gen")["step"].min()
    inferred = {int(s) // (int(g) - 1) for g, s in first.items() if int(g) >= 2 and int(s) % (int(g) - 1) == 0}
    if len(inferred) == 1 and min(inferred) >= 1:
        return min(inferred)
    counts = overall.groupby("gen")["step"].nunique()
    return int(counts.max()) if not counts.empty else None


def learning_curve_table(curve: pd.DataFrame) -> pd.DataFrame:
    """One row per global step: generation, no-hint plays, the overall win rate, and the win rate per pool
    source (a column per source present, :func:`ordered_sources` order; missing where a step had none).

    >>> curve = pd.DataFrame({"step": [0, 0, 0, 1, 1], "gen": [1] * 5,
    ...                       "level": ["overall", "source", "source", "overall", "source"],
    ...                       "skill": [None] * 5, "source": [None, "design", "replay", None, "replay"],
    ...                       "plays": [6, 4, 2, 2, 2], "errors": [0] * 5, "win_rate": [0.5, 0.25, 1.0, 0.5, 0.5]})
    >>> learning_curve_table(curve).to_dict("records")  # doctest: +NORMALIZE_WHITESPACE
    [{'step': 0, 'gen': 1, 'plays': 6, 'errors': 0, 'win_rate': 0.5, 'design': 0.25, 'replay': 1.0},
     {'step': 1, 'gen': 1, 'plays': 2, 'errors': 0, 'win_rate': 0.5, 'design': nan, 'replay': 0.5}]
    """
    base = ["step", "gen", "plays", "errors", "win_rate"]
    if curve.empty:
        return pd.DataFrame(columns=base)
    overall = curve[curve["level"] == "overall"][base].sort_values("step").reset_index(drop=True)
    by_source = curve[curve["level"] == "source"]
    wide = by_source.pivot(index="step", columns="source", values="win_rate")
    sources = ordered_sources(by_source["source"])
    table = overall.merge(wide.reindex(columns=sources).reset_index(), on="step", how="left")
    table.columns = [str(c) for c in table.columns]
    return table.astype({"step": int, "gen": int, "plays": int, "errors": int})
