"""Score (docs/DESIGN.md §7 step 7): win rate and regret of every environment and design, from step 0's plays.

The stage reads the designs with their final verdicts (none with ``designer.fixed_pool``), the pool, step 0's
plays and the leaking hints (with ``scoring.zero_leaked_regret``);
:func:`~spade_core.method.scoring.scored_envs` chooses the rows (each design with code, then the pool's other
environments) and :func:`~spade_core.method.scoring.score_environments` scores them into ``env_scores``. The
designer's reward is the reward stage's (``designer_rewards``, over the whole window of steps).
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from spade_core.llm.base import Generator
from spade_core.method.scoring import broken_env_ids, score_environments, scored_envs
from spade_core.pipeline.context import GenerationContext


def run(ctx: GenerationContext, model: Generator) -> dict[str, Any]:
    if ctx.cfg.designer.fixed_pool:
        designs = pd.DataFrame(columns=["design_id", "skill", "env_id", "ok"])
    else:
        designs = ctx.final_designs()
    # The pool's first plays (step 0: the hinted plays and the first no-hint plays) give win rate and regret.
    episodes = ctx.first_plays()
    envs = scored_envs(designs, ctx.pool())
    scores = score_environments(episodes, envs, ctx.cfg.scoring, leaked=ctx.leaked_envs())
    ctx.write("env_scores", scores)
    # A valid environment whose no-hint plays all broke has no win rate: no row, listed here.
    return {"rows": len(scores), "broken_envs": broken_env_ids(episodes)}
