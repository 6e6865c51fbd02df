"""One generation's designer rewards over its window of K steps (docs/method.md step 8, docs/DESIGN.md §7 step 7):
which designs are rewarded, from which plays, at which scale, and at which global step they are trained.

:func:`window_rewards` runs once every play of the window exists (the reward stage, after the generation's last
step) and returns the ``designer_rewards`` rows (:data:`REWARD_COLUMNS`)::

    rewarded     the valid designs (final verdict ok) whose environment has a usable no-hint play in the
                 window; one whose no-hint plays the environment all broke is left out (info "broken_envs")
    win rate     p(e) = mean return of every no-hint play of e over the K steps        (window_inputs)
    regret       R(e) = mean(hinted plays) - mean(no-hint plays at the first step); no regret term (0) for
                 e in ``leaked`` (a hint that still leaks after its rewrites, scoring.zero_leaked_regret)
    reward       the variant's raw value, the drop of raw < 0, the centring on the skill's mean, times
                 c = min(n_agent / n_designer * K, scoring.reward_scale_cap)             (designer_rewards)
                 n_agent: the agent's no-hint plays of one step; n_designer: the rewarded designs made
                 before the pool, counted before the drop
    train_step   the generation's first step + D (designer.training_delay), or the run's last step when
                 that comes first (training.total_steps: the authors' flush; spade_core.steps.design_train_step)
    copies       with scoring.parent_copy_raw set, the designs the novelty stage refused as copies of their
                 parent (``copies``; not the later top-ups'): raw = that value, centred among the skill's
                 designs, no win rate; they count in n_designer (they are trained)
    later        a design a later step's top-up made (designer.top_up_at: steps, step k) had no hint: raw,
                 centred and reward 0, kept (late_top_up_rewards), trained at first step + k + D; it counts
                 in no skill mean and not in n_designer

``learning_potential`` continues the EMA state the previous generation's reward stored (:func:`state_before`).
The formulas and the authors' sources are in :mod:`spade_core.method.designer_reward`; this module only chooses
the rows they apply to. Pure functions over frames; no store, no model.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any, NamedTuple

import pandas as pd

from spade_core.config import ScoringConfig, SpadeConfig
from spade_core.method.designer_reward import designer_rewards, env_reward_scale, late_top_up_rewards, window_inputs
from spade_core.method.learning_potential import LearningPotentialState
from spade_core.steps import design_train_step

# The columns of ``designer_rewards`` the reward stage writes, in order.
REWARD_COLUMNS = (
    "design_id",
    "env_id",
    "skill",
    "window_win_rate",
    "regret",
    "raw",
    "dropped",
    "centred",
    "scale",
    "reward",
    "train_step",
)


class WindowRewards(NamedTuple):
    """What :func:`window_rewards` returns: the rows, the learning-potential state after the window, the
    summary the stage records (rewarded, dropped, failed_prompts; with rows also scale, train_step,
    topped_up_later, broken_envs)."""

    rows: pd.DataFrame
    state: LearningPotentialState
    info: dict[str, Any]


def state_before(previous: pd.DataFrame, scoring: ScoringConfig) -> LearningPotentialState:
    """The learning-potential state before this generation: the previous generation's stored frame, or a fresh
    state when there is none (the first generation, or a previous one that rewarded nothing yet).

    >>> fresh = state_before(pd.DataFrame(), ScoringConfig())
    >>> dict(fresh.skills), fresh.gamma_fast, fresh.gamma_slow
    ({}, 0.98, 0.85)
    >>> frame = pd.DataFrame({"skill": ["logic"], "mu_fast": [0.5], "mu_slow": [0.4], "count": [1],
    ...                       "gamma_fast": [0.98], "gamma_slow": [0.85]})
    >>> state_before(frame, ScoringConfig()).skills["logic"]
    SkillEMA(mu_fast=0.5, mu_slow=0.4, count=1)
    """
    if previous.empty:
        return LearningPotentialState(scoring.lp_gamma_fast, scoring.lp_gamma_slow)
    return LearningPotentialState.from_frame(previous, scoring.lp_gamma_fast, scoring.lp_gamma_slow)


def parent_copies(
    designs: pd.DataFrame, copies: Collection[str], later: Mapping[str, int], scoring: ScoringConfig
) -> pd.DataFrame:
    """The refused parent copies to reward (``design_id``, ``env_id``, ``skill``): the designs of ``copies``
    among the generation's first designs whose final verdict is ``not_novel``, none unless
    ``scoring.parent_copy_raw`` is set.

    >>> designs = pd.DataFrame({"design_id": ["d1", "d2", "d3"], "env_id": ["e1", "e2", "e3"],
    ...                         "skill": ["logic"] * 3, "ok": [True, False, False],
    ...                         "error_type": [None, "not_novel", "not_novel"]})
    >>> parent_copies(designs, {"d2", "d3"}, {"d3": 1}, ScoringConfig(parent_copy_raw=0.0))["design_id"].tolist()
    ['d2']
    >>> len(parent_copies(designs, {"d2"}, {}, ScoringConfig()))
    0
    """
    if scoring.parent_copy_raw is None or designs.empty or not copies:
        return pd.DataFrame(columns=["design_id", "env_id", "skill"])
    refused = designs["error_type"] == "not_novel"  # the final verdict (not ok) that the novelty stage gave
    chosen = refused & designs["design_id"].isin(set(copies)) & ~designs["design_id"].isin(set(later))
    return designs.loc[chosen, ["design_id", "env_id", "skill"]].reset_index(drop=True)


def window_rewards(
    designs: pd.DataFrame,
    later: Mapping[str, int],
    episodes: pd.DataFrame,
    leaked: Callable[[], Collection[str]],
    agent_plays: Callable[[], int],
    cfg: SpadeConfig,
    gen: int,
    state: LearningPotentialState,
    copies: Collection[str] = (),
) -> WindowRewards:
    """The designer rewards of generation ``gen``'s designs over its window (see the module doc).

    Args:
        designs: the generation's designs with their final verdicts (``design_id``, ``env_id``, ``skill``,
            ``ok``; :func:`spade_core.store.verdicts.final_designs`), the later steps' top-ups among them.
        later: design_id -> the step whose top-up designed it (none without ``designer.top_up_at: steps``).
        episodes: every play of the window's K steps (``env_id``, ``condition``, ``episode_return``,
            ``error_type``, ``policy_step``).
        leaked: gives the environments whose stored hint still leaks the solution (none unless
            ``scoring.zero_leaked_regret``): no regret term.
        agent_plays: gives n_agent, the agent's no-hint plays of one step (pool size x plays per environment).
            Both are called only when some design is rewarded: a generation with nothing valid or nothing played
            reads neither its hints nor its pool.
        cfg: the run's config (K, the scoring settings, the training delay and total steps).
        gen: the generation.
        state: the learning-potential state before this generation (:func:`state_before`).
        copies: the design_ids the novelty stage refused as copies of their parent; rewarded only with
            ``scoring.parent_copy_raw`` set.

    Two valid designs of one skill and one without code, over a window of K = 2 steps; each environment has two
    no-hint plays per step and one hinted play (at step 0):

    >>> from spade_core.config import load_config
    >>> cfg = load_config(None, overrides=["training.steps_per_generation=2", "scoring.designer_reward=regret"])
    >>> designs = pd.DataFrame({"design_id": ["d1", "d2", "d3"], "env_id": ["e1", "e2", None],
    ...                         "skill": ["logic"] * 3, "ok": [True, True, False]})
    >>> plays = [(e, "no_hint", r, s) for e, rs in (("e1", [0, 0, 1, 1]), ("e2", [1, 1, 1, 1]))
    ...          for r, s in zip(rs, [0, 0, 1, 1])] + [("e1", "hint", 1.0, 0), ("e2", "hint", 1.0, 0)]
    >>> episodes = pd.DataFrame(plays, columns=["env_id", "condition", "episode_return", "policy_step"])
    >>> state = state_before(pd.DataFrame(), cfg.scoring)
    >>> rows, _, info = window_rewards(designs, {}, episodes, lambda: (), lambda: 16, cfg, 1, state)
    >>> rows[["design_id", "window_win_rate", "regret", "raw", "reward", "train_step"]].values.tolist()
    [['d1', 0.5, 1.0, 1.0, 8.0, 2], ['d2', 1.0, 0.0, 0.0, -8.0, 2]]
    >>> info["scale"], info["failed_prompts"], info["rewarded"]
    (16.0, 1, 2)
    """
    k = cfg.training.steps_per_generation
    valid = designs[designs["ok"]][["design_id", "env_id", "skill"]] if not designs.empty else designs
    failed = len(designs) - len(valid)
    first = valid[~valid["design_id"].isin(later)] if not valid.empty else valid
    if first.empty or episodes.empty:  # nothing valid (every attempt failed) or nothing played
        return WindowRewards(
            pd.DataFrame(columns=list(REWARD_COLUMNS)), state, {"rewarded": 0, "dropped": 0, "failed_prompts": failed}
        )
    window = window_inputs(episodes[episodes["env_id"].isin(set(valid["env_id"]))])
    broken = sorted(window.loc[window["n_no_hint"] == 0, "env_id"])  # no usable no-hint play: unrewarded
    usable = window[window["n_no_hint"] > 0].copy()
    usable.loc[usable["env_id"].isin(leaked()), "r_hint"] = float("nan")  # a hint that still leaks: no regret
    envs = first.merge(usable, on="env_id", how="inner")
    refused = parent_copies(designs, copies, later, cfg.scoring)
    n_agent = agent_plays()
    n_designer = len(envs) + len(refused)
    scale = env_reward_scale(n_agent, n_designer, k, cfg.scoring.reward_scale_cap) if len(envs) else 0.0
    frame, new_state = designer_rewards(envs, cfg.scoring.designer_reward, cfg.scoring, scale, state, refused)
    frame = frame.assign(train_step=design_train_step(cfg, gen))
    late = valid[valid["design_id"].isin(later)].merge(usable, on="env_id", how="inner")
    if not late.empty:  # a later step's top-ups: no hint, reward 0, trained D steps after that step
        late = late_top_up_rewards(late).assign(
            train_step=[design_train_step(cfg, gen, later[d]) for d in late["design_id"]]
        )
        frame = pd.concat([frame, late], ignore_index=True)
    rows = frame.rename(columns={"win_rate": "window_win_rate"}).assign(scale=scale)[list(REWARD_COLUMNS)]
    dropped = rows["dropped"].astype(bool)
    info = {
        "rewarded": int((~dropped).sum()),
        "dropped": int(dropped.sum()),
        "failed_prompts": failed,
        "scale": scale,
        "train_step": design_train_step(cfg, gen),
        "topped_up_later": len(late),
        "parent_copies": len(refused),
        "broken_envs": broken,
    }
    return WindowRewards(rows, new_state or state, info)
