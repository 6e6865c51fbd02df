"""Reward (docs/DESIGN.md §7 step 7): the designer's reward of each valid design, over the whole window.

Runs after the generation's last step, when every play of the window exists. The stage reads the designs with
their final verdicts (the later steps' top-ups, ``refill-s{k}``, among them), every play of the K steps and the
learning-potential state the previous generation's reward stage stored (with ``scoring.parent_copy_raw`` set,
also the novelty stage's refusals of parent copies), and hands the library the leaking hints
(with ``scoring.zero_leaked_regret``) and the agent's plays per step to read when some design is rewarded;
:func:`spade_core.method.window_rewards.window_rewards` computes the rows (the formulas and which designs they
apply to are there), and the stage writes them to ``designer_rewards`` with the new state to
``designer_lp_state``. :func:`spade_core.train.step.build_batch` trains the rows at their ``train_step``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from spade_core.llm.base import Generator
from spade_core.method.designer_reward import PLAY_COLUMNS
from spade_core.method.window_rewards import state_before, window_rewards
from spade_core.pipeline.context import GenerationContext
from spade_core.play.plays import no_hint_plays
from spade_core.stage_names import instance_name
from spade_core.steps import top_up_steps
from spade_core.store.verdicts import PARENT_CHECKS


def made_later(ctx: GenerationContext) -> dict[str, int]:
    """design_id -> the step whose top-up designed it (``designer.top_up_at: steps``; none otherwise)."""
    made: dict[str, int] = {}
    for step in top_up_steps(ctx.cfg):
        frame = ctx.read("designs", [instance_name("refill", step)], ["design_id"])
        made.update({str(d): step for d in frame["design_id"]})
    return made


def parent_copy_ids(ctx: GenerationContext) -> set[str]:
    """The designs the novelty stage refused as copies of their parent (checks ``parent`` and ``parameters``);
    read only with ``scoring.parent_copy_raw`` set, the only case that rewards them."""
    if ctx.cfg.scoring.parent_copy_raw is None:
        return set()
    rows = ctx.read("novelty", ["novelty"], ["design_id", "novel", "check"])
    refused = ~rows["novel"].astype(bool) & rows["check"].isin(PARENT_CHECKS)
    return {str(d) for d in rows.loc[refused, "design_id"]}


def agent_plays(ctx: GenerationContext) -> int:
    """The agent's no-hint plays of one step: the pool's environments times each one's plays."""
    size = len(ctx.pool())
    return size * no_hint_plays(ctx.cfg, size)


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    cfg = ctx.cfg
    refills = [instance_name("refill", s) for s in top_up_steps(cfg)]
    designs = ctx.final_designs(steps=refills)
    steps = [instance_name("rollout", s) for s in range(cfg.training.steps_per_generation)]
    episodes = ctx.read("episodes", steps, list(PLAY_COLUMNS))
    previous = ctx.read_previous("designer_lp_state", ctx.stage)  # this stage's own file of generation gen - 1
    state = state_before(previous, cfg.scoring)
    rows, new_state, info = window_rewards(
        designs,
        made_later(ctx),
        episodes,
        ctx.leaked_envs,
        partial(agent_plays, ctx),
        cfg,
        ctx.gen,
        state,
        parent_copy_ids(ctx),
    )
    ctx.write("designer_rewards", rows)
    ctx.write("designer_lp_state", new_state.to_frame())
    return info
