"""The episode rules that are settings (``rollout.action``, ``end_without_eos``, ``context_margin_tokens``,
``game_max_turns``, ``step_error_return``): each played in real jails, with a scripted agent so that the
reply is the one the rule is about, both ways."""

from __future__ import annotations

import pytest
from agents import Scripted

from spade_core.config import RolloutConfig
from spade_core.envs.contract import env_id_for
from spade_core.llm.base import SamplingParams
from spade_core.play.rollout import EpisodeSpec, RolloutEngine

pytestmark = pytest.mark.usefixtures("jail_processes_checked")

# Echoes what step received, wins on exactly "\boxed{a}", ends itself after its own max_turns (default 3).
ECHO = """
class Echo:
    def __init__(self, max_turns=3, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        self.turns = 0
        return "seed %s: say a" % seed, {}

    def step(self, action):
        self.turns += 1
        if "crash" in action:
            raise RuntimeError("the environment fell over")
        won = action == "\\\\boxed{a}"
        return "got " + action, 1.0 if won else 0.0, won, self.turns >= self.max_turns, {}

    def solution(self):
        return "\\\\boxed{a}"
"""
LONG_GAME = ECHO.replace("max_turns=3", "max_turns=40").replace("Echo", "LongEcho")
HANG = 'if "hang" in action:\n            while True: pass\n        if 0:'
HANGS = ECHO.replace('if "crash" in action:', HANG).replace("Echo", "Hangs")


def play(agent: Scripted, code: str, seeds: list[int], tokenizer=None, **rules) -> tuple[list[dict], RolloutEngine]:  # type: ignore[no-untyped-def]
    cfg = RolloutConfig(**{"max_turns": 5, "max_tokens_per_turn": 16, "max_context_tokens": 2048, **rules})
    engine = RolloutEngine(agent, cfg, SamplingParams(seed=0), call_timeout_s=1.5, tokenizer=tokenizer)
    return engine.run([EpisodeSpec(env_id_for(code), code, seed) for seed in seeds]), engine


def test_a_game_gets_the_first_boxed_answer_or_the_whole_reply() -> None:
    reply = "first \\boxed{a}, then again \\boxed{b}"
    rows, _ = play(Scripted({0: [reply]}), ECHO, [0], action="boxed")
    assert (rows[0]["episode_return"], rows[0]["turns"]) == (1.0, 1)
    assert rows[0]["transcript"][2]["content"] == reply  # the transcript (and the trained tokens) keep it whole
    rows, _ = play(Scripted({0: [reply]}), ECHO, [0], action="reply")
    assert rows[0]["episode_return"] == 0.0 and rows[0]["transcript"][3]["content"] == "got " + reply


def test_a_reply_cut_at_the_token_limit_ends_the_episode_unplayed(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    script = {0: [("\\boxed{a}", "length")], 1: ["\\boxed{a}"]}
    rows, _ = play(Scripted(script), ECHO, [0, 1], tiny_generator.tokenizer, action="boxed", end_without_eos=True)
    cut, whole = rows
    assert (cut["turns"], cut["terminated"], cut["episode_return"], cut["rewards"]) == (0, False, 0.0, [])
    assert sum(cut["loss_mask"]) > 0 and cut["error_type"] is None  # the reply is kept, as the authors'
    assert (whole["turns"], whole["episode_return"]) == (1, 1.0)
    rows, _ = play(Scripted(script), ECHO, [0], tiny_generator.tokenizer, action="boxed")  # off: played
    assert (rows[0]["turns"], rows[0]["episode_return"]) == (1, 1.0)


def test_the_context_margin_cuts_the_last_reply_and_stops_the_episode(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    words = " ".join(["word"] * 200)
    opened, _ = play(Scripted({0: [words]}), ECHO, [0], tok, max_turns=1)  # the prompt's length, after one turn
    prompt = opened[0]["loss_mask"].index(1)
    budget = prompt + 64 + 10  # room for a reply of 10 tokens, then 64 left
    rows, _ = play(Scripted({0: [words]}), ECHO, [0], tok, max_context_tokens=budget, context_margin_tokens=64)
    row = rows[0]
    # the reply: cut to the 10 tokens that leave 64 (then played, its observation added, and the episode over)
    assert sum(row["loss_mask"]) == 10 and row["loss_mask"][prompt : prompt + 10] == [1] * 10
    assert row["transcript"][2]["content"] == tok.decode(
        row["token_ids"][prompt : prompt + 10], skip_special_tokens=True
    )
    assert row["turns"] == 1 and not row["terminated"] and row["episode_return"] == 0.0
    # With the margin eaten by the prompt itself, the episode stops before the first reply.
    rows, _ = play(Scripted({0: [words]}), ECHO, [0], tok, max_context_tokens=prompt + 64, context_margin_tokens=64)
    assert rows[0]["turns"] == 0 and sum(rows[0]["loss_mask"]) == 0


@pytest.mark.parametrize(
    ("code", "cap", "own", "turns"),
    [(ECHO, 5, True, 3), (ECHO, 2, True, 2), (LONG_GAME, 5, True, 5), (ECHO, 5, False, 5)],
)
def test_a_game_keeps_its_own_max_turns_capped(code: str, cap: int, own: bool, turns: int) -> None:
    rows, _ = play(Scripted({0: ["\\boxed{b}"]}), code, [0], max_turns=cap, game_max_turns=own)
    assert rows[0]["turns"] == turns and rows[0]["episode_return"] == 0.0 and rows[0]["error_type"] is None


def test_a_raising_step_scores_minus_one_and_only_sandbox_faults_are_retried() -> None:
    agent = Scripted({0: ["\\boxed{crash}"], 1: ["\\boxed{hang}"]})
    (crashed,), engine = play(agent, ECHO, [0], step_error_return=-1.0)
    assert (crashed["episode_return"], crashed["terminated"], crashed["error_type"]) == (-1.0, True, None)
    assert crashed["transcript"][-1]["content"].startswith("Error: RuntimeError") and engine.stats.retries == 0
    (hung,), engine = play(agent, HANGS, [1], step_error_return=-1.0)  # a timeout is the jail's: retried
    assert hung["error_type"] == "timeout" and engine.stats.retries == 1 and agent.calls[1] == 2
    (crashed,), engine = play(Scripted({0: ["\\boxed{crash}"]}), ECHO, [0])  # off: retried, then left out
    assert crashed["error_type"] == "exception" and engine.stats.retries == 1
