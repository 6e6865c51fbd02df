"""Scoring (docs/DESIGN.md §7 step 7): the win rate and regret of every environment after step 0's plays
(``env_scores``: :func:`scored_envs` chooses the rows, :func:`score_environments` scores them), and the designer
reward variants' formulas, which the reward stage applies over the whole window
(:mod:`spade_core.method.designer_reward`, ``designer_rewards``: the reward the designer is trained on).

Formulas (SPADE, arXiv 2608.19197, as summarised in docs/DESIGN.md §7 step 7; constants from
:class:`~spade_core.config.ScoringConfig`, paper defaults in brackets)::

    win_rate  = mean(return | no hint)                                   the agent's no-hint success
    regret    = mean(return | hint) - mean(return | no hint)             may be negative
    plateau(p) = 1                                  if low <= p <= high           [low 0.4, high 0.6]
               = max(0, 1 - distance(p, [low, high]) / falloff)   otherwise       [falloff 0.25]
    blend        = w_r * clip(regret / scale, 0, 1) + w_p * plateau(win_rate)   [w_r 0.4, w_p 0.6, scale 0.15]
    regret       = max(0, regret)
    solve_rate   = plateau(win_rate)
    learnability = 1 - p  if 0 < p < 1  else 0,  p = win_rate

The two blend weights are independent (``scoring.regret_weight``, ``scoring.plateau_weight``), as the
authors' ``--spade-regret-weight`` and ``--spade-plateau-weight`` (github spade-rl/spade,
``spade/core/utils/delayed_env_rewards.py``); the paper runs 0.4 and 0.6, their characterization tests 1.0
and 1.0. ``solve_rate`` is their blend with weights (regret 0, plateau 1).

``learnability`` is the proposer reward of Absolute Zero (Zhao et al. 2025, arXiv 2505.03335):
``r_propose = 0 if r_solve in {0, 1} else 1 - r_solve``, with ``r_solve`` the solver's mean success over
its rollouts; tasks that are never or always solved give no signal, harder solvable tasks give more. It is
not the SFL / "No Regrets" learnability ``p * (1 - p)`` (Rutherford et al. 2024).

Episode returns come from the rollout engine (docs/DESIGN.md §5: the last reward clamped to [-1, 1] if the
episode terminated, else 0). Choices where the summary is silent:

- A play the environment broke (its ``error_type`` is one of :data:`sandbox.outcome.ENV_ERROR_TYPES`: an
  exception, timeout, memory, contract or jail failure, still failing after ``rollout.env_retries``) or
  whose model call failed (``model_error``, still failing after ``rollout.model_retries``) is left out of
  every mean (:data:`sandbox.outcome.LEFT_OUT_ERROR_TYPES`): it says nothing about the agent. The authors
  retry a failed play and otherwise drop it (``spade/core/orchestrator.py:1523-1547``). Any other
  ``error_type`` counts as return 0 even if the frame says otherwise (the engine already sets it so).
- A valid environment whose no-hint plays were ALL left out so has no win rate: it gets no
  env_scores row at all (no memory entry, no metric), and :func:`broken_env_ids` names it so the
  caller can record it. A valid environment with no no-hint plays whatsoever is still an error.
- An environment with no hinted plays (``rollout.plays_hint = 0``) has no defined regret: regret and
  ``r_hint`` are 0 there, so only the plateau term of ``blend`` can reward it.
- An environment whose stored hint still leaks the solution after ``rollout.hint_rewrites`` rewrites
  (``hints.leaks_solution``; pass its id in ``leaked``) has no regret term either: ``hint_leaked`` is True,
  ``regret`` is 0 (not null: memory ranks by it and a leaked hint must neither lift nor sink an env there).
  Its hinted plays were played and stored; ``r_hint`` still reports their mean for the record, so
  ``regret = r_hint - r_no_hint`` holds exactly on the rows with ``hint_leaked`` False and hinted plays.
- A valid environment with no no-hint plays has no win rate: that is an error, never a silent 0.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

import numpy as np
import pandas as pd

from sandbox.outcome import is_left_out
from spade_core.config import ScoringConfig
from spade_core.store.schemas import SCHEMAS

CONDITIONS = ("no_hint", "hint")
SCORED_COLUMNS = ("env_id", "condition", "episode_return", "error_type")  # what scoring reads of a play
ENV_SCORE_COLUMNS: tuple[str, ...] = tuple(SCHEMAS["env_scores"].names)
_FLOAT_COLUMNS = ("win_rate", "r_hint", "r_no_hint", "regret")


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
    """w_r * clip(regret / scale, 0, 1) + w_p * plateau(win_rate) (docs/DESIGN.md §7 step 7, default).

    >>> round(blend_reward(0.5, 0.075, ScoringConfig()), 6)  # 0.4 * 0.5 + 0.6 * 1
    0.8
    >>> round(blend_reward(0.5, 0.3, ScoringConfig(regret_weight=1.0, plateau_weight=1.0)), 6)  # 1 + 1
    2.0
    """
    regret_term = float(np.clip(regret / cfg.regret_scale, 0.0, 1.0))
    return cfg.regret_weight * regret_term + cfg.plateau_weight * _plateau(win_rate, cfg)


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


# The one explicit registry of the per-environment designer reward variants (ScoringConfig.designer_reward's
# choices but learning_potential, which needs the per-skill state); spade_core.method.designer_reward applies them.
DESIGNER_REWARDS: dict[str, Callable[[float, float, ScoringConfig], float]] = {
    "blend": blend_reward,
    "regret": regret_reward,
    "solve_rate": solve_rate_reward,
    "learnability": learnability_reward,
}


def env_broken(episodes: pd.DataFrame) -> np.ndarray:
    """Per episode row, whether the play is left out: the environment broke it (a sandbox class) or its model
    call failed (``model_error``); all False without an ``error_type`` column.

    >>> env_broken(pd.DataFrame({"error_type": [None, "timeout", "model_error", "trivial"]})).tolist()
    [False, True, True, False]
    """
    if "error_type" not in episodes.columns:
        return np.zeros(len(episodes), dtype=bool)
    return np.array([is_left_out(e) for e in episodes["error_type"]], dtype=bool)


def broken_env_ids(episodes: pd.DataFrame) -> list[str]:
    """Environments with no-hint plays of which every one was left out (:func:`env_broken`): no win rate.

    >>> eps = pd.DataFrame({"env_id": ["a", "a", "b"], "condition": ["no_hint"] * 3,
    ...                     "error_type": ["timeout", "exception", None]})
    >>> broken_env_ids(eps)
    ['a']
    """
    if episodes.empty:
        return []
    no_hint = (episodes["condition"] == "no_hint").to_numpy()
    broken = pd.Series(env_broken(episodes)[no_hint], index=episodes.loc[no_hint, "env_id"].to_numpy())
    every = broken.groupby(level=0, sort=False).all()
    return [str(env_id) for env_id, all_broken in every.items() if all_broken]


def _returns_by_env(episodes: pd.DataFrame) -> dict[tuple[str, str], list[float]]:
    """(env_id, condition) -> the returns of its plays, without the plays the environment broke."""
    missing = [c for c in SCORED_COLUMNS if c not in episodes.columns]
    if missing:
        raise ScoringError(f"episodes frame lacks column(s) {missing}")
    bad = sorted(set(episodes["condition"]) - set(CONDITIONS))
    if bad:
        raise ScoringError(f"episodes have unknown condition(s) {bad}; allowed: {list(CONDITIONS)}")
    kept = episodes[~env_broken(episodes)]
    returns = kept["episode_return"].astype(float).where(kept["error_type"].isna(), 0.0)
    if not np.isfinite(returns).all():
        env_id = kept.loc[~np.isfinite(returns), "env_id"].iloc[0]
        raise ScoringError(f"episodes of env {env_id!r} have a non-finite episode_return")
    grouped = returns.groupby([kept["env_id"], kept["condition"]], sort=False)
    return {key: list(values) for key, values in grouped}


def scored_envs(designs: pd.DataFrame, pool: pd.DataFrame) -> pd.DataFrame:
    """The rows :func:`score_environments` scores (docs/method.md step 7): every design whose reply held code, with
    ``valid`` its final verdict (a design without code has no environment), then the pool's environments that no
    design of this generation made (``source`` replay, starter or fixed: ``valid`` True, no design).

    Two designs with identical code share one env_id and each keep their row (and their reward).

    >>> designs = pd.DataFrame({"design_id": ["d1", "d2", "d3"], "env_id": ["e1", None, "e3"],
    ...                         "skill": ["logic"] * 3, "ok": [True, False, False]})
    >>> pool = pd.DataFrame({"env_id": ["e1", "s1"], "skill": ["logic", "maths"], "source": ["design", "seed"]})
    >>> scored_envs(designs, pool).values.tolist()
    [['e1', 'd1', 'logic', True], ['e3', 'd3', 'logic', False], ['s1', None, 'maths', True]]
    """
    coded = designs[designs["env_id"].notna()]
    new = pd.DataFrame(
        {
            "env_id": coded["env_id"],
            "design_id": coded["design_id"],
            "skill": coded["skill"],
            "valid": coded["ok"].astype(bool),
        }
    )
    others = pool[pool["source"] != "design"]
    replay = pd.DataFrame({"env_id": others["env_id"], "design_id": None, "skill": others["skill"], "valid": True})
    return pd.concat([new, replay], ignore_index=True)


def score_environments(
    episodes: pd.DataFrame, envs: pd.DataFrame, cfg: ScoringConfig, leaked: Collection[str] = frozenset()
) -> pd.DataFrame:
    """One env_scores row per row of ``envs`` (docs/DESIGN.md §7 step 7), in the order of ``envs``, except
    valid environments whose every no-hint play the environment broke (:func:`broken_env_ids`): no row.

    Args:
        episodes: one row per episode: ``env_id``, ``condition`` ("no_hint" | "hint"), ``episode_return``,
            ``error_type`` (None when the episode ran cleanly; a sandbox class or ``model_error``: the play is
            left out).
        envs: ``env_id``, ``design_id`` (None for replayed or seed envs), ``skill``, ``valid``. Two designs
            with identical code share one env_id and so its scores, each on its own row.
        cfg: the score stage's scoring config; no constant of it changes a score (the designer reward
            variants it configures are applied by the reward stage, over the whole window).
        leaked: env ids whose stored hint still leaks the solution
            (:func:`spade_core.play.hints.leaked_env_ids` of the generation's hints): no regret term for them.
            Ids not in ``envs`` are ignored.

    Returns:
        Exactly the env_scores columns. ``r_no_hint`` equals ``win_rate``; invalid designs score 0.0
        everywhere (and ``hint_leaked`` False); a leaked env has ``hint_leaked`` True and ``regret`` 0.

    Raises:
        ScoringError: a missing column, an unknown condition, a non-finite return, an episode of an env
            not in ``envs``, or a valid env without no-hint plays.
    """
    missing = [c for c in ("env_id", "design_id", "skill", "valid") if c not in envs.columns]
    if missing:
        raise ScoringError(f"envs frame lacks column(s) {missing}")
    returns = _returns_by_env(episodes)
    unknown = sorted(set(episodes["env_id"]) - set(envs["env_id"]))
    if unknown:
        raise ScoringError(f"episodes reference env(s) not in the envs frame: {unknown[:5]}")
    broken = frozenset(broken_env_ids(episodes))
    leaked = frozenset(leaked)
    rows = []
    for env in envs.itertuples(index=False):
        row = {"env_id": env.env_id, "design_id": env.design_id, "skill": env.skill}
        if not bool(env.valid):
            rows.append(row | dict.fromkeys(_FLOAT_COLUMNS, 0.0) | {"hint_leaked": False})
            continue
        no_hint, hint = returns.get((env.env_id, "no_hint"), []), returns.get((env.env_id, "hint"), [])
        if not no_hint and env.env_id in broken:
            continue  # the environment broke every no-hint play: no win rate, no row (module docstring)
        if not no_hint:
            raise ScoringError(f"valid env {env.env_id!r} has no no_hint episodes, so no win rate")
        p = win_rate(no_hint)
        hint_leaked = env.env_id in leaked
        r = 0.0 if hint_leaked else regret(hint, no_hint)  # a leaking hint: no regret term (module docstring)
        r_hint = float(np.mean(hint)) if hint else 0.0
        rows.append(row | {"win_rate": p, "r_hint": r_hint, "r_no_hint": p, "regret": r, "hint_leaked": hint_leaked})
    frame = pd.DataFrame(rows, columns=list(ENV_SCORE_COLUMNS))
    return frame.astype({c: "float64" for c in _FLOAT_COLUMNS} | {"hint_leaked": bool})
