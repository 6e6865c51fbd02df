"""The designer's windowed reward (docs/DESIGN.md §7.2): raw variant, drop, per-skill centring, scale.

Pure functions over numbers and small frames; no store, no model. One generation's designer samples are
rewarded after the K steps of their window (the agent played the generation's pool once per step)::

    win rate   p(e) = mean return of every no-hint play of e over the window's K steps, all steps pooled
                      (play-weighted, not a mean of per-step means)   [4 steps x 8 plays = 32 plays]
    regret     R(e) = mean(hinted returns) - mean(no-hint returns at the window's first step)
                      (both at the regeneration step: "matched timing"); 0 when e has no hinted plays
    raw(e)          = the variant's reward of (p, R), spade_core.scoring:
                      blend        = w_r * clip(R / scale, 0, 1) + w_p * plateau(p)  [w_r 0.4, w_p 0.6, scale 0.15]
                      solve_rate   = plateau(p)  (blend with w_r 0, w_p 1)
                      regret       = max(0, R)
                      learnability = 1 - p if 0 < p < 1 else 0
                      learning_potential = |p(e) - mu_slow(skill)|, mu_slow read after this window's update
    drop            blend and solve_rate samples with raw < 0 (strictly) are never trained
    centre     a(e) = raw(e) - mean{raw(e') : e' kept, same skill, same generation}    (no std division)
    scale      c    = min(n_agent / n_designer * K, cap)            [192 / 24 * 4 = 32 games; 50 cap]
    reward     A(e) = c * a(e)

Learning potential keeps two EMAs of the agent's return per skill. Each generation feeds one observation
per skill present: r = the play-weighted mean of every window no-hint play of that skill's environments
(a skill with no plays this window keeps its state). The first observation sets both EMAs to r; after that,
with gamma the weight of the *new* observation (the authors' convention, the reverse of the usual one)::

    mu_fast <- (1 - gamma_fast) * mu_fast + gamma_fast * r       [gamma_fast 0.98]
    mu_slow <- (1 - gamma_slow) * mu_slow + gamma_slow * r       [gamma_slow 0.85]

The reward uses only mu_slow; ``(mu_fast - mu_slow) / (2 (gamma_fast - gamma_slow))`` is the signed potential,
a monitoring value. The state is a :class:`LearningPotentialState` whose :meth:`~LearningPotentialState.to_frame`
is meant to be stored once per generation, so a resumed run continues the EMAs (the authors keep them in
process memory and lose them on a crash).

Facts from the authors' repository (github spade-rl/spade): ``spade/core/utils/delayed_env_rewards.py``
(the variants and the shared centring tail), ``spade/core/learning_potential.py`` (the EMAs),
``spade/core/utils/rewards.py`` (``compute_env_reward_scale``), ``cmd/games/train_spade_30b.sh`` (the paper's
blend / solve_rate / learning_potential settings). Where this module chose differently:

- When can a raw value be negative? Paper blend floors and clips the regret term to [0, 1], the plateau
  is >= 0 and both weights are >= 0, so blend (and solve_rate, which is blend with weights regret 0 and
  plateau 1) is never negative and the drop never fires. The authors' blend goes negative only through
  terms the paper turns off (unfloored regret, a signed micro-learning-potential slope, a frontier
  penalty); those terms are not built here, the drop rule is, strictly ``raw < 0`` as theirs. Their
  regret and learning-potential variants drop nothing.
- ``regret`` uses the matched-timing R above. The authors' ``regret_based`` variant instead subtracts the
  mean of the whole window's no-hint plays and gives a game whose ``step`` timed out a raw of -0.5; neither
  is mirrored (the authors' own blend docstring calls the window baseline biased on learnable games).
- An environment without no-hint plays is an error here (as in spade_core.scoring), where the authors score
  it with win rate 0; without hinted plays its regret is 0 here, where the authors set the hinted mean to 0
  (regret = -mean(first step)). The two agree whenever first-step returns are >= 0.
- A skill the LP state has not seen starts a new tracker; the authors skip a skill they have no tracker for
  (they create one per configured skill at start-up, so that does not happen in their runs).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import get_args

import numpy as np
import pandas as pd

from spade_core import scoring
from spade_core.config import DesignerRewardVariant, ScoringConfig
from spade_core.scoring import CONDITIONS, DESIGNER_REWARDS, ScoringError

Variant = DesignerRewardVariant
VARIANTS: tuple[str, ...] = get_args(Variant)
# The authors mask negative raw values in their blend path only (solve_rate is that path with weights 0 and 1).
DROPPING_VARIANTS = frozenset({"blend", "solve_rate"})
_NEEDS_REGRET = frozenset({"blend", "regret"})

DEFAULT_GAMMA_FAST = 0.98  # paper runs: --spade-gamma1 0.98 (the authors' argparse default is 0.99)
DEFAULT_GAMMA_SLOW = 0.85  # paper runs: --spade-gamma2 0.85 (argparse default 0.95)
DEFAULT_SCALE_CAP = 50.0  # --spade-max-env-reward-scale

LP_STATE_COLUMNS = ("skill", "mu_fast", "mu_slow", "count", "gamma_fast", "gamma_slow")
INPUT_COLUMNS = ("env_id", "skill", "win_rate")  # plus r_hint, r_no_hint_first for blend / regret; n_no_hint
OUTPUT_COLUMNS = ("regret", "raw", "dropped", "centred", "reward")
WINDOW_COLUMNS = ("env_id", "win_rate", "n_no_hint", "r_no_hint_first", "r_hint", "n_hint", "n_broken")


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown designer reward variant {variant!r}; variants: {', '.join(VARIANTS)}")


# --------------------------------------------------------------------------------------------------------------
# Window statistics and the raw variants
# --------------------------------------------------------------------------------------------------------------


def window_win_rate(no_hint_returns: Sequence[float]) -> float:
    """Mean return of every no-hint play of one environment in its window, all K steps pooled.

    Pooled, so a step with more plays weighs more (the authors flatten the window's plays,
    ``delayed_env_rewards.py:492-494``). No plays is an error (:class:`~spade_core.scoring.ScoringError`).

    >>> window_win_rate([1.0, 1.0, 1.0, 1.0] + [0.0])  # step 0: four wins; step 1: one loss
    0.8
    """
    return scoring.win_rate(no_hint_returns)


def first_step_regret(hint_returns: Sequence[float], first_step_no_hint_returns: Sequence[float]) -> float:
    """mean(hinted) - mean(no-hint plays of the window's first step); 0 without hinted plays.

    Both sets are played by the same checkpoint at the regeneration step (the authors' "matched timing",
    ``delayed_env_rewards.py:461-464``); the hinted plays exist only at that step.

    >>> first_step_regret([1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0])
    0.25
    """
    return scoring.regret(hint_returns, first_step_no_hint_returns)


def raw_reward(variant: str, win_rate: float, regret: float, cfg: ScoringConfig) -> float:
    """One environment's raw reward under ``variant`` (not ``learning_potential``: see
    :func:`learning_potential_update`), reusing spade_core.scoring's variant functions.

    ``win_rate`` is the window's, ``regret`` the first step's. ``cfg.designer_reward`` is ignored: the
    variant is the argument, since ``learning_potential`` is not one of that field's choices.

    >>> round(raw_reward("blend", 0.3, 0.075, ScoringConfig()), 6)  # 0.4 * 0.5 + 0.6 * 0.6
    0.56
    """
    _check_variant(variant)
    if variant == "learning_potential":
        raise ValueError("learning_potential needs the per-skill EMA state: use learning_potential_update")
    return DESIGNER_REWARDS[variant](win_rate, regret, cfg)


def drop_mask(variant: str, raw: Sequence[float] | np.ndarray) -> np.ndarray:
    """True where a sample is dropped: raw < 0 (strictly) for blend and solve_rate, never otherwise.

    >>> drop_mask("blend", [0.0, -1e-13, 0.5]).tolist(), drop_mask("regret", [-0.5]).tolist()
    ([False, True, False], [False])
    """
    _check_variant(variant)
    values = np.asarray(raw, dtype=float)
    if not np.isfinite(values).all():
        raise ValueError("raw rewards must be finite")
    if variant in DROPPING_VARIANTS:
        return values < 0.0
    return np.zeros(values.shape, dtype=bool)


def centre_per_skill(
    rewards: Sequence[float] | np.ndarray,
    skills: Sequence[Hashable],
    keep: Sequence[bool] | np.ndarray | None = None,
) -> np.ndarray:
    """Each kept reward minus the mean of the kept rewards of its skill; NaN where not kept.

    No std division (the authors: a small batch's std blows the rewards up, ``delayed_env_rewards.py:45-62``);
    a dropped sample neither gets a value nor enters its skill's mean; a skill's only kept sample centres to 0.

    >>> centre_per_skill([4.0, 0.0, -3.0, 0.5], ["a", "a", "b", "b"], keep=[True, True, False, True]).tolist()
    [2.0, -2.0, nan, 0.0]
    """
    values = np.asarray(rewards, dtype=float)
    labels = list(skills)
    if len(labels) != len(values):
        raise ValueError(f"{len(values)} rewards but {len(labels)} skills")
    kept = np.ones(len(values), dtype=bool) if keep is None else np.asarray(keep, dtype=bool)
    if kept.shape != values.shape:
        raise ValueError(f"{len(values)} rewards but {len(kept)} keep flags")
    if not np.isfinite(values[kept]).all():
        raise ValueError("kept rewards must be finite")
    if len(values) == 0:
        return values.copy()
    series = pd.Series(np.where(kept, values, np.nan))
    means = series.groupby(pd.Series(labels, dtype=object), sort=False).transform("mean")
    return (series - means).to_numpy(dtype=float)


def env_reward_scale(
    n_agent_samples: int, n_designer_samples: int, interval: int, cap: float = DEFAULT_SCALE_CAP
) -> float:
    """min(n_agent / n_designer * interval, cap): the designer's advantage multiplier.

    The authors (``spade/core/utils/rewards.py:53-62``) count the agent samples of the training step and the
    designer samples trained in it *before* the negative-blend drop (``spade_rollout.py:597-603``), and use
    1.0 when either count is 0. ``interval`` is K, the steps per generation.

    >>> env_reward_scale(192, 24, 4), env_reward_scale(192, 24, 8), env_reward_scale(0, 24, 4)
    (32.0, 50.0, 1.0)
    """
    if interval < 1:
        raise ValueError(f"interval (steps per generation) must be >= 1, got {interval}")
    if not cap > 0:
        raise ValueError(f"cap must be > 0, got {cap}")
    if n_agent_samples <= 0 or n_designer_samples <= 0:
        return 1.0
    return float(min(n_agent_samples / n_designer_samples * interval, cap))


# --------------------------------------------------------------------------------------------------------------
# Learning potential: per-skill EMAs as explicit, serialisable state
# --------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SkillEMA:
    """One skill's EMAs after ``count`` >= 1 observations."""

    mu_fast: float
    mu_slow: float
    count: int


@dataclass(frozen=True)
class LearningPotentialState:
    """Per-skill fast/slow EMAs of the agent's window return; immutable, updated by returning a new state.

    ``gamma_*`` is the weight of the new observation (``spade/core/learning_potential.py:18-25``); the authors
    require gamma_fast > gamma_slow. A skill absent from ``skills`` has had no observation.
    """

    gamma_fast: float = DEFAULT_GAMMA_FAST
    gamma_slow: float = DEFAULT_GAMMA_SLOW
    skills: Mapping[str, SkillEMA] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0.0 < self.gamma_slow < self.gamma_fast <= 1.0:
            raise ValueError(
                f"learning potential needs 0 < gamma_slow < gamma_fast <= 1, "
                f"got gamma_fast={self.gamma_fast}, gamma_slow={self.gamma_slow}"
            )
        for skill, ema in self.skills.items():
            if ema.count < 1 or not (np.isfinite(ema.mu_fast) and np.isfinite(ema.mu_slow)):
                raise ValueError(f"skill {skill!r}: EMA state needs count >= 1 and finite means, got {ema}")
        object.__setattr__(self, "skills", MappingProxyType(dict(self.skills)))

    def baseline(self, skill: str) -> float:
        """mu_slow of ``skill``, 0.0 before its first observation (as the authors' ``get_baseline``)."""
        ema = self.skills.get(skill)
        return ema.mu_slow if ema is not None else 0.0

    def signed_potential(self, skill: str) -> float:
        """(mu_fast - mu_slow) / (2 (gamma_fast - gamma_slow)); 0.0 before the first observation. Monitoring only.

        >>> LearningPotentialState(0.8, 0.2).update({"logic": 0.0}).update({"logic": 0.5}).signed_potential("logic")
        0.25
        """
        ema = self.skills.get(skill)
        if ema is None:
            return 0.0
        return (ema.mu_fast - ema.mu_slow) / (2.0 * (self.gamma_fast - self.gamma_slow))

    def update(self, observations: Mapping[str, float]) -> LearningPotentialState:
        """A new state with one observation per skill in ``observations``; other skills are unchanged.

        The first observation of a skill sets both EMAs to it; later ones move each EMA by its gamma.

        >>> s = LearningPotentialState(0.8, 0.2).update({"logic": 0.0}).update({"logic": 0.5})
        >>> round(s.skills["logic"].mu_fast, 12), round(s.skills["logic"].mu_slow, 12), s.skills["logic"].count
        (0.4, 0.1, 2)
        """
        skills = dict(self.skills)
        for skill, r in observations.items():
            r = float(r)
            if not np.isfinite(r):
                raise ValueError(f"skill {skill!r}: observation must be finite, got {r}")
            old = skills.get(skill)
            if old is None:
                skills[skill] = SkillEMA(mu_fast=r, mu_slow=r, count=1)
            else:
                skills[skill] = SkillEMA(
                    mu_fast=(1.0 - self.gamma_fast) * old.mu_fast + self.gamma_fast * r,
                    mu_slow=(1.0 - self.gamma_slow) * old.mu_slow + self.gamma_slow * r,
                    count=old.count + 1,
                )
        return LearningPotentialState(self.gamma_fast, self.gamma_slow, skills)

    def to_frame(self) -> pd.DataFrame:
        """One row per observed skill (columns :data:`LP_STATE_COLUMNS`, sorted by skill), for Parquet."""
        rows = [
            (skill, ema.mu_fast, ema.mu_slow, ema.count, self.gamma_fast, self.gamma_slow)
            for skill, ema in sorted(self.skills.items())
        ]
        frame = pd.DataFrame(rows, columns=list(LP_STATE_COLUMNS))
        return frame.astype(
            {"skill": object, "mu_fast": "float64", "mu_slow": "float64", "count": "int64"}
            | {"gamma_fast": "float64", "gamma_slow": "float64"}
        )

    @classmethod
    def from_frame(
        cls,
        frame: pd.DataFrame,
        gamma_fast: float = DEFAULT_GAMMA_FAST,
        gamma_slow: float = DEFAULT_GAMMA_SLOW,
    ) -> LearningPotentialState:
        """The state stored by :meth:`to_frame`; an empty frame is the fresh state of a first generation.

        The gammas are the run's; rows stored under other gammas are an error (a resumed run must not
        silently continue EMAs built with different weights).
        """
        missing = [c for c in LP_STATE_COLUMNS if c not in frame.columns]
        if missing:
            raise ValueError(f"learning-potential state frame lacks column(s) {missing}")
        repeated = frame["skill"][frame["skill"].duplicated()]
        if len(repeated):
            raise ValueError(f"learning-potential state repeats skill(s) {sorted(set(repeated))}")
        stored = {(float(f), float(s)) for f, s in zip(frame["gamma_fast"], frame["gamma_slow"], strict=True)}
        if stored - {(float(gamma_fast), float(gamma_slow))}:
            raise ValueError(
                f"learning-potential state was built with (gamma_fast, gamma_slow) {sorted(stored)}, "
                f"not the run's ({gamma_fast}, {gamma_slow})"
            )
        skills = {
            str(skill): SkillEMA(mu_fast=float(fast), mu_slow=float(slow), count=int(count))
            for skill, fast, slow, count in zip(
                frame["skill"], frame["mu_fast"], frame["mu_slow"], frame["count"], strict=True
            )
        }
        return cls(gamma_fast, gamma_slow, skills)


def _plays(n_plays: Sequence[int] | np.ndarray | None, n: int) -> np.ndarray:
    if n_plays is None:
        return np.ones(n, dtype=np.int64)
    counts = np.asarray(n_plays)
    if counts.shape != (n,) or (counts < 0).any():
        raise ValueError(f"n_plays needs {n} counts >= 0")
    return counts.astype(np.int64)


def skill_window_means(
    win_rates: Sequence[float] | np.ndarray,
    skills: Sequence[str],
    n_plays: Sequence[int] | np.ndarray | None = None,
) -> dict[str, float]:
    """Per skill, the mean of every window play of its environments (play-weighted by ``n_plays``).

    ``n_plays=None`` weighs environments equally. Skills whose environments have no plays are absent, as the
    authors update a tracker only when its skill has plays (``delayed_env_rewards.py:128-140``).

    >>> skill_window_means([1.0, 0.0], ["a", "a"], n_plays=[3, 1])
    {'a': 0.75}
    """
    rates = np.asarray(win_rates, dtype=float)
    counts = _plays(n_plays, len(rates))
    if len(skills) != len(rates):
        raise ValueError(f"{len(rates)} win rates but {len(skills)} skills")
    totals: dict[str, list[float]] = {}
    for skill, p, n in zip(skills, rates, counts, strict=True):
        if n > 0:
            acc = totals.setdefault(skill, [0.0, 0.0])
            acc[0] += float(p) * int(n)
            acc[1] += int(n)
    return {skill: s / n for skill, (s, n) in totals.items()}


def learning_potential_raw(
    win_rates: Sequence[float] | np.ndarray,
    skills: Sequence[str],
    state: LearningPotentialState,
    n_plays: Sequence[int] | np.ndarray | None = None,
) -> np.ndarray:
    """|win rate - mu_slow(skill)| under ``state`` as given (no update); 0.0 for an environment without plays.

    >>> s = LearningPotentialState(0.8, 0.2).update({"a": 0.5})
    >>> learning_potential_raw([0.2, 1.0, 0.9], ["a", "a", "a"], s, n_plays=[2, 2, 0]).round(12).tolist()
    [0.3, 0.5, 0.0]
    """
    rates = np.asarray(win_rates, dtype=float)
    counts = _plays(n_plays, len(rates))
    if len(skills) != len(rates):
        raise ValueError(f"{len(rates)} win rates but {len(skills)} skills")
    baselines = np.array([state.baseline(skill) for skill in skills], dtype=float)
    return np.where(counts > 0, np.abs(rates - baselines), 0.0)


def learning_potential_update(
    win_rates: Sequence[float] | np.ndarray,
    skills: Sequence[str],
    state: LearningPotentialState,
    n_plays: Sequence[int] | np.ndarray | None = None,
) -> tuple[np.ndarray, LearningPotentialState]:
    """(raw rewards, new state): feed each skill's window mean to its EMAs, then read the new mu_slow.

    The update comes first, so the raws see this window's baseline (the authors' delayed learning-potential
    mode, ``delayed_env_rewards.py:128-169``, with the per-step updates switched off). Pure: ``state`` is
    unchanged; store the returned state's :meth:`~LearningPotentialState.to_frame` with the generation.
    """
    new_state = state.update(skill_window_means(win_rates, skills, n_plays))
    return learning_potential_raw(win_rates, skills, new_state, n_plays), new_state


# --------------------------------------------------------------------------------------------------------------
# Frames: episodes -> window statistics -> designer rewards
# --------------------------------------------------------------------------------------------------------------


def window_inputs(episodes: pd.DataFrame, step_col: str = "policy_step") -> pd.DataFrame:
    """Per environment, the window statistics :func:`designer_rewards` reads (columns :data:`WINDOW_COLUMNS`).

    ``episodes``: ``env_id``, ``condition`` ("no_hint" | "hint"), ``episode_return``, ``step_col`` (the step
    that played it; its smallest value among an environment's usable no-hint plays is the window's first
    step) and optionally ``error_type``, read as in spade_core.scoring: a play the environment broke (a
    sandbox class) is left out of every statistic and counted in ``n_broken`` (plays of both conditions);
    any other error (``model_error``) counts as return 0. An environment without usable no-hint plays (hinted
    plays only, or every no-hint play broken) has ``win_rate`` NaN and ``n_no_hint`` 0: it cannot be rewarded
    (:func:`designer_rewards` refuses it), so drop it first and record it (``n_broken`` says why). One without
    hinted plays has ``r_hint`` NaN and ``n_hint`` 0. Rows follow the first appearance of each env_id.
    """
    missing = [c for c in ("env_id", "condition", "episode_return", step_col) if c not in episodes.columns]
    if missing:
        raise ScoringError(f"episodes frame lacks column(s) {missing}")
    bad = sorted(set(episodes["condition"]) - set(CONDITIONS))
    if bad:
        raise ScoringError(f"episodes have unknown condition(s) {bad}; allowed: {list(CONDITIONS)}")
    broken = scoring.env_broken(episodes)
    out = pd.DataFrame({"env_id": pd.unique(episodes["env_id"])}).set_index("env_id")
    out["n_broken"] = pd.Series(broken, index=episodes.index).groupby(episodes["env_id"], sort=False).sum()
    kept = episodes[~broken]
    returns = kept["episode_return"].astype(float)
    if "error_type" in kept.columns:
        returns = returns.where(kept["error_type"].isna(), 0.0)
    if not np.isfinite(returns).all():
        env_id = kept.loc[~np.isfinite(returns), "env_id"].iloc[0]
        raise ScoringError(f"episodes of env {env_id!r} have a non-finite episode_return")
    plays = pd.DataFrame({"env_id": kept["env_id"], "step": kept[step_col], "r": returns})
    no_hint, hint = plays[kept["condition"] == "no_hint"], plays[kept["condition"] == "hint"]
    by_env = no_hint.groupby("env_id", sort=False)["r"]
    out["win_rate"] = by_env.mean()
    out["n_no_hint"] = by_env.size()
    first = no_hint[no_hint["step"] == no_hint.groupby("env_id", sort=False)["step"].transform("min")]
    out["r_no_hint_first"] = first.groupby("env_id", sort=False)["r"].mean()
    out["r_hint"] = hint.groupby("env_id", sort=False)["r"].mean()
    out["n_hint"] = hint.groupby("env_id", sort=False)["r"].size()
    counts = ["n_no_hint", "n_hint", "n_broken"]
    out[counts] = out[counts].fillna(0).astype("int64")
    return out.reset_index()[list(WINDOW_COLUMNS)]


def designer_rewards(
    envs: pd.DataFrame,
    variant: str,
    cfg: ScoringConfig,
    scale: float,
    lp_state: LearningPotentialState | None = None,
) -> tuple[pd.DataFrame, LearningPotentialState | None]:
    """One generation's designer rewards: raw variant, drop, per-skill centring, scale (docs/DESIGN.md §7.2).

    Args:
        envs: one row per designer sample to reward (a valid design of one generation): ``env_id``,
            ``skill``, ``win_rate`` (the window's, finite); for blend and regret also ``r_hint`` (NaN = no
            hinted plays, regret 0) and ``r_no_hint_first``; optionally ``n_no_hint`` (window no-hint plays,
            >= 1; weighs the learning-potential skill means, equal weights without it). Other columns pass
            through.
        variant: one of :data:`VARIANTS`.
        cfg: the blend / plateau constants (``cfg.designer_reward`` is not read).
        scale: the multiplier c, e.g. :func:`env_reward_scale`.
        lp_state: the learning-potential state before this generation; required for that variant.

    Returns:
        ``envs`` with :data:`OUTPUT_COLUMNS` added (``regret`` NaN when not computed; ``centred`` and
        ``reward`` NaN where ``dropped``), and the new learning-potential state (``lp_state`` unchanged for the
        other variants).
    """
    _check_variant(variant)
    if not np.isfinite(scale) or scale < 0:
        raise ValueError(f"scale must be finite and >= 0, got {scale}")
    needed = list(INPUT_COLUMNS) + (["r_hint", "r_no_hint_first"] if variant in _NEEDS_REGRET else [])
    missing = [c for c in needed if c not in envs.columns]
    if missing:
        raise ScoringError(f"envs frame lacks column(s) {missing} for variant {variant!r}")
    out = envs.copy()
    p = out["win_rate"].to_numpy(dtype=float)
    if not np.isfinite(p).all():
        env_id = out.loc[~np.isfinite(p), "env_id"].iloc[0]
        raise ScoringError(f"env {env_id!r} has no finite window win rate (no no-hint plays?)")
    n_plays = None
    if "n_no_hint" in out.columns:
        n_plays = out["n_no_hint"].to_numpy()
        if (n_plays < 1).any():
            env_id = out.loc[n_plays < 1, "env_id"].iloc[0]
            raise ScoringError(f"env {env_id!r} has no no-hint plays in its window, so no win rate")
    if {"r_hint", "r_no_hint_first"} <= set(out.columns):
        r_hint = out["r_hint"].to_numpy(dtype=float)
        r_first = out["r_no_hint_first"].to_numpy(dtype=float)
        bad = ~np.isfinite(r_first) & np.isfinite(r_hint)
        if bad.any():
            raise ScoringError(f"env {out.loc[bad, 'env_id'].iloc[0]!r} has hinted plays but no first-step mean")
        r = np.where(np.isfinite(r_hint), r_hint - np.nan_to_num(r_first), 0.0)
    else:
        r = np.full(len(out), np.nan)
    skills = [str(s) for s in out["skill"]]
    new_state = lp_state
    if variant == "learning_potential":
        if lp_state is None:
            raise ValueError("variant learning_potential needs lp_state (LearningPotentialState() for a fresh run)")
        raw, new_state = learning_potential_update(p, skills, lp_state, n_plays)
    else:
        raw = np.array([raw_reward(variant, float(pi), float(ri), cfg) for pi, ri in zip(p, r, strict=True)])
        raw = raw.astype(float).reshape(len(out))
    dropped = drop_mask(variant, raw)
    centred = centre_per_skill(raw, skills, keep=~dropped)
    out["regret"] = r
    out["raw"] = raw
    out["dropped"] = dropped
    out["centred"] = centred
    out["reward"] = centred * scale
    return out, new_state
