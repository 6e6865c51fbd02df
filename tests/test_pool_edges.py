"""The batch's filling and the pool's edges, the authors' way and ours (docs/method.md, the paper presets' table):

- ``training.batch_fill``: a short step repeats its real plays up to 192 minus the step's new designs before
  inert padding (theirs, ``orchestrator.py:2607-2620``), or is padded with inert rows only (ours);
- ``designer.top_up_at``: the pool is topped up at each later step while it has fewer games than prompts, and
  those designs get no hint and a designer reward of 0 (theirs, ``orchestrator.py:2299-2301``,
  ``env_rewards.py:197-205``), or once before the pool is played (ours, ``tests/test_topup.py``);
- ``training.total_steps``: designs due after the run's last step are trained at it (theirs,
  ``spade_rollout.py:557-561``), or never (ours).

The top-up designs are validated in real jails; a scripted designer decides which replies hold working code.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from samples import ROWS, as_stage, frame, validated_generation, write_stage
from test_reward_stage import _store_generation

from spade_core.config import SpadeConfig, load_config
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import Completion
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.registry import BY_NAME, stages_for
from spade_core.pipeline.stage import Stage, execute
from spade_core.pipeline.stages import pool, reward
from spade_core.pipeline.stages.topup import refill
from spade_core.play.plays import plan
from spade_core.steps import design_train_step, due_generations, top_up_steps
from spade_core.store.artifacts import Store
from spade_core.train.data import AGENT, DESIGNER, Sample, fill_with_duplicates, make_batch
from spade_core.train.step import build_batch, due_designs

SEEDS = {e.skill: e.code for e in load_seed_envs()}


# -- training.batch_fill --------------------------------------------------------------------------------------


def _plays(n: int, per_env: int = 8) -> list[Sample]:
    return [
        Sample(AGENT, f"agent:e{i // per_env:02d}", [], [1], [1], float(i % 2), 0.5 - i % 2, source_id=f"p{i:03d}")
        for i in range(n)
    ]


def test_theirs_repeats_real_plays_up_to_the_batch_and_cuts_the_repeats_first() -> None:
    plays = _plays(150)
    filled = make_batch(fill_with_duplicates(plays, 192), size=192)
    assert len(filled.samples()) == 192 and filled.duplicated == 42 and filled.trimmed == 0
    repeats = filled.samples()[150:]  # after every real play, in the order they were played
    assert all(s.duplicate for s in repeats) and [s.source_id for s in repeats] == [p.source_id for p in plays[:42]]
    assert [s.advantage for s in repeats] == [p.advantage for p in plays[:42]]  # a repeat keeps its advantage
    # 24 designs due and 20 new designs at this step: the plays fill 192 - 20 = 172, the surplus of 4 is cut
    # from the repeats, never from a real play or a design.
    designs = [Sample(DESIGNER, f"designer:s{i % 3}", [], [1], [1], 0.0, source_id=f"d{i:02d}") for i in range(24)]
    batch = make_batch(designs + fill_with_duplicates(plays, 192 - 20), size=192)
    assert [s.role for s in batch.samples()[:24]] == [DESIGNER] * 24 and batch.trimmed == 4
    assert sum(not s.duplicate for s in batch.samples(AGENT)) == 150 and batch.duplicated == 18


def test_ours_pads_with_inert_rows_only() -> None:
    batch = make_batch(_plays(150), size=192)
    assert len(batch.samples()) == 150 and batch.duplicated == 0  # the trainer adds 42 inert rows


def _stored_step(tmp_path: Path, step: int, plays: int, envs: int, *overrides: str) -> Store:
    """A generation's pool of ``envs`` designed environments and ``plays`` no-hint plays at step ``step``."""
    store = Store(str(tmp_path))
    pool_rows = frame("pool", envs).assign(env_id=[f"e{i:02d}" for i in range(envs)], design_id=None)
    write_stage(store, "fill", 1, "pool", {"pool": pool_rows})
    episodes = frame("episodes", plays).assign(
        env_id=[f"e{i % envs:02d}" for i in range(plays)], episode_return=[float(i % 3 == 0) for i in range(plays)]
    )
    write_stage(store, "fill", 1, f"rollout-s{step}", {"episodes": episodes})
    return store


