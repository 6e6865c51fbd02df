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
The pure functions live in :mod:`spade_core.method.designer_reward`.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.config import SpadeConfig
from spade_core.llm.base import Generator
from spade_core.method.designer_reward import designer_rewards, env_reward_scale, window_inputs
from spade_core.method.learning_potential import LearningPotentialState
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.stages.rollout import no_hint_plays
from spade_core.play.hints import leaked_env_ids
from spade_core.stage_names import instance_name
from spade_core.steps import designer_delay

NAME = "reward"
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


def applies(cfg: SpadeConfig, gen: int) -> bool:
    """Designs are rewarded unless the run plays a fixed pool."""
    return not cfg.designer.fixed_pool


def _lp_state(ctx: GenerationContext) -> LearningPotentialState:
    scoring = ctx.cfg.scoring
    frame = pd.DataFrame()
    if ctx.gen > 1:
        frame = ctx.read_previous("designer_lp_state", NAME)
        frame = frame.drop(columns=["run_id", "gen"], errors="ignore")
    if frame.empty:  # the first generation, or a previous one that rewarded nothing yet
        return LearningPotentialState(scoring.lp_gamma_fast, scoring.lp_gamma_slow)
    return LearningPotentialState.from_frame(frame, scoring.lp_gamma_fast, scoring.lp_gamma_slow)


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    cfg = ctx.cfg
    k = cfg.training.steps_per_generation
    designs = ctx.final_designs()
    valid = designs[designs["ok"]][["design_id", "env_id", "skill"]] if not designs.empty else designs
    steps = [instance_name("rollout", s) for s in range(k)]
    episodes = ctx.read("episodes", steps, EPISODE_COLUMNS)
    state = _lp_state(ctx)
    if valid.empty or episodes.empty:  # nothing valid (every attempt failed) or nothing played
        ctx.write("designer_rewards", pd.DataFrame(columns=COLUMNS))
        ctx.write("designer_lp_state", state.to_frame())
        return {"rewarded": 0, "dropped": 0, "failed_prompts": len(designs) - len(valid)}
    window = window_inputs(episodes[episodes["env_id"].isin(set(valid["env_id"]))])
    broken = sorted(window.loc[window["n_no_hint"] == 0, "env_id"])  # no usable no-hint play: unrewarded
    window = window[window["n_no_hint"] > 0]
    if cfg.scoring.zero_leaked_regret:  # a hint that still leaks: no regret term
        leaked = leaked_env_ids(ctx.read("hints", ["hint"], ["env_id", "leaks_solution"]))
        window.loc[window["env_id"].isin(leaked), "r_hint"] = float("nan")
    envs = valid.merge(window, on="env_id", how="inner")
    pool = ctx.pool()
    plays = len(pool) * no_hint_plays(cfg, len(pool))  # the agent's samples per step
    scale = env_reward_scale(plays, len(envs), k, cfg.scoring.reward_scale_cap)
    frame, new_state = designer_rewards(envs, cfg.scoring.designer_reward, cfg.scoring, scale, state)
    delay = designer_delay(cfg)
    out = frame.rename(columns={"win_rate": "window_win_rate"}).assign(scale=scale, train_step=ctx.first_step + delay)
    ctx.write("designer_rewards", out[COLUMNS])
    ctx.write("designer_lp_state", (new_state or state).to_frame())
    return {
        "rewarded": int((~out["dropped"]).sum()),
        "dropped": int(out["dropped"].sum()),
        "failed_prompts": len(designs) - len(valid),
        "scale": scale,
        "train_step": ctx.first_step + delay,
        "broken_envs": broken,
    }
