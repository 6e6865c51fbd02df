"""The pool top-up before the pool (``designer.top_up_rounds``, ``designer.top_up_at: pool``): a generation with
fewer valid environments than design prompts designs the missing ones, validated in real jails, and the pool,
the verdicts and the designer's reward take them like any design. A scripted designer decides which replies
hold working code. The authors' top-up at the pool's later steps is tests/test_pool_edges.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
from samples import as_stage, validated_generation

from spade_core.config import load_config
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import Completion
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.registry import stages_for
from spade_core.pipeline.stages import pool, topup
from spade_core.store.verdicts import final_designs

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
SEEDS = {e.skill: e.code for e in load_seed_envs()}


class Designer:
    """Replies of call ``i`` (one batched call per round): ``plans[i][j]`` is a seed skill whose module the
    j-th request gets, or None for a reply without code."""

    model_ref = "scripted:designer"
    supports_token_prompts = False

    def __init__(self, plans: list[list[str | None]]) -> None:
        self.plans, self.calls = plans, []  # type: ignore[var-annotated]

    def generate(self, requests, params):  # type: ignore[no-untyped-def]
        plan = self.plans[len(self.calls)]
        self.calls.append(requests)
        return [
            Completion(text=f"```python\n{SEEDS[skill]}```" if skill else "no code", token_ids=[1], logprobs=[-0.5])
            for skill in plan[: len(requests)]
        ]

    def close(self) -> None:
        pass


def _generation(tmp_path: Path, designer: Designer, *overrides: str) -> GenerationContext:
    """Documents, design and validate of one generation with two prompts and one attempt each."""
    return validated_generation(tmp_path, designer, "top", "designer.documents_per_generation=2", *overrides)


def test_missing_environments_are_designed_until_the_pool_is_full(tmp_path: Path) -> None:
    # design: one valid of two; top-up round 1: the missing one fails; round 2: it works; no round 3.
    designer = Designer([["optimization", None], [None], ["data_retrieval"], ["logic_puzzles"]])
    ctx = _generation(tmp_path, designer, "designer.top_up_rounds=3")
    summary = as_stage(ctx, "topup", lambda run: topup.run(run, designer))
    assert summary == {"valid_before": 1, "valid": 2, "target": 2, "rounds": 2, "designed": 2}
    assert [len(c) for c in designer.calls] == [2, 1, 1]
    final = final_designs(ctx.store, "top", 1)
    assert len(final) == 4 and final["ok"].sum() == 2 and final["design_id"].is_unique
    failed_skill = final[~final["ok"]].sort_values("design_id")["skill"].tolist()
    topped = ctx.store.read_table("designs", "top", 1, stages=["topup"])
    assert set(topped["skill"]) <= set(failed_skill) | set(final["skill"])  # the failed prompts' skills, in turn
    fresh = ctx.store.read_table("documents", "top", 1, stages=["topup"])
    first = ctx.store.read_table("documents", "top", 1, stages=["documents"])
    assert set(topped["doc_id"]) <= set(fresh["doc_id"]) and len(fresh) == 2 and len(first) == 2
    as_stage(ctx, "pool", lambda run: pool.run(run, None))
    played = ctx.store.read_table("pool", "top", 1)
    assert set(played["design_id"].dropna()) == set(final.loc[final["ok"], "design_id"])


def test_a_full_pool_designs_nothing_and_the_stage_is_off_by_default(tmp_path: Path) -> None:
    designer = Designer([["optimization", "data_retrieval"]])
    ctx = _generation(tmp_path, designer, "designer.top_up_rounds=2")
    assert as_stage(ctx, "topup", lambda run: topup.run(run, designer))["rounds"] == 0
    assert len(designer.calls) == 1 and ctx.store.read_table("designs", "top", 1, stages=["topup"]).empty
    assert "topup" not in {s.name for s in stages_for(load_config("tiny"), 1)}
    before_pool = load_config("paper-games", overrides=["designer.top_up_at=pool"])
    chain = [s.name for s in stages_for(before_pool, 1)][:6]
    assert chain == ["documents", "design", "validate", "topup", "pool", "hint"]
    # The paper presets top up at the pool's later steps instead (tests/test_pool_edges.py).
    assert "topup" not in {s.name for s in stages_for(load_config("paper-games"), 1)}
