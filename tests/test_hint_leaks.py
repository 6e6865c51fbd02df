"""A hint that leaks the solution is rewritten (rollout.hint_rewrites); one that still leaks is stored flagged,
and its environment gets no regret term (env_scores.hint_leaked). The solutions come from the real jail."""

from __future__ import annotations

import doctest
from dataclasses import dataclass, field
from pathlib import Path
from textwrap import dedent

import pandas as pd
import pytest
from samples import run_body, write_stage

from spade_core.config import load_config
from spade_core.envs.contract import env_id_for
from spade_core.llm.base import Completion, GenerationRequest, SamplingParams
from spade_core.method.scoring import blend_reward, score_environments
from spade_core.pipeline.context import GenerationContext
from spade_core.play import hint_batch as hint
from spade_core.play import hints as hints_module
from spade_core.play.hints import leaked_env_ids, leaked_values, leaks_solution, rewrite_messages
from spade_core.store.artifacts import Store

pytestmark = pytest.mark.usefixtures("jail_processes_checked")

# The secret is the same for every seed, so a hint naming it leaks the solution of every hinted play.
VAULT = dedent("""
    class Vault:
        def __init__(self, max_turns=12, **kwargs):
            self.max_turns = max_turns
            self.turns = 0

        def reset(self, seed=None):
            self.turns = 0
            return "Guess the 3-digit code.", {}

        def step(self, action):
            self.turns += 1
            if "\\\\boxed{417}" in action:
                return "open", 1.0, True, False, {}
            return "closed", 0.0, False, self.turns >= self.max_turns, {}

        def solution(self):
            return "\\\\boxed{417}"
""")
LEAK = "The code is 417."
SAFE = "Try codes in order and watch the reply; answer with \\boxed{} around three digits."


@dataclass
class HintModel:
    """A scripted hint writer: the n-th call returns ``replies[n]`` for every request (or an error)."""

    replies: list[str | None]
    model_ref: str = "scripted:hints"
    supports_token_prompts: bool = False
    calls: list[tuple[list[GenerationRequest], SamplingParams]] = field(default_factory=list)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        reply = self.replies[len(self.calls)]
        self.calls.append((requests, params))
        if reply is None:
            return [Completion(text="", error="model down") for _ in requests]
        return [Completion(text=reply) for _ in requests]

    def close(self) -> None:
        pass


def _ctx(tmp_path: Path, *overrides: str) -> GenerationContext:
    cfg = load_config("tiny", overrides=[f"store.root={tmp_path}", "rollout.plays_hint=2", *overrides])
    return GenerationContext(cfg, Store(str(tmp_path)), "leak", 1)


def _pool(code: str = VAULT) -> pd.DataFrame:
    row = {"env_id": env_id_for(code), "design_id": "d1", "skill": "logical_deduction", "kind": "game"}
    return pd.DataFrame([row | {"code": code, "source": "design"}])


# -- pure functions ----------------------------------------------------------------------------------------
def test_docstring_examples_hold() -> None:
    result = doctest.testmod(hints_module)
    assert result.attempted > 0 and result.failed == 0


def test_leaked_values_name_what_the_hint_gives_away() -> None:
    solutions = ["\\boxed{417}", '<tool_call>{"name": "pay", "arguments": {"order": "ORD104", "n": 7}}</tool_call>']
    assert leaked_values("Box 417 after paying ORD104.", solutions) == ["417", "ord104"]
    assert leaked_values("Pay 7 then box the code.", solutions) == []  # one digit is not specific
    assert leaks_solution("the code is 4170", solutions) is False  # whole tokens only


def test_rewrite_prompt_quotes_the_leak_and_keeps_the_conversation() -> None:
    messages = rewrite_messages("class Vault: ...", "tool", 60, LEAK, ["417", "x" * 500])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user"]
    assert messages[2]["content"] == LEAK
    ask = messages[-1]["content"]
    assert "'417'" in ask and "x" * 81 not in ask and "at most 60 words" in ask and "placeholders" in ask


# -- the hint stage, with the jail ---------------------------------------------------------------------------
def test_a_leaking_hint_is_rewritten_once_and_the_clean_rewrite_is_stored(tmp_path: Path) -> None:
    ctx, model = _ctx(tmp_path), HintModel([LEAK, SAFE])
    frame, counts = hint.hints_and_counts(ctx.play_run(), _pool(), model)
    assert frame[["hint", "leaks_solution"]].values.tolist() == [[SAFE, False]]
    assert counts == {"leaked": 1, "rewrites": 1, "still_leaking": 0}
    (request,), params = model.calls[1]
    assert request.messages[2] == {"role": "assistant", "content": LEAK}
    assert "'417'" in request.messages[-1]["content"]
    assert request.seed == hint.rewrite_seed(ctx.play_run(), 1, frame.env_id[0])
    assert (
        params.seed == hint.rewrite_seed(ctx.play_run(), 1) and params.temperature == ctx.cfg.rollout.hint_temperature
    )