@pytest.mark.parametrize(
    ("fill", "step", "expected"), [("duplicate", 1, 192), ("duplicate", 0, 192 - 20), ("pad", 1, 150)]
)
def test_the_stored_step_is_filled_as_the_setting_says(tmp_path: Path, fill: str, step: int, expected: int) -> None:
    cfg = load_config("paper-games", overrides=[f"training.batch_fill={fill}", f"store.root={tmp_path}"])
    store = _stored_step(tmp_path, step, 150, 20)
    batch = build_batch(cfg, store, "fill", 1, step, tokenizer=None)
    # Step 0 of a generation made its pool's 20 designs: the authors leave room for them (num_env).
    assert len(batch.samples(AGENT)) == expected and batch.duplicated == expected - 150


def test_repeating_needs_a_batch_size() -> None:
    for fill in ("duplicate", "random"):
        with pytest.raises(Exception, match=rf"training\.batch_fill {fill} needs training\.global_batch_size"):
            load_config("tiny", overrides=[f"training.batch_fill={fill}"])


@pytest.mark.parametrize(("fill", "agent_samples"), [("random", 256), ("pad", 200)])
def test_the_fixed_rlve_baseline_fills_a_short_batch_with_random_copies(
    tmp_path: Path, fill: str, agent_samples: int
) -> None:
    cfg = load_config("paper-fixed-rlve", overrides=[f"training.batch_fill={fill}", f"store.root={tmp_path}"])
    store = _stored_step(tmp_path, 0, 200, 16)
    batch = build_batch(cfg, store, "fill", 1, 0, tokenizer=None)
    plays = batch.samples(AGENT)
    assert len(plays) == agent_samples and batch.duplicated == agent_samples - 200
    copies = [s.source_id for s in plays if s.duplicate]
    real = {s.source_id for s in plays if not s.duplicate}
    assert set(copies) <= real and len(real) == 200
    if fill == "random":  # drawn at random, with replacement: not the first 56 plays in turn
        assert copies != sorted(real)[: len(copies)] and len(set(copies)) < len(copies)
        assert [s.source_id for s in build_batch(cfg, store, "fill", 1, 0, tokenizer=None).samples(AGENT)] == [
            s.source_id for s in plays
        ]  # the same batch when the step is trained again


# -- designer.top_up_at ---------------------------------------------------------------------------------------


class Designer:
    """Replies of call ``i``: ``plans[i][j]`` is a seed skill whose module the j-th request gets, or None."""

    model_ref = "scripted:designer"
    supports_token_prompts = False

    def __init__(self, plans: list[list[str | None]]) -> None:
        self.plans, self.calls = plans, []  # type: ignore[var-annotated]

    def generate(self, requests, params):  # type: ignore[no-untyped-def]
        plan_ = self.plans[len(self.calls)]
        self.calls.append(requests)
        return [
            Completion(text=f"```python\n{SEEDS[skill]}```" if skill else "no code", token_ids=[1], logprobs=[-0.5])
            for skill in plan_[: len(requests)]
        ]

    def close(self) -> None:
        pass


def test_theirs_tops_the_pool_up_at_each_later_step_and_ours_before_it() -> None:
    theirs = [s.name for s in stages_for(load_config("paper-games"), 1)]
    assert theirs[:5] == ["documents", "design", "validate", "pool", "hint"]  # no top-up before the pool
    assert [n for n in theirs if n.startswith("refill")] == ["refill-s1", "refill-s2", "refill-s3"]
    by_name = {s.name: s for s in stages_for(load_config("paper-games"), 1)}
    assert "refill-s2" in by_name["rollout-s2"].inputs and "train-s1" in by_name["refill-s2"].inputs
    assert theirs.index("refill-s2") < theirs.index("rollout-s2")
    ours = [s.name for s in stages_for(load_config("paper-games", overrides=["designer.top_up_at=pool"]), 1)]
    assert ours[:6] == ["documents", "design", "validate", "topup", "pool", "hint"]
    assert not any(n.startswith("refill") for n in ours)
    one = load_config("paper-games", overrides=["designer.top_up_rounds=1"])
    assert top_up_steps(one) == (1,)
    assert "refill-s2" not in {x for s in stages_for(one, 1) for x in s.inputs}  # no top-up to wait for
    assert top_up_steps(load_config("tiny")) == ()


def _at_step(ctx: GenerationContext, name: str, step: int, body) -> object:  # type: ignore[no-untyped-def]
    """Run ``body`` as the per-step stage ``name`` in step ``step``, with its marker."""
    out: list[object] = []
    declared = BY_NAME[name]
    stage = Stage(
        f"{name}-s{step}",
        lambda run, model: out.append(body(run)),
        reads=declared.reads,
        writes=declared.writes,
        step=step,
    )
    execute(stage, ctx, {})
    return out[0]


