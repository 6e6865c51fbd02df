"""Scoring (docs/DESIGN.md §7 step 7): win rate, regret and the designer reward of every environment.

Formulas (SPADE, arXiv 2608.19197, as summarised in docs/DESIGN.md §7 step 7; constants from
:class:`~spade_core.config.ScoringConfig`, paper defaults in brackets)::

    win_rate  = mean(return | no hint)                                   the agent's no-hint success
    regret    = mean(return | hint) - mean(return | no hint)             may be negative
    plateau(p) = 1                                  if low <= p <= high           [low 0.4, high 0.6]
               = max(0, 1 - distance(p, [low, high]) / falloff)   otherwise       [falloff 0.25]
    blend        = w * clip(regret / scale, 0, 1) + (1 - w) * plateau(win_rate)   [w 0.4, scale 0.15]
    regret       = max(0, regret)
    solve_rate   = plateau(win_rate)
    learnability = 1 - p  if 0 < p < 1  else 0,  p = win_rate
    invalid design -> invalid_reward [0]

``learnability`` is the proposer reward of Absolute Zero (Zhao et al. 2025, arXiv 2505.03335):
``r_propose = 0 if r_solve in {0, 1} else 1 - r_solve``, with ``r_solve`` the solver's mean success over
its rollouts; tasks that are never or always solved give no signal, harder solvable tasks give more. It is
not the SFL / "No Regrets" learnability ``p * (1 - p)`` (Rutherford et al. 2024).

Episode returns come from the rollout engine (docs/DESIGN.md §5: the last reward if the episode terminated,
else 0). Choices where the summary is silent:

- An episode with an ``error_type`` counts as return 0 even if the frame says otherwise (the engine
  already sets it so); a bad rollout lowers the win rate, it does not vanish from the mean.
- An environment with no hinted plays (``rollout.plays_hint = 0``) has no defined regret: regret and
  ``r_hint`` are 0 there, so only the plateau term of ``blend`` can reward it.
- A valid environment with no no-hint plays has no win rate: that is an error, never a silent 0.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pandas as pd

from spade_core.config import ScoringConfig
from spade_core.schemas import SCHEMAS

CONDITIONS = ("no_hint", "hint")
ENV_SCORE_COLUMNS: tuple[str, ...] = tuple(SCHEMAS["env_scores"].names)


class ScoringError(ValueError):
    """Episodes and environments that cannot be scored; the message names the env_id or column."""


def win_rate(no_hint_returns: Sequence[float]) -> float:
    """Mean no-hint return (docs/DESIGN.md §7 step 7).

    >>> win_rate([1.0, 0.0, 1.0, 0.0])
    0.5
    """
    if len(no_hint_returns) == 0:
        raise ScoringError("win rate of no no-hint plays is undefined")
    return float(np.mean(no_hint_returns))


def regret(hint_returns: Sequence[float], no_hint_returns: Sequence[float]) -> float:
    """mean(return | hint) - mean(return | no hint) (docs/DESIGN.md §1); 0 when there are no hinted plays.

    >>> regret([1.0, 1.0, 1.0, 0.0], [1.0, 0.0, 0.0, 0.0])
    0.5
    >>> regret([0.0, 0.0], [1.0, 0.0])
    -0.5
    >>> regret([], [1.0, 0.0])
    0.0
    """
    if len(hint_returns) == 0:
        return 0.0  # undefined without hinted plays; see the module docstring
    return float(np.mean(hint_returns)) - win_rate(no_hint_returns)


def plateau(p: float, low: float = 0.4, high: float = 0.6, falloff: float = 0.25) -> float:
    """1 inside [low, high], falling linearly to 0 over ``falloff`` outside (docs/DESIGN.md §7 step 7).

    >>> plateau(0.5), plateau(0.6), plateau(0.85), plateau(1.0)
    (1.0, 1.0, 0.0, 0.0)
    >>> round(plateau(0.3), 6)
    0.6
    """
    if low > high or falloff <= 0:
        raise ValueError(f"plateau needs low <= high and falloff > 0, got low={low}, high={high}, falloff={falloff}")
    distance = max(low - p, 0.0, p - high)
    return max(0.0, 1.0 - distance / falloff)


def _plateau(p: float, cfg: ScoringConfig) -> float:
    return plateau(p, cfg.plateau_low, cfg.plateau_high, cfg.plateau_falloff)


def blend_reward(win_rate: float, regret: float, cfg: ScoringConfig) -> float:
    """w * clip(regret / scale, 0, 1) + (1 - w) * plateau(win_rate) (docs/DESIGN.md §7 step 7, default).

    >>> round(blend_reward(0.5, 0.075, ScoringConfig()), 6)
    0.8
    """
    regret_term = float(np.clip(regret / cfg.regret_scale, 0.0, 1.0))
    return cfg.regret_weight * regret_term + (1.0 - cfg.regret_weight) * _plateau(win_rate, cfg)


def regret_reward(win_rate: float, regret: float, cfg: ScoringConfig) -> float:
    """Pure regret variant: max(0, regret) (docs/DESIGN.md §7 step 7).

    >>> regret_reward(0.5, -0.25, ScoringConfig()), regret_reward(0.5, 0.25, ScoringConfig())
    (0.0, 0.25)
    """
    return max(0.0, regret)


def solve_rate_reward(win_rate: float, regret: float, cfg: ScoringConfig) -> float:
    """Solve-rate variant: plateau(win_rate) only (docs/DESIGN.md §7 step 7).

    >>> solve_rate_reward(0.45, 0.3, ScoringConfig())
    1.0
    """
    return _plateau(win_rate, cfg)


def learnability_reward(win_rate: float, regret: float, cfg: ScoringConfig) -> float:
    """Absolute Zero proposer reward: 1 - p if 0 < p < 1 else 0, p = win rate (arXiv 2505.03335).

    >>> learnability_reward(0.25, 0.0, ScoringConfig()), learnability_reward(1.0, 0.0, ScoringConfig())
    (0.75, 0.0)
    """
    return 1.0 - win_rate if 0.0 < win_rate < 1.0 else 0.0


# The one explicit registry of designer reward variants; keys are ScoringConfig.designer_reward's choices.
DESIGNER_REWARDS: dict[str, Callable[[float, float, ScoringConfig], float]] = {
    "blend": blend_reward,
    "regret": regret_reward,
    "solve_rate": solve_rate_reward,
    "learnability": learnability_reward,
}


def designer_reward(win_rate: float, regret: float, cfg: ScoringConfig, valid: bool = True) -> float:
    """The configured variant's reward, or ``cfg.invalid_reward`` for an invalid design.

    >>> designer_reward(0.0, 0.0, ScoringConfig(), valid=False)
    0.0
    >>> designer_reward(0.2, 0.3, ScoringConfig(designer_reward="learnability"))
    0.8
    """
    if not valid:
        return cfg.invalid_reward
    return DESIGNER_REWARDS[cfg.designer_reward](win_rate, regret, cfg)


def _returns_by_env(episodes: pd.DataFrame) -> dict[tuple[str, str], list[float]]:
    missing = [c for c in ("env_id", "condition", "episode_return", "error_type") if c not in episodes.columns]
    if missing:
        raise ScoringError(f"episodes frame lacks column(s) {missing}")
    bad = sorted(set(episodes["condition"]) - set(CONDITIONS))
    if bad:
        raise ScoringError(f"episodes have unknown condition(s) {bad}; allowed: {list(CONDITIONS)}")
    returns = episodes["episode_return"].astype(float).where(episodes["error_type"].isna(), 0.0)
    if not np.isfinite(returns).all():
        env_id = episodes.loc[~np.isfinite(returns), "env_id"].iloc[0]
        raise ScoringError(f"episodes of env {env_id!r} have a non-finite episode_return")
    grouped = returns.groupby([episodes["env_id"], episodes["condition"]], sort=False)
    return {key: list(values) for key, values in grouped}


def score_environments(episodes: pd.DataFrame, envs: pd.DataFrame, cfg: ScoringConfig) -> pd.DataFrame:
    """One env_scores row per row of ``envs`` (docs/DESIGN.md §7 step 7), in the order of ``envs``.

    Args:
        episodes: one row per episode: ``env_id``, ``condition`` ("no_hint" | "hint"), ``episode_return``,
            ``error_type`` (None when the episode ran cleanly; otherwise its return counts as 0).
        envs: ``env_id``, ``design_id`` (None for replayed or seed envs), ``skill``, ``valid``. Two designs
            with identical code share one env_id and so its scores, each on its own row.
        cfg: the scoring constants and the designer reward variant.

    Returns:
        Exactly the env_scores columns. ``r_no_hint`` equals ``win_rate``; invalid designs score 0.0
        everywhere except ``designer_reward = cfg.invalid_reward``.

    Raises:
        ScoringError: a missing column, an unknown condition, a non-finite return, an episode of an env
            not in ``envs``, or a valid env without no-hint plays.
    """
    missing = [c for c in ("env_id", "design_id", "skill", "valid") if c not in envs.columns]
    if missing:
        raise ScoringError(f"envs frame lacks column(s) {missing}")
    returns = _returns_by_env(episodes)
    unknown = sorted({env_id for env_id, _ in returns} - set(envs["env_id"]))
    if unknown:
        raise ScoringError(f"episodes reference env(s) not in the envs frame: {unknown[:5]}")
    rows = []
    for env in envs.itertuples(index=False):
        row = {"env_id": env.env_id, "design_id": env.design_id, "skill": env.skill}
        if not bool(env.valid):
            rows.append(row | dict.fromkeys(("win_rate", "r_hint", "r_no_hint", "regret"), 0.0))
            rows[-1]["designer_reward"] = designer_reward(0.0, 0.0, cfg, valid=False)
            continue
        no_hint, hint = returns.get((env.env_id, "no_hint"), []), returns.get((env.env_id, "hint"), [])
        if not no_hint:
            raise ScoringError(f"valid env {env.env_id!r} has no no_hint episodes, so no win rate")
        p = win_rate(no_hint)
        r = regret(hint, no_hint)
        r_hint = float(np.mean(hint)) if hint else 0.0
        rows.append(row | {"win_rate": p, "r_hint": r_hint, "r_no_hint": p, "regret": r})
        rows[-1]["designer_reward"] = designer_reward(p, r, cfg)
    frame = pd.DataFrame(rows, columns=list(ENV_SCORE_COLUMNS))
    return frame.astype({c: "float64" for c in ENV_SCORE_COLUMNS[3:]})


def _mean(values: pd.Series) -> float:
    return float(values.mean()) if len(values) else float("nan")


def summary_metrics(scores: pd.DataFrame, valid: Sequence[bool] | pd.Series) -> dict[str, float]:
    """Namespaced metrics of one generation's scores; NaN where a metric has no rows to average.

    ``valid`` is aligned row by row with ``scores`` (pass ``envs["valid"]`` from :func:`score_environments`'s
    input). Designer metrics cover rows with a ``design_id`` (replayed envs are not designs); agent metrics
    cover every valid row.

    >>> s = pd.DataFrame({"design_id": ["a", "b"], "win_rate": [0.5, 0.0], "r_hint": [0.75, 0.0],
    ...                   "regret": [0.25, 0.0], "designer_reward": [1.0, 0.0]})
    >>> m = summary_metrics(s, [True, False])
    >>> m["designer/reward_mean"], m["envs/valid_fraction"], m["agent/win_rate_mean"]
    (0.5, 0.5, 0.5)
    """
    is_valid = np.asarray(valid, dtype=bool)
    if len(is_valid) != len(scores):
        raise ScoringError(f"valid has {len(is_valid)} values for {len(scores)} score rows")
    designed = scores["design_id"].notna().to_numpy()
    design_rows, valid_rows = scores[designed], scores[is_valid]
    valid_designs = scores[designed & is_valid]
    return {
        "envs/count": float(len(scores)),
        "envs/designs": float(designed.sum()),
        "envs/valid_fraction": _mean(pd.Series(is_valid[designed], dtype=float)),
        "designer/reward_mean": _mean(design_rows["designer_reward"]),
        "designer/reward_std": float(design_rows["designer_reward"].std(ddof=0)) if len(design_rows) else np.nan,
        "designer/regret_mean": _mean(valid_designs["regret"]),
        "designer/regret_max": float(valid_designs["regret"].max()) if len(valid_designs) else np.nan,
        "designer/positive_regret_fraction": _mean((valid_designs["regret"] > 0).astype(float)),
        "agent/win_rate_mean": _mean(valid_rows["win_rate"]),
        "agent/hint_return_mean": _mean(valid_rows["r_hint"]),
        "agent/solved_fraction": _mean((valid_rows["win_rate"] >= 1.0).astype(float)),
        "agent/unsolved_fraction": _mean((valid_rows["win_rate"] <= 0.0).astype(float)),
    }
