"""The designer's windowed reward (docs/DESIGN.md §7.2): raw variant, drop, per-skill centring, scale.

Pure functions over numbers and small frames; no store, no model. One generation's designer samples are
rewarded after the K steps of their window (the agent played the generation's pool once per step)::

    win rate   p(e) = mean return of every no-hint play of e over the window's K steps, all steps pooled
                      (play-weighted, not a mean of per-step means)   [4 steps x 8 plays = 32 plays]
    regret     R(e) = mean(hinted returns) - mean(no-hint returns at the window's first step)
                      (both at the regeneration step: "matched timing"); 0 when e has no hinted plays
    raw(e)          = the variant's reward of (p, R), spade_core.method.scoring:
                      blend        = w_r * clip(R / scale, 0, 1) + w_p * plateau(p)  [w_r 0.4, w_p 0.6, scale 0.15]
                      solve_rate   = plateau(p)  (blend with w_r 0, w_p 1)
                      regret       = max(0, R)
                      learnability = 1 - p if 0 < p < 1 else 0
                      learning_potential = |p(e) - mu_slow(skill)|, mu_slow read after this window's update
                                           (spade_core.method.learning_potential: the per-skill EMA state)
    drop            blend and solve_rate samples with raw < 0 (strictly) are never trained
    copy       raw(e) = scoring.parent_copy_raw for a design refused as a copy of its parent, when set (ours,
                      opt-in; unset, as the authors, a copy is no sample): no win rate, no regret
    centre     a(e) = raw(e) - mean{raw(e') : e' kept, same skill, same generation}    (no std division)
    scale      c    = min(n_agent / n_designer * K, cap)            [192 / 24 * 4 = 32 games; 50 cap]
    reward     A(e) = c * a(e)

The window win rate is pooled, so a step with more plays weighs more (the authors flatten the window's
plays, ``delayed_env_rewards.py:492-494``); the regret's two means are played by the same checkpoint at the
regeneration step (the authors' "matched timing", ``delayed_env_rewards.py:461-464``), the only step with
hinted plays. :func:`window_inputs` computes both from the episodes.

Facts from the authors' repository (github spade-rl/spade): ``spade/core/utils/delayed_env_rewards.py``
(the variants and the shared centring tail), ``spade/core/utils/rewards.py`` (``compute_env_reward_scale``),
``cmd/games/train_spade_30b.sh`` (the paper's blend / solve_rate / learning_potential settings). Where this
module chose differently:

- When can a raw value be negative? Paper blend floors and clips the regret term to [0, 1], the plateau
  is >= 0 and both weights are >= 0, so blend (and solve_rate, which is blend with weights regret 0 and
  plateau 1) is never negative and the drop never fires. The authors' blend goes negative only through
  terms the paper turns off (unfloored regret, a signed micro-learning-potential slope, a frontier
  penalty); those terms are not built here, the drop rule is, strictly ``raw < 0`` as theirs. Their
  regret and learning-potential variants drop nothing.
- ``regret`` uses the matched-timing R above. The authors' ``regret_based`` variant instead subtracts the
  mean of the whole window's no-hint plays and gives a game whose ``step`` timed out a raw of -0.5; neither
  is mirrored (the authors' own blend docstring calls the window baseline biased on learnable games).
- ``scoring.parent_copy_raw`` departs from the authors, who train no design the novelty filter refused. A
  designer that learns its best-paid parent writes it back, and every copy is refused; with no sample for a
  copy, nothing pays a copy less than the designs it crowds out, and the generation thins to a few designs
  (docs/method.md, "The designer's test bed"). Set, a copy is a sample of its skill with that raw value.
- An environment without no-hint plays is an error here (as in spade_core.method.scoring), where the authors score
  it with win rate 0; without hinted plays its regret is 0 here, where the authors set the hinted mean to 0
  (regret = -mean(first step)). The two agree whenever first-step returns are >= 0.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import get_args

import numpy as np
import pandas as pd

from spade_core.config import DesignerRewardVariant, ScoringConfig
from spade_core.method.learning_potential import LearningPotentialState, learning_potential_update
from spade_core.method.scoring import CONDITIONS, DESIGNER_REWARDS, SCORED_COLUMNS, ScoringError, env_broken

Variant = DesignerRewardVariant
VARIANTS: tuple[str, ...] = get_args(Variant)
# The authors mask negative raw values in their blend path only (solve_rate is that path with weights 0 and 1).
DROPPING_VARIANTS = frozenset({"blend", "solve_rate"})
_NEEDS_REGRET = frozenset({"blend", "regret"})

DEFAULT_SCALE_CAP = 50.0  # --spade-max-env-reward-scale

INPUT_COLUMNS = ("env_id", "skill", "win_rate")  # plus r_hint, r_no_hint_first for blend / regret; n_no_hint
OUTPUT_COLUMNS = ("regret", "raw", "dropped", "centred", "reward")
WINDOW_COLUMNS = ("env_id", "win_rate", "n_no_hint", "r_no_hint_first", "r_hint", "n_hint", "n_broken")
PLAY_COLUMNS = (*SCORED_COLUMNS, "policy_step")  # what window_inputs reads


def _check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ValueError(f"unknown designer reward variant {variant!r}; variants: {', '.join(VARIANTS)}")


# --------------------------------------------------------------------------------------------------------------
# The raw variants, the drop, the centring and the scale
# --------------------------------------------------------------------------------------------------------------


def raw_reward(variant: str, win_rate: float, regret: float, cfg: ScoringConfig) -> float:
    """One environment's raw reward under ``variant`` (not ``learning_potential``: see
    :func:`~spade_core.method.learning_potential.learning_potential_update`), reusing
    :mod:`spade_core.method.scoring`'s variant functions.

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
# Frames: episodes -> window statistics -> designer rewards
# --------------------------------------------------------------------------------------------------------------