@pytest.mark.usefixtures("jail_processes_checked")
def test_a_later_step_designs_what_the_pool_lacks_with_no_hint_and_reward_zero(tmp_path: Path) -> None:
    # design: one valid of two; step 1's top-up: the missing one works; step 2 finds the pool full.
    designer = Designer([["optimization", None], ["data_retrieval"]])
    ctx = validated_generation(
        tmp_path,
        designer,
        "late",
        "designer.documents_per_generation=2",
        "designer.top_up_rounds=2",
        "designer.top_up_at=steps",
        "training.steps_per_generation=3",
        "training.global_batch_size=6",
        "rollout.plays_hint=2",
        "rollout.replay_envs=0",
        "rollout.starter_envs=0",
    )
    as_stage(ctx, "pool", lambda run: pool.run(run, None))
    first = ctx.pool()
    assert len(first) == 1
    info = _at_step(ctx, "refill", 1, lambda run: refill(run, designer))
    assert info["designed"] == 1 and info["added"] == 1 and len(designer.calls) == 2
    info2 = _at_step(ctx, "refill", 2, lambda run: refill(run, designer))
    assert info2["designed"] == 0 and len(designer.calls) == 2  # the pool is full: no model call
    step1 = ctx.execution("rollout-s1", step=1, reads=("pool", "hints"))
    grown = step1.step_pool()
    assert len(grown) == 2 and grown["env_id"].iloc[0] == first["env_id"].iloc[0]
    assert len(ctx.execution("rollout-s0", step=0, reads=("pool",)).step_pool()) == 1
    # Step 1 plays both environments ceil(6 / 2) = 3 times; the new one has no hint, so no hinted play, and
    # no hinted play happens after step 0 anyway.
    hints = pd.DataFrame({"env_id": list(grown["env_id"]), "hint": ["look", "look"]})
    specs = plan(step1.play_run(), grown, hints, len(grown))
    assert sorted(pd.Series([s.env_id for s in specs]).value_counts()) == [3, 3]
    assert {s.condition for s in specs} == {"no_hint"}
    # The designs the top-up made: reward 0, kept, trained D steps after step 1 (first step 0 + 1 + D = 4).
    late = ctx.store.read_table("designs", "late", 1, stages=["refill-s1"])
    assert len(late) == 1 and set(late["policy_step"]) == {1}  # designed by the checkpoint step 1 plays
    episodes = []
    for step, envs in ((0, first), (1, grown), (2, grown)):
        for e in envs["env_id"]:
            row = ROWS["episodes"] | {"env_id": e, "condition": "no_hint", "episode_return": 1.0}
            episodes.append((step, row | {"episode_id": f"{e}-{step}"}))
    hinted = ROWS["episodes"] | {"env_id": first["env_id"].iloc[0], "condition": "hint", "episode_id": "h"}
    episodes.append((0, hinted))
    for step in range(3):
        rows = pd.DataFrame([r for s, r in episodes if s == step]).assign(policy_step=step)
        write_stage(ctx.store, "late", 1, f"rollout-s{step}", {"episodes": rows})
    write_stage(
        ctx.store, "late", 1, "hint", {"hints": pd.DataFrame([ROWS["hints"] | {"env_id": first["env_id"].iloc[0]}])}
    )
    summary = as_stage(ctx, "reward", lambda run: reward.run(run, None))
    rewards = ctx.store.read_table("designer_rewards", "late", 1, stages=["reward"]).set_index("design_id")
    late_id = late["design_id"].iloc[0]
    assert summary["topped_up_later"] == 1 and summary["rewarded"] == 2
    assert rewards.loc[late_id, ["raw", "centred", "reward"]].tolist() == [0.0, 0.0, 0.0]
    assert not rewards.loc[late_id, "dropped"] and rewards.loc[late_id, "train_step"] == 1 + 3
    assert set(rewards.drop(index=late_id)["train_step"]) == {3}  # the pool's own designs: first step + D


# -- training.total_steps -------------------------------------------------------------------------------------


