"""Reward (docs/DESIGN.md §7 step 7): the designer's reward of each valid design, over the whole window.

Runs after the generation's last step, when every play of the window exists:

- window win rate = the mean return of every no-hint play of the environment over the K steps;
- regret = mean(hinted plays) - mean(no-hint plays at the first step); no regret term (0) for an
  environment whose hint still leaked after its rewrites (``scoring.zero_leaked_regret``, on by default);
- the variant's raw value (``scoring.designer_reward``); a raw value < 0 is dropped; the rest are centred
  on their skill's mean (no std division) and multiplied by ``min(n_agent / n_designer · K, cap)``, with
  n_agent the no-hint plays of one step and n_designer the valid designs (counted before the drop);
- ``learning_potential`` continues the EMA state stored by the previous generation's reward stage.

The rows go to ``designer_rewards`` with ``train_step`` = the generation's first step + D
(``designer.training_delay``, default K); :func:`spade_core.train.step.build_batch` trains them at that step.
With ``training.total_steps`` a design due after the run's last step is trained at that step instead, as the
authors flush their buffer at the final rollout (:func:`spade_core.steps.design_train_step`). A design that a
later step's top-up made (``designer.top_up_at: steps``, stage ``refill-s{k}``) had no hint: reward 0, kept,
trained at first step + k + D (:func:`~spade_core.method.designer_reward.late_top_up_rewards`); it counts in
no skill mean and not in the scale. The pure functions live in :mod:`spade_core.method.designer_reward`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.llm.base import Generator
from spade_core.method.designer_reward import designer_rewards, env_reward_scale, late_top_up_rewards, window_inputs
from spade_core.method.learning_potential import LearningPotentialState
from spade_core.pipeline.context import GenerationContext
from spade_core.play.hints import leaked_env_ids
from spade_core.play.plays import no_hint_plays
from spade_core.stage_names import instance_name
from spade_core.steps import design_train_step, top_up_steps
from spade_core.store.verdicts import final_designs

EPISODE_COLUMNS = ["env_id", "condition", "episode_return", "error_type", "policy_step"]
COLUMNS = [
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
]


def _lp_state(ctx: GenerationContext) -> LearningPotentialState:
    scoring = ctx.cfg.scoring
    frame = pd.DataFrame()
    if ctx.gen > 1:
        frame = ctx.read_previous("designer_lp_state", ctx.stage)  # this stage's own file there
        frame = frame.drop(columns=["run_id", "gen"], errors="ignore")
    if frame.empty:  # the first generation, or a previous one that rewarded nothing yet
        return LearningPotentialState(scoring.lp_gamma_fast, scoring.lp_gamma_slow)
    return LearningPotentialState.from_frame(frame, scoring.lp_gamma_fast, scoring.lp_gamma_slow)


def made_later(ctx: GenerationContext) -> dict[str, int]:
    """design_id -> the step whose top-up designed it (``designer.top_up_at: steps``; none otherwise)."""
    made: dict[str, int] = {}
    for step in top_up_steps(ctx.cfg):
        frame = ctx.read("designs", [instance_name("refill", step)], ["design_id"])
        made.update({str(d): step for d in frame["design_id"]})
    return made


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    cfg = ctx.cfg
    k = cfg.training.steps_per_generation
    later = made_later(ctx)
    refills = [instance_name("refill", s) for s in top_up_steps(cfg)]
    designs = final_designs(ctx.store, ctx.run_id, ctx.gen, steps=refills)
    valid = designs[designs["ok"]][["design_id", "env_id", "skill"]] if not designs.empty else designs
    steps = [instance_name("rollout", s) for s in range(k)]
    episodes = ctx.read("episodes", steps, EPISODE_COLUMNS)
    state = _lp_state(ctx)
    first = valid[~valid["design_id"].isin(later)] if not valid.empty else valid
    if first.empty or episodes.empty:  # nothing valid (every attempt failed) or nothing played
        ctx.write("designer_rewards", pd.DataFrame(columns=COLUMNS))
        ctx.write("designer_lp_state", state.to_frame())
        return {"rewarded": 0, "dropped": 0, "failed_prompts": len(designs) - len(valid)}
    window = window_inputs(episodes[episodes["env_id"].isin(set(valid["env_id"]))])
    broken = sorted(window.loc[window["n_no_hint"] == 0, "env_id"])  # no usable no-hint play: unrewarded
    usable = window[window["n_no_hint"] > 0].copy()
    if cfg.scoring.zero_leaked_regret:  # a hint that still leaks: no regret term
        leaked = leaked_env_ids(ctx.read("hints", ["hint"], ["env_id", "leaks_solution"]))
        usable.loc[usable["env_id"].isin(leaked), "r_hint"] = float("nan")
    envs = first.merge(usable, on="env_id", how="inner")
    pool = ctx.pool()
    plays = len(pool) * no_hint_plays(cfg, len(pool))  # the agent's samples per step
    scale = env_reward_scale(plays, len(envs), k, cfg.scoring.reward_scale_cap) if len(envs) else 0.0
    frame, new_state = designer_rewards(envs, cfg.scoring.designer_reward, cfg.scoring, scale, state)
    frame = frame.assign(train_step=design_train_step(cfg, ctx.gen))
    late = valid[valid["design_id"].isin(later)].merge(usable, on="env_id", how="inner")
    if not late.empty:  # a later step's top-ups: no hint, reward 0, trained D steps after that step
        late = late_top_up_rewards(late).assign(
            train_step=[design_train_step(cfg, ctx.gen, later[d]) for d in late["design_id"]]
        )
        frame = pd.concat([frame, late], ignore_index=True)
    out = frame.rename(columns={"win_rate": "window_win_rate"}).assign(scale=scale)
    ctx.write("designer_rewards", out[COLUMNS])
    ctx.write("designer_lp_state", (new_state or state).to_frame())
    return {
        "rewarded": int((~out["dropped"].astype(bool)).sum()),
        "dropped": int(out["dropped"].astype(bool).sum()),
        "failed_prompts": len(designs) - len(valid),
        "scale": scale,
        "train_step": design_train_step(cfg, ctx.gen),
        "topped_up_later": len(late),
        "broken_envs": broken,
    }