def test_a_hint_still_leaking_after_its_rewrites_is_stored_flagged(tmp_path: Path) -> None:
    ctx, model = _ctx(tmp_path, "rollout.hint_rewrites=2"), HintModel([LEAK, "Box 417.", "It is 417!"])
    frame, counts = hint.hints_and_counts(ctx.play_run(), _pool(), model)
    assert frame[["hint", "leaks_solution"]].values.tolist() == [["It is 417!", True]]  # the last rewrite
    assert counts == {"leaked": 1, "rewrites": 2, "still_leaking": 1}
    assert model.calls[1][1].seed != model.calls[2][1].seed  # each round samples afresh


def test_no_rewrites_configured_keeps_the_first_hint(tmp_path: Path) -> None:
    ctx, model = _ctx(tmp_path, "rollout.hint_rewrites=0"), HintModel([LEAK])
    frame, counts = hint.hints_and_counts(ctx.play_run(), _pool(), model)
    assert (frame.hint[0], bool(frame.leaks_solution[0]), len(model.calls)) == (LEAK, True, 1)
    assert counts == {"leaked": 1, "rewrites": 0, "still_leaking": 1}


def test_a_failed_rewrite_keeps_the_leaking_hint_flagged(tmp_path: Path) -> None:
    frame, _ = hint.hints_and_counts(_ctx(tmp_path).play_run(), _pool(), HintModel([LEAK, None]))
    assert frame[["hint", "leaks_solution"]].values.tolist() == [[LEAK, True]]


def test_a_clean_hint_is_never_rewritten(tmp_path: Path) -> None:
    model = HintModel([SAFE])
    frame, counts = hint.hints_and_counts(_ctx(tmp_path).play_run(), _pool(), model)
    assert (frame.hint[0], len(model.calls), counts["leaked"]) == (SAFE, 1, 0)


def test_the_stage_writes_the_final_hints_and_reports_the_counts(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    write_stage(ctx.store, ctx.run_id, ctx.gen, "pool", {"pool": _pool()})
    info = run_body(ctx, "hint", HintModel([LEAK, "Still 417."]))
    assert info == {"rows": 1, "leaked": 1, "rewrites": 1, "still_leaking": 1}
    stored = ctx.store.read_table("hints", ctx.run_id, ctx.gen, stages=["hint"])
    assert stored[["hint", "leaks_solution"]].values.tolist() == [["Still 417.", True]]
    assert leaked_env_ids(stored) == {env_id_for(VAULT)}


def test_a_still_leaking_env_is_scored_without_its_regret_term(tmp_path: Path) -> None:
    ctx = _ctx(tmp_path)
    frame, _ = hint.hints_and_counts(ctx.play_run(), _pool(), HintModel([LEAK, "Still 417."]))
    env_id = env_id_for(VAULT)
    # The hinted plays were played (and won, the hint gave the code away); the no-hint plays half won.
    episodes = pd.DataFrame(
        {
            "env_id": [env_id] * 4,
            "condition": ["no_hint", "no_hint", "hint", "hint"],
            "episode_return": [1.0, 0.0, 1.0, 1.0],
            "error_type": [None] * 4,
        }
    )
    envs = pd.DataFrame({"env_id": [env_id], "design_id": ["d1"], "skill": ["logical_deduction"], "valid": [True]})
    row = score_environments(episodes, envs, ctx.cfg.scoring, leaked=leaked_env_ids(frame)).iloc[0]
    assert (bool(row.hint_leaked), row.r_hint, row.regret) == (True, 1.0, 0.0)
    # the plateau term alone (win rate 0.5)
    assert blend_reward(row.win_rate, row.regret, ctx.cfg.scoring) == pytest.approx(0.6 * 1.0)
    clean = score_environments(episodes, envs, ctx.cfg.scoring).iloc[0]
    assert (bool(clean.hint_leaked), clean.regret) == (False, 0.5)
    assert blend_reward(clean.win_rate, clean.regret, ctx.cfg.scoring) == pytest.approx(1.0)
