"""training.global_batch_size: the authors' fixed batch of 192 samples per step (spade/slime/spade_rollout.py
663-666, 821-860; spade/core/orchestrator.py:2382): every environment is played ceil(192 / n) times, the
designer's samples come first and the agent's tail is trimmed to fit, a short batch averages over 192 only
with a KL term. Their numbers, our code."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from samples import frame, write_stage

from spade_core.config import load_config
from spade_core.pipeline.context import GenerationContext
from spade_core.play.plays import plan
from spade_core.store.artifacts import Store
from spade_core.train.data import AGENT, DESIGNER, Sample, make_batch
from spade_core.train.step import loss_denominator


def _plays_per_env(tmp_path: Path, envs: int, *overrides: str) -> set[int]:
    cfg = load_config("tiny", overrides=[f"store.root={tmp_path}", *overrides])
    ctx = GenerationContext(cfg, Store(str(tmp_path)), "batch", 1)
    pool = frame("pool", envs).assign(env_id=[f"e{i:02d}" for i in range(envs)])
    write_stage(ctx.store, ctx.run_id, ctx.gen, "pool", {"pool": pool})
    specs = plan(ctx.play_run(), ctx.pool(), pd.DataFrame(columns=["env_id", "hint"]), len(ctx.pool()))
    counts = pd.Series([s.env_id for s in specs if s.condition == "no_hint"]).value_counts()
    assert len(counts) == envs
    return set(counts)


def test_each_environment_is_played_ceil_192_over_n_times(tmp_path: Path) -> None:
    assert _plays_per_env(tmp_path / "a", 24, "training.global_batch_size=192") == {8}
    # Fewer valid environments than 24: more plays each, so the batch is still filled (20 x 10 = 200 >= 192).
    assert _plays_per_env(tmp_path / "b", 20, "training.global_batch_size=192") == {10}
    assert _plays_per_env(tmp_path / "c", 20, "rollout.plays_no_hint=8") == {8}  # ours: rollout.plays_no_hint


def _samples(designer: int, agent: int) -> list[Sample]:
    d = [Sample(DESIGNER, f"designer:s{i % 3}", [], [1], [1], 0.0, source_id=f"d{i:02d}") for i in range(designer)]
    a = [Sample(AGENT, f"agent:e{i // 8:02d}", [], [1], [1], 0.0, source_id=f"p{i:03d}") for i in range(agent)]
    return a + d  # any order in: the batch puts the designer first


def test_a_design_step_trains_24_designs_and_168_plays() -> None:
    batch = make_batch(_samples(24, 192), size=192)
    roles = [s.role for s in batch.samples()]
    assert len(roles) == 192 and roles[:24] == [DESIGNER] * 24 and roles[24:] == [AGENT] * 168
    assert batch.trimmed == 24  # the last three environments' plays
    assert {s.group for s in batch.samples(AGENT)} == {f"agent:e{i:02d}" for i in range(21)}
    assert len(make_batch(_samples(24, 192)).samples()) == 216  # without the setting: every sample


def test_a_short_batch_averages_over_its_real_samples_unless_a_kl_term_counts_the_pads() -> None:
    batch = make_batch(_samples(0, 150), size=192)
    assert len(batch.samples()) == 150 and batch.trimmed == 0  # the trainer pads with inert rows
    games = load_config("paper-games")  # KL 0: the authors rescale the real rewards by 192 / n_real
    assert loss_denominator(games, batch, dropped=0) == 150
    tool_use = load_config("paper-tool-use")  # KL 0.005: no rescale, Slime divides by 192
    assert loss_denominator(tool_use, batch, dropped=0) == 192
