"""scoring.zero_leaked_regret through the score stage: on (ours, the default) an environment whose stored hint
still leaks gets regret 0; off (the paper presets: the authors check no leak) it gets r_hint - r_no_hint."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from samples import frame, run_body, write_stage

from spade_core.config import load_config
from spade_core.pipeline.context import GenerationContext
from spade_core.store.artifacts import Store

ENV = "env-leaky"


def _scored(tmp_path: Path, *overrides: str) -> pd.Series:
    """The env_scores row of one replayed environment (no designs: a fixed pool) whose hint leaks; its
    hinted plays both won and its no-hint plays half won."""
    cfg = load_config("tiny", overrides=[f"store.root={tmp_path}", "designer.fixed_pool=seeds", *overrides])
    ctx = GenerationContext(cfg, Store(str(tmp_path)), "leak", 1)
    pool = frame("pool", 1).assign(env_id=ENV, design_id=None, source="replay")
    episodes = frame("episodes", 4).assign(
        env_id=ENV,
        condition=["no_hint", "no_hint", "hint", "hint"],
        episode_return=[1.0, 0.0, 1.0, 1.0],
        error_type=None,
    )
    hints = frame("hints", 1).assign(env_id=ENV, leaks_solution=True)
    write_stage(ctx.store, ctx.run_id, ctx.gen, "pool", {"pool": pool})
    write_stage(ctx.store, ctx.run_id, ctx.gen, "hint", {"hints": hints})
    write_stage(ctx.store, ctx.run_id, ctx.gen, "rollout-s0", {"episodes": episodes})
    run_body(ctx, "score")  # the stage calls no model
    return ctx.store.read_table("env_scores", ctx.run_id, ctx.gen).iloc[0]


def test_a_leaking_hint_zeroes_the_regret_by_default(tmp_path: Path) -> None:
    row = _scored(tmp_path)
    assert (bool(row.hint_leaked), row.regret) == (True, 0.0)


def test_the_paper_setting_keeps_the_regret_of_a_leaking_hint(tmp_path: Path) -> None:
    row = _scored(tmp_path, "scoring.zero_leaked_regret=false")
    assert (bool(row.hint_leaked), row.r_hint, row.regret) == (False, 1.0, pytest.approx(0.5))


def test_the_designer_reward_keeps_the_regret_of_a_leaking_hint_in_the_paper_setting(tmp_path: Path) -> None:
    from test_reward_stage import _rewards  # its generation: e2's hinted mean 0.5, first-step no-hint mean 0

    variant = "scoring.designer_reward=regret"
    _, zeroed = _rewards(tmp_path / "ours", variant, leaked={"e2"})
    _, kept = _rewards(tmp_path / "paper", variant, "scoring.zero_leaked_regret=false", leaked={"e2"})
    assert (zeroed.loc["d2", "raw"], kept.loc["d2", "raw"]) == (0.0, 0.5)