def test_theirs_trains_the_last_designs_at_the_last_step() -> None:
    cfg = load_config("paper-games")  # K = D = 4, 400 steps
    assert design_train_step(cfg, 100) == 399 and design_train_step(cfg, 99) == 396
    assert design_train_step(cfg, 99, made_at=3) == 399 and due_generations(cfg, 399) == [99, 100]
    names = [s.name for s in stages_for(cfg, 100)]  # the generation that holds step 399
    assert names[-2:] == ["reward", "train-s3"]  # its reward first: the last update trains its designs
    assert "reward" in {s.name: s for s in stages_for(cfg, 100)}["train-s3"].inputs
    before = {s.name: s for s in stages_for(cfg, 99)}
    assert "reward" not in before["train-s3"].inputs and [*before][-1] == "reward"
    ours = load_config("paper-games", overrides=["training.total_steps=null"])
    assert design_train_step(ours, 100) == 400 and due_generations(ours, 399) == [99]
    assert "reward" not in {s.name: s for s in stages_for(ours, 100)}["train-s3"].inputs


@pytest.mark.parametrize(("total", "trained_at"), [(4, 3), (None, 4)])
def test_the_last_generations_designs_are_due_at_the_last_step_or_never(
    tmp_path: Path, total: int | None, trained_at: int
) -> None:
    # tiny: K = D = 2. Generation 2 holds steps 2 and 3; with 4 steps in all its designs train at step 3.
    overrides = [f"store.root={tmp_path}", "rollout.plays_no_hint=2", f"training.total_steps={total or 'null'}"]
    cfg = load_config("tiny", overrides=overrides)
    store = Store(str(tmp_path))
    _store_generation(store, "r", 2)
    as_stage(GenerationContext(cfg, store, "r", 2), "reward", lambda run: reward.run(run, None))
    rewards = store.read_table("designer_rewards", "r", 2, stages=["reward"])
    assert set(rewards["train_step"]) == {trained_at}
    due = due_designs(cfg, store, "r", 3)
    assert sorted(due.get("design_id", [])) == (["d1", "d2", "d3"] if total else [])


# -- training.delayed_designs ---------------------------------------------------------------------------------


def _two_rewarded_generations(tmp_path: Path, delayed: str, *later: str) -> tuple[SpadeConfig, Store]:
    """Two rewarded generations of tiny (K = D = 2, 4 steps): generation 1's designs are due at step 2
    (generation 2's first step), generation 2's at the run's last step, 3 (the flush). Returns the config with
    ``later`` applied on top, for the train step."""
    overrides = [f"store.root={tmp_path}", "rollout.plays_no_hint=2", "training.total_steps=4"]
    overrides.append(f"training.delayed_designs={delayed}")
    cfg = load_config("tiny", overrides=overrides)
    store = Store(str(tmp_path))
    for gen in (1, 2):
        _store_generation(store, "r", gen)
        as_stage(GenerationContext(cfg, store, "r", gen), "reward", lambda run: reward.run(run, None))
    return load_config("tiny", overrides=[*overrides, *later]), store


@pytest.mark.parametrize("delayed", ["ours", "authors"])
def test_the_authors_train_delayed_designs_only_at_a_step_that_made_designs(tmp_path: Path, delayed: str) -> None:
    cfg, store = _two_rewarded_generations(tmp_path, delayed)
    # step 2 made generation 2's pool: generation 1's designs are trained either way
    assert sorted(due_designs(cfg, store, "r", 2)["design_id"]) == ["d1", "d2", "d3"]
    # step 3, the run's last, made no design: the authors' loop never reaches its final flush
    flushed = sorted(due_designs(cfg, store, "r", 3).get("design_id", []))
    assert flushed == (["d1", "d2", "d3"] if delayed == "ours" else [])


def test_under_the_authors_timing_a_step_whose_top_up_added_a_design_trains_the_delayed_ones(tmp_path: Path) -> None:
    cfg, store = _two_rewarded_generations(tmp_path, "authors", "designer.top_up_at=steps", "designer.top_up_rounds=1")
    assert due_designs(cfg, store, "r", 3).empty
    refilled = frame("pool", 1).assign(env_id="late", design_id="d9")
    write_stage(store, "r", 2, "refill-s1", {"pool": refilled})  # step 3's top-up added a design
    assert sorted(due_designs(cfg, store, "r", 3)["design_id"]) == ["d1", "d2", "d3"]
    write_stage(store, "r", 2, "refill-s1", {"pool": refilled.assign(source="seed")})  # a replayed one: none new
    assert due_designs(cfg, store, "r", 3).empty