def window_inputs(episodes: pd.DataFrame, step_col: str = "policy_step") -> pd.DataFrame:
    """Per environment, the window statistics :func:`designer_rewards` reads (columns :data:`WINDOW_COLUMNS`).

    ``episodes``: ``env_id``, ``condition`` ("no_hint" | "hint"), ``episode_return``, ``step_col`` (the step
    that played it; its smallest value among an environment's usable no-hint plays is the window's first
    step) and optionally ``error_type``, read as in spade_core.method.scoring: a play the environment broke (a
    sandbox class) or whose model call failed (``model_error``) is left out of every statistic and counted in
    ``n_broken`` (plays of both conditions); any other error counts as return 0. An environment without usable
    no-hint plays (hinted plays only, or every no-hint play left out) has ``win_rate`` NaN and ``n_no_hint`` 0:
    it cannot be rewarded (:func:`designer_rewards` refuses it), so drop it first and record it (``n_broken``
    says why). One without hinted plays has ``r_hint`` NaN and ``n_hint`` 0. Rows follow the first appearance
    of each env_id.
    """
    missing = [c for c in ("env_id", "condition", "episode_return", step_col) if c not in episodes.columns]
    if missing:
        raise ScoringError(f"episodes frame lacks column(s) {missing}")
    bad = sorted(set(episodes["condition"]) - set(CONDITIONS))
    if bad:
        raise ScoringError(f"episodes have unknown condition(s) {bad}; allowed: {list(CONDITIONS)}")
    broken = env_broken(episodes)
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
    copies: pd.DataFrame | None = None,
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
        copies: the designs refused as copies of their parent (``env_id``, ``skill``; other columns pass
            through), rewarded with ``cfg.parent_copy_raw`` (which must be set) after ``envs``' rows, with
            ``win_rate`` and ``regret`` NaN; they enter no learning-potential mean.

    Returns:
        ``envs`` (then ``copies``) with :data:`OUTPUT_COLUMNS` added (``regret`` NaN when not computed;
        ``centred`` and ``reward`` NaN where ``dropped``), and the new learning-potential state (``lp_state``
        unchanged for the other variants).

    Two played designs of one skill and a copy of their parent, with ``scoring.parent_copy_raw`` 0: the copy
    lowers its skill's mean, so it is paid below both.

    >>> envs = pd.DataFrame({"env_id": ["a", "b"], "skill": ["s", "s"], "win_rate": [0.5, 0.0]})
    >>> cfg = ScoringConfig(parent_copy_raw=0.0)
    >>> copy = pd.DataFrame({"env_id": ["c"], "skill": ["s"]})
    >>> out, _ = designer_rewards(envs, "solve_rate", cfg, 1.0, copies=copy)
    >>> out[["env_id", "raw", "centred"]].round(3).values.tolist()
    [['a', 1.0, 0.667], ['b', 0.0, -0.333], ['c', 0.0, -0.333]]
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
    out["regret"] = r
    out["raw"] = raw
    if copies is not None and not copies.empty:
        if cfg.parent_copy_raw is None:
            raise ValueError("copies are rewarded only with scoring.parent_copy_raw set")
        rows = copies.assign(win_rate=np.nan, regret=np.nan, raw=float(cfg.parent_copy_raw))
        out = pd.concat([out, rows], ignore_index=True)
        skills += [str(s) for s in copies["skill"]]
    raw = out["raw"].to_numpy(dtype=float)
    dropped = drop_mask(variant, raw)
    centred = centre_per_skill(raw, skills, keep=~dropped)
    out["dropped"] = dropped
    out["centred"] = centred
    out["reward"] = centred * scale
    return out, new_state


def late_top_up_rewards(envs: pd.DataFrame) -> pd.DataFrame:
    """The rewards of designs a later step of the pool topped up (``designer.top_up_at: steps``): they have no
    hint and no hinted play, so a regret of 0, and their reward is 0, kept (trained with advantage 0), as the
    authors' (``spade/core/utils/env_rewards.py:197-205``: a raw regret of 0, centred among that step's
    top-ups, so 0; ``spade_rollout.py:589-595`` finds no window left to recompute it from).

    >>> late_top_up_rewards(pd.DataFrame({"env_id": ["e"]}))[list(OUTPUT_COLUMNS)].to_dict("records")
    [{'regret': 0.0, 'raw': 0.0, 'dropped': False, 'centred': 0.0, 'reward': 0.0}]
    """
    return envs.assign(regret=0.0, raw=0.0, dropped=False, centred=0.0, reward=0.0)
