"""The authors' wall-clock limits, as settings (docs/method.md, the paper presets' table): a design reply within
``designer.attempt_deadline_s`` (theirs 300 s), a judgement within ``validation.llm_validator_deadline_s`` (120
s, a timeout rejects), a batch of designs within ``designer.batch_deadline_s`` (900 s, the batch is lost) and a
play within ``rollout.play_deadline_s`` (300 s, the play is dropped). Each passed deadline is a row with
``error_type`` ``deadline``, never an exception; without the settings (ours) nothing is cut. The limits here
are fractions of a second and the slow model is a scripted one that sleeps; designs are validated and plays
played in real jails."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import pytest
from agents import Scripted
from samples import validated_generation
from test_episode_rules import ECHO, play

from sandbox.outcome import is_env_error
from spade_core.config import load_config
from spade_core.designer.batch import generate_rows, prompt_plan
from spade_core.designer.deadline import Clock, generate_within, is_late
from spade_core.designer.llm_validator import judge
from spade_core.designer.retries import judge_designs, validate_with_retries
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import Completion, GenerationRequest, SamplingParams
from spade_core.pipeline.context import GenerationContext
from spade_core.pipeline.stages.validate import batch_left
from spade_core.store.artifacts import Store
from spade_core.store.markers import StageRecord
from spade_core.store.verdicts import final_designs
from spade_core.train.data import agent_samples

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
SEEDS = {e.skill: e.code for e in load_seed_envs()}


@dataclass
class Slow:
    """A scripted model: the reply to a request whose last message holds ``"slow"`` (or every reply, with
    ``every``) comes ``delay`` seconds late; ``streams`` says whether it serves requests concurrently."""

    reply: str = "\\boxed{yes}"
    delay: float = 1.5
    streams: bool = True
    every: bool = False
    model_ref: str = "scripted:slow"
    supports_token_prompts: bool = False
    calls: list[int] = field(default_factory=list)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        self.calls.append(len(requests))
        if self.every or any("slow" in r.messages[-1]["content"] for r in requests):
            time.sleep(self.delay)
        return [Completion(text=self.reply, token_ids=[1]) for _ in requests]

    def close(self) -> None:
        pass


def _asks(*texts: str) -> list[GenerationRequest]:
    return [GenerationRequest(messages=[{"role": "user", "content": t}]) for t in texts]


def test_a_server_backend_loses_only_the_replies_past_the_deadline() -> None:
    model = Slow()
    started = time.monotonic()
    replies = generate_within(
        model, _asks("fast", "slow", "fast"), SamplingParams(), 0.5, "designer.attempt_deadline_s"
    )
    assert [is_late(r) for r in replies] == [False, True, False]
    assert time.monotonic() - started < 1.2  # returned at the deadline, not when the slow reply came
    assert "no reply within 0.5 s (designer.attempt_deadline_s)" in str(replies[1].error)
    assert not any(is_late(r) for r in generate_within(model, _asks("slow"), SamplingParams(), None))  # ours


def test_an_in_process_batch_past_the_deadline_is_late_as_a_whole() -> None:
    model = Slow(delay=0.3, streams=False, every=True)
    assert all(is_late(r) for r in generate_within(model, _asks("a", "b"), SamplingParams(), 0.1))
    assert not any(is_late(r) for r in generate_within(model, _asks("a", "b"), SamplingParams(), 5.0))
    assert model.calls == [2, 2]  # one batched call each time: never two calls on one model at once


class SlowDesigner:
    """A designer serving concurrent requests: prompt ``i`` of a call gets the seed module ``plan[i]``, and the
    reply to a prompt in ``slow`` comes ``delay`` seconds late."""

    streams = True
    model_ref = "scripted:slow-designer"
    supports_token_prompts = False

    def __init__(self, plan: list[str], slow: frozenset[int] = frozenset(), delay: float = 1.5) -> None:
        self.plan, self.slow, self.delay = plan, slow, delay
        self.index: dict[int, int] = {}

    def generate(self, requests, params):  # type: ignore[no-untyped-def]
        out = []
        for r in requests:  # the deadline helper sends one request per call; the seed says which prompt
            i = self.index.setdefault(r.seed, len(self.index))
            if i in self.slow:
                time.sleep(self.delay)
            out.append(Completion(text=f"```python\n{SEEDS[self.plan[i % len(self.plan)]]}```", token_ids=[1]))
        return out

    def close(self) -> None:
        pass


@pytest.mark.parametrize("deadline", [0.5, None])
def test_a_design_reply_past_its_deadline_fails_its_attempt(tmp_path: Path, deadline: float | None) -> None:
    designer = SlowDesigner(["optimization", "data_retrieval"], slow=frozenset({1}))
    overrides = ["designer.documents_per_generation=2", f"designer.attempt_deadline_s={deadline or 'null'}"]
    ctx = validated_generation(tmp_path, designer, "late", *overrides)
    final = final_designs(ctx.store, "late", 1).sort_values("attempt")
    if deadline is None:  # ours: the slow reply is waited for, and validated like the other
        assert final["ok"].tolist() == [True, True]
        return
    assert sorted(final["error_type"].fillna("ok")) == ["deadline", "ok"]
    late = final[~final["ok"]].iloc[0]
    assert pd.isna(late["code"]) and "within 0.5 s (designer.attempt_deadline_s)" in late["message"]
    assert late["completion"].startswith("[deadline] ")  # what the design row keeps of a reply that never came


def test_a_judgement_past_its_deadline_rejects_the_design(tmp_path: Path) -> None:
    cfg = load_config("tiny", overrides=["validation.llm_validator_deadline_s=0.3", f"store.root={tmp_path}"])
    row = {"ok": True, "error_type": None, "message": None, "checks": {"parses": True}}
    judge_designs(
        GenerationContext(cfg, Store(str(tmp_path)), "j", 1).design_run(), [row], ["class E: ...  # slow"], Slow()
    )
    assert (row["ok"], row["error_type"], row["llm_verdict"]) == (False, "deadline", "deadline")
    assert row["checks"] == {"parses": True, "llm_validator": False}
    params = SamplingParams(temperature=0.3)
    kept, late = judge(Slow(), ["class E: ...  # slow"], params, 0.3), judge(Slow(), ["class E: ..."], params, 0.3)
    assert (late[0].keep, late[0].verdict) == (True, "yes")  # a quick \boxed{yes} keeps it
    assert (kept[0].keep, kept[0].verdict) == (False, "deadline")
    assert "validation.llm_validator_deadline_s" in kept[0].reason
    assert judge(Slow(delay=0.2), ["class E: ...  # slow"], params)[0].keep  # ours: no deadline, judged


def test_a_batch_past_its_deadline_loses_every_design_of_its_shard(tmp_path: Path) -> None:
    designer = SlowDesigner(["optimization", "data_retrieval"])
    ctx = validated_generation(tmp_path, designer, "batch", "designer.documents_per_generation=2")
    designs = ctx.read_shard("designs", "design", 0)
    _, on_time, _ = validate_with_retries(ctx.design_run(), designs, 0, designer, Clock(60.0))
    assert on_time["ok"].tolist() == [True, True]
    _, past, _ = validate_with_retries(ctx.design_run(), designs, 0, designer, Clock(0.0))
    # Valid in the jail, lost all the same: the authors' batch yields nothing once it is past 900 s.
    assert past["ok"].tolist() == [False, False] and set(past["error_type"]) == {"deadline"}
    assert all(dict(c)["parses"] for c in past["checks"])  # the checks it passed stay on the row
    assert "designer.batch_deadline_s" in past["message"].iloc[0]


def test_the_validate_shards_have_what_the_design_stage_left_of_the_batch(tmp_path: Path) -> None:
    designer = SlowDesigner(["optimization"])
    ctx = validated_generation(tmp_path, designer, "left", "designer.batch_deadline_s=900")
    record = StageRecord(
        stage="design", run_id="left", gen=1, artifact_hash="h", digest="d", info={"batch_seconds": 40}
    )
    assert batch_left(ctx.execution("validate", upstream={"design": record})) == 860
    assert batch_left(ctx.execution("validate")) == 900
    unbounded = validated_generation(tmp_path / "ours", designer, "ours")
    assert batch_left(unbounded.execution("validate", upstream={"design": record})) is None
    # The design stage's own call within the batch's time left: a clock already past leaves no time.
    rows = generate_rows(ctx.design_run(), [], [], designer, __import__("random").Random(0), 0, 0, Clock(0.0))
    assert rows.empty and prompt_plan(ctx.cfg.designer, ctx.gen)


@pytest.mark.parametrize("deadline", [2.5, None])
def test_a_play_past_its_deadline_is_dropped_not_retried(deadline: float | None) -> None:
    @dataclass
    class SlowScripted(Scripted):
        def generate(self, requests, params):  # type: ignore[no-untyped-def]
            time.sleep(1.0)  # every turn takes a second
            return super().generate(requests, params)

    # seed 0 wins at its 5th turn, seed 1 at its first; the game ends itself after 5 turns
    agent = SlowScripted({0: ["\\boxed{b}"] * 4 + ["\\boxed{a}"], 1: ["\\boxed{a}"]})
    long_echo = ECHO.replace("max_turns=3", "max_turns=5")
    rows, engine = play(agent, long_echo, [0, 1], action="boxed", play_deadline_s=deadline)
    slow, quick = rows
    assert (quick["error_type"], quick["episode_return"]) == (None, 1.0)  # one turn: within the limit
    if deadline is None:  # ours: played to the end
        assert (slow["error_type"], slow["episode_return"], slow["turns"]) == (None, 1.0, 5)
        return
    assert (slow["error_type"], slow["episode_return"], slow["terminated"]) == ("deadline", 0.0, False)
    assert engine.stats.retries == 0 and agent.calls[0] < 5  # not played again, not played out
    assert is_env_error("deadline")  # left out of win rates and training like a broken play
    episodes = pd.DataFrame(rows).assign(policy_step=0)
    samples, skipped = agent_samples(episodes)
    assert skipped >= 1 and all(s.source_id != slow["episode_id"] for s in samples)
