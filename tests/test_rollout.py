"""The rollout engine on seed environments with the tiny model: masks, returns, schema, hostile envs."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from agents import FailFirst, OracleAgent, Scripted, oracle_answers
from typer.testing import CliRunner

from sandbox.outcome import episode_return
from sandbox.session import EnvSession
from spade_core.cli import app
from spade_core.config import RolloutConfig, ScoringConfig, load_config
from spade_core.envs.contract import env_id_for
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import SamplingParams
from spade_core.method.designer_reward import window_inputs
from spade_core.method.scoring import broken_env_ids, score_environments
from spade_core.play.rollout import EpisodeSpec, RolloutEngine
from spade_core.store.artifacts import Store
from spade_core.train.data import agent_samples

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
SEEDS = {e.skill: e for e in load_seed_envs()}
GAME, TOOL = SEEDS["pattern_recognition"], SEEDS["data_retrieval"]
SMALL = RolloutConfig(max_turns=2, max_tokens_per_turn=16, max_context_tokens=2048)


def engine(generator, cfg: RolloutConfig = SMALL, call_timeout_s: float = 3.0, **kw) -> RolloutEngine:  # type: ignore[no-untyped-def]
    return RolloutEngine(generator, cfg, SamplingParams(temperature=0.6, seed=0), call_timeout_s=call_timeout_s, **kw)


def spans(ids: list[int], mask: list[int]) -> list[list[int]]:
    out, cur = [], []
    for tok, m in zip(ids, mask, strict=True):
        if m:
            cur.append(tok)
        elif cur:
            out.append(cur)
            cur = []
    return [*out, cur] if cur else out


@pytest.fixture(scope="module")
def tiny_rows(tiny_generator):  # type: ignore[no-untyped-def]
    specs = [EpisodeSpec(e.env_id, e.code, seed, "no_hint") for e in (GAME, TOOL) for seed in (0, 1)]
    return engine(tiny_generator).run(specs)


def test_mask_covers_exactly_the_agent_turns(tiny_rows, tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    for row in tiny_rows:
        assert row["error_type"] is None
        replies = [m["content"] for m in row["transcript"] if m["role"] == "assistant"]
        decoded = [tok.decode(s, skip_special_tokens=True) for s in spans(row["token_ids"], row["loss_mask"])]
        assert decoded == replies and len(replies) == row["turns"] >= 1


def test_unmasked_tokens_are_the_chat_template_rendering(tiny_rows, tiny_generator) -> None:  # type: ignore[no-untyped-def]
    tok = tiny_generator.tokenizer
    for row in tiny_rows:
        rendered = tok.apply_chat_template(row["transcript"], tokenize=False, add_generation_prompt=False)
        text = tok.decode(row["token_ids"])
        # the conversation as tokens equals the template rendering (up to the closing of a cut-off last reply)
        assert rendered.startswith(text) or text.startswith(rendered.rstrip("\n")), (text[-200:], rendered[-200:])


def test_rows_match_the_episodes_schema(tiny_rows, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    frame = pd.DataFrame(tiny_rows).assign(policy_step=0)  # what the rollout stage adds
    Store(str(tmp_path)).write_table("episodes", frame, run_id="r", gen=1, stage="rollout")
    assert len(Store(str(tmp_path)).read_table("episodes")) == 4


def test_behaviour_logprobs_are_kept_for_every_agent_token_and_zero_on_environment_text(tiny_rows) -> None:  # type: ignore[no-untyped-def]
    for row in tiny_rows:
        logprobs, mask = row["logprobs"], row["loss_mask"]
        assert len(logprobs) == len(row["token_ids"]) == len(mask)
        agent = [lp for lp, m in zip(logprobs, mask, strict=True) if m]
        assert agent and all(math.isfinite(lp) and lp <= 0.0 for lp in agent)  # sampled: a real log-prob
        assert all(lp == 0.0 for lp, m in zip(logprobs, mask, strict=True) if not m)


def test_return_is_last_reward_if_terminated_else_zero(tiny_rows) -> None:  # type: ignore[no-untyped-def]
    for row in tiny_rows:
        assert len(row["rewards"]) == row["turns"]
        assert -1.0 <= row["episode_return"] <= 1.0
        if row["terminated"]:
            assert row["episode_return"] == max(-1.0, min(1.0, row["rewards"][-1]))
        else:
            assert row["episode_return"] == 0.0


def test_hint_is_a_separate_paragraph_of_the_first_observation(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    specs = [
        EpisodeSpec(GAME.env_id, GAME.code, 0, "no_hint"),
        EpisodeSpec(GAME.env_id, GAME.code, 0, "hint", "Look at differences."),
    ]
    rows = engine(tiny_generator, RolloutConfig(max_turns=1, max_tokens_per_turn=8)).run(specs)
    first = {r["condition"]: r["transcript"][1]["content"] for r in rows}
    assert first["hint"] == first["no_hint"] + "\n\nHINT: Look at differences."


BUSY = (
    "class Busy:\n    def __init__(self, max_turns=12, **kw): pass\n"
    "    def reset(self, seed=None): return 'say something', {}\n"
    "    def step(self, a):\n        while True: pass\n    def solution(self): return '\\\\boxed{x}'\n"
)
CRASH = BUSY.replace("while True: pass", "raise RuntimeError('boom')").replace("Busy", "Crash")
BOMB = BUSY.replace(
    "def reset(self, seed=None): return 'say something', {}",
    "def reset(self, seed=None):\n        x = []\n        while True: x.append(bytearray(1 << 26))",
)


def test_hostile_envs_mid_batch_do_not_stop_the_others(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    specs = [
        EpisodeSpec(GAME.env_id, GAME.code, 0),
        EpisodeSpec(env_id_for(BUSY), BUSY, 0),
        EpisodeSpec(env_id_for(CRASH), CRASH, 0),
        EpisodeSpec(env_id_for(BOMB), BOMB, 0),
        EpisodeSpec(TOOL.env_id, TOOL.code, 0),
    ]
    # A generous call timeout: on a loaded machine a well-behaved environment's jail start must not time out.
    rows = engine(tiny_generator, call_timeout_s=10.0).run(specs)
    assert [r["error_type"] for r in rows] == [None, "timeout", "exception", "memory", None]
    assert [r["episode_return"] for r in rows[1:4]] == [0.0, 0.0, 0.0]
    assert [r["terminated"] for r in rows[1:4]] == [False, False, False]
    assert rows[0]["turns"] >= 1 and rows[4]["turns"] >= 1


def test_oracle_plays_reach_return_one_and_finished_episodes_leave_the_batch(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    answers = oracle_answers(load_seed_envs(), seed=3)
    specs = [EpisodeSpec(env.env_id, env.code, 3) for env in load_seed_envs()]
    oracle = OracleAgent(answers)
    rows = engine(oracle, RolloutConfig(max_turns=8), tokenizer=tiny_generator.tokenizer).run(specs)
    assert [r["episode_return"] for r in rows] == [1.0] * len(specs)
    assert [r["turns"] for r in rows] == [len(a) for a in answers.values()]
    assert oracle.calls == sorted(oracle.calls, reverse=True) and oracle.calls[-1] < oracle.calls[0]
    for row in rows:  # text-only replies are tokenized with the end-of-turn token, still masked in
        assert sum(row["loss_mask"]) >= row["turns"]


def test_context_limit_truncates_with_return_zero(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    cfg = RolloutConfig(max_turns=5, max_tokens_per_turn=16, max_context_tokens=300)
    rows = engine(tiny_generator, cfg).run([EpisodeSpec(GAME.env_id, GAME.code, 0)])
    assert rows[0]["turns"] < 5 and len(rows[0]["token_ids"]) + 16 > 300 - 16


@pytest.mark.slow
def test_spade_rollout_cli_json(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "rollout",
            str(GAME.path),
            "--plays",
            "2",
            "--json",
            "--set",
            "rollout.max_turns=1",
            "--set",
            "rollout.max_tokens_per_turn=8",
            "--set",
            "model.backend=transformers",  # tiny's engine is tests/test_vllm_engine.py's
        ],
    )
    assert result.exit_code == 0, result.output
    rows = [__import__("json").loads(line) for line in result.stdout.splitlines()]
    assert [(r["seed"], r["condition"], r["path"]) for r in rows] == [
        (0, "no_hint", str(GAME.path)),
        (1, "no_hint", str(GAME.path)),
    ]


def test_spade_rollout_cli_bad_model_path_is_one_line() -> None:
    result = CliRunner().invoke(app, ["rollout", str(GAME.path), "--set", "model.name_or_path=/no/model"])
    assert result.exit_code == 2
    assert result.stderr == "error: model path '/no/model' does not exist (and is not a hub id like org/name)\n"


def test_tiny_preset_is_the_rollout_default() -> None:
    assert load_config("tiny").rollout.max_turns == 4


def test_identical_plays_get_distinct_request_seeds(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    answers = {}
    with EnvSession(GAME.code, max_turns=1) as session:
        session.open()
        answers[session.reset(0).data["obs"]] = ["\\boxed{1}"]
    oracle = OracleAgent(answers)
    seen: list[int | None] = []
    original = oracle.generate

    def spy(requests, params):  # type: ignore[no-untyped-def]
        seen.extend(r.seed for r in requests)
        return original(requests, params)

    oracle.generate = spy  # type: ignore[method-assign]
    specs = [EpisodeSpec(GAME.env_id, GAME.code, 0, play=p) for p in range(4)]
    engine(oracle, RolloutConfig(max_turns=1)).run(specs)
    assert len(seen) == 4 and len(set(seen)) == 4 and None not in seen


# -- the authors' semantics (issue 14): clamped returns, tool-use turns, env-broken plays ---------------------
CLAMP = """
import re

class Clamp:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.turns = 0

    def reset(self, seed=None):
        self.turns = 0
        return "seed %s: name a reward" % seed, {}

    def step(self, action):
        self.turns += 1
        m = re.search(r"reward=(-?[0-9.]+)( end)?", action)
        reward = float(m.group(1)) if m else 0.0
        return "ok", reward, bool(m and m.group(2)), self.turns >= self.max_turns, {}

    def solution(self):
        return "\\\\boxed{reward=1 end}"
"""


def test_return_is_the_last_reward_clamped_if_terminated_and_zero_otherwise(tiny_generator, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    scripts = {
        0: ["reward=3 end"],  # beyond the contract (the jail passes up to +-10): clamped to 1
        1: ["reward=-5 end"],  # clamped to -1
        2: ["reward=0.5", "reward=0.7", "reward=0.9"],  # out of turns, never terminated: 0
        3: ["reward=0.2", "reward=0.25 end"],  # only the last reward counts
        4: ["reward=-0.5 end"],  # a lost game: negative return
    }
    cfg = RolloutConfig(max_turns=3, max_tokens_per_turn=16, max_context_tokens=4096)
    specs = [EpisodeSpec(env_id_for(CLAMP), CLAMP, seed) for seed in scripts]
    rows = engine(Scripted(scripts), cfg, tokenizer=tiny_generator.tokenizer).run(specs)
    assert [r["error_type"] for r in rows] == [None] * 5
    assert [r["episode_return"] for r in rows] == [1.0, -1.0, 0.0, 0.25, -0.5]
    assert [r["terminated"] for r in rows] == [True, True, False, True, True]
    assert rows[0]["rewards"] == [3.0] and rows[2]["rewards"] == [0.5, 0.7, 0.9]  # raw rewards kept for logging
    frame = pd.DataFrame(rows).assign(policy_step=0)
    store = Store(str(tmp_path))
    store.write_table("episodes", frame, run_id="r", gen=1, stage="rollout")
    assert store.read_table("episodes")["terminated"].tolist() == [True, True, False, True, True]


def test_episode_return_rule() -> None:
    assert episode_return([0.2, 7.0], True) == 1.0 and episode_return([-0.1, -3.0], True) == -1.0
    assert episode_return([0.2, 0.9], False) == 0.0 and episode_return([], True) == 0.0
    assert episode_return([0.0, 0.4], True) == 0.4


LEDGER = """
from spade_env import ToolEnv

class Ledger(ToolEnv):
    def reset(self, seed=None):
        self.expected_answer = "12.5"
        return "seed %s: what is the balance? Use the balance tool." % seed, {}

    def tool_balance(self) -> str:
        \"\"\"The account balance.\"\"\"
        return "balance: 12.5"

    def solution(self):
        return '<tool_call>{"name": "balance", "arguments": {}}</tool_call> <answer>12.5</answer>'
"""
BALANCE = '<tool_call>{"name": "balance", "arguments": {}}</tool_call>'


@pytest.fixture(scope="module")
def ledger_rows(tiny_generator):  # type: ignore[no-untyped-def]
    scripts = {
        0: ["<answer>3</answer>", "I am thinking.", BALANCE, "<answer>12.504</answer>"],  # wrong, format, tool, right
        1: [BALANCE],  # tools only until the turns run out: truncated
        2: ["<answer>12.52</answer>"],  # off by 0.02: wrong every time
    }
    cfg = RolloutConfig(max_turns=4, max_tokens_per_turn=16, max_context_tokens=4096)
    specs = [EpisodeSpec(env_id_for(LEDGER), LEDGER, seed) for seed in scripts]
    return engine(Scripted(scripts), cfg, tokenizer=tiny_generator.tokenizer).run(specs)


def test_tool_use_wrong_answer_continues_format_error_scores_minus_a_tenth_numbers_match(ledger_rows) -> None:  # type: ignore[no-untyped-def]
    won, tools_only, off = ledger_rows
    assert [r["error_type"] for r in ledger_rows] == [None] * 3
    assert won["rewards"] == [0.0, -0.1, 0.0, 1.0] and (won["terminated"], won["episode_return"]) == (True, 1.0)
    observations = [m["content"] for m in won["transcript"] if m["role"] == "user"][1:]
    assert observations[0] == "Incorrect. Keep using tools." and observations[1].startswith("Format error")
    assert observations[2].startswith("balance: 12.5")
    assert tools_only["rewards"] == [0.0] * 4 and (tools_only["terminated"], tools_only["episode_return"]) == (
        False,
        0.0,
    )
    assert off["turns"] == 4 and off["rewards"] == [0.0] * 4 and off["terminated"] is False  # 0.02 is too far


def test_a_tool_use_play_that_did_not_terminate_is_masked_out_of_the_loss(ledger_rows) -> None:  # type: ignore[no-untyped-def]
    frame = pd.DataFrame(ledger_rows)
    env_id, won_id = env_id_for(LEDGER), ledger_rows[0]["episode_id"]
    samples, skipped = agent_samples(frame, kinds={env_id: "tool"})
    assert skipped == 0 and len(samples) == 3
    won = next(s for s in samples if s.source_id == won_id)
    masked = [s for s in samples if s.source_id != won_id]
    assert sum(won.env_mask) > 0  # the won play trains on its tokens
    assert all(sum(s.env_mask) == 0 and len(s.env_mask) == len(s.completion_ids) > 0 for s in masked)
    # Still in the group: their 0 returns count in the won play's advantage (z-score over the 3 plays).
    assert won.advantage == pytest.approx(2**0.5) and all(s.reward == 0.0 for s in masked)
    # The kind can come from a column of the episodes instead.
    from_column, _ = agent_samples(frame.assign(kind="tool"))
    assert [s.env_mask for s in from_column] == [s.env_mask for s in samples]
    # A game's play that did not terminate, a play of unknown kind or of unknown termination is trained on.
    for kept in (
        agent_samples(frame, kinds={env_id: "game"})[0],
        agent_samples(frame)[0],
        agent_samples(frame.assign(terminated=None), kinds={env_id: "tool"})[0],
    ):
        assert len(kept) == 3 and all(sum(s.env_mask) > 0 for s in kept)


FLAKY = """
class Flaky:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "seed %s: say win" % seed, {}

    def step(self, action):
        if "crash" in action:
            raise RuntimeError("the environment fell over")
        return "won", 1.0, True, False, {}

    def solution(self):
        return "\\\\boxed{win}"
"""
BROKEN = FLAKY.replace('if "crash" in action:', "if True:").replace("Flaky", "Broken")
BROKEN_RESET = FLAKY.replace('return "seed %s: say win" % seed, {}', "return 1 / 0").replace("Flaky", "BadReset")


def test_a_play_the_environment_broke_once_is_retried_and_counts(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    agent = Scripted({0: ["\\boxed{crash}", "\\boxed{win}"], 1: ["\\boxed{win}"]})
    eng = engine(agent, tokenizer=tiny_generator.tokenizer)
    rows = eng.run([EpisodeSpec(env_id_for(FLAKY), FLAKY, seed) for seed in (0, 1)])
    assert [(r["error_type"], r["episode_return"], r["terminated"]) for r in rows] == [(None, 1.0, True)] * 2
    assert eng.stats.retries == 1 and agent.calls == {0: 2, 1: 1} and eng.stats.errors == {}
    assert [m["content"] for m in rows[0]["transcript"] if m["role"] == "assistant"] == ["\\boxed{win}"]


def test_retries_follow_the_config_for_the_environment_and_the_model(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    agent = Scripted({0: ["\\boxed{crash}", "\\boxed{win}"], 1: ["\\boxed{win}"]}, fail=frozenset({1}))
    no_retry = RolloutConfig(
        max_turns=2, max_tokens_per_turn=16, max_context_tokens=2048, env_retries=0, model_retries=0
    )
    eng = engine(agent, no_retry, tokenizer=tiny_generator.tokenizer)
    rows = eng.run([EpisodeSpec(env_id_for(FLAKY), FLAKY, seed) for seed in (0, 1)])
    assert [r["error_type"] for r in rows] == ["exception", "model_error"]
    assert (eng.stats.retries, eng.stats.model_retries, agent.calls) == (0, 0, {0: 1, 1: 1})
    # rollout.model_retries = 2: the failing play is played again from the start twice, then kept as a row
    agent = Scripted({1: ["\\boxed{win}"]}, fail=frozenset({1}))
    eng = engine(agent, no_retry.model_copy(update={"model_retries": 2}), tokenizer=tiny_generator.tokenizer)
    (row,) = eng.run([EpisodeSpec(env_id_for(FLAKY), FLAKY, 1)])
    assert (row["error_type"], eng.stats.model_retries, agent.calls) == ("model_error", 2, {1: 3})
    assert eng.stats.messages == {"model_error": "the server said no"}


def test_a_play_whose_model_call_failed_once_is_played_again(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    flaky_model = FailFirst(Scripted({1: ["\\boxed{win}"]}), failures=1)
    eng = engine(flaky_model, tokenizer=tiny_generator.tokenizer)
    (row,) = eng.run([EpisodeSpec(env_id_for(FLAKY), FLAKY, 1)])
    assert (row["error_type"], row["episode_return"], eng.stats.model_retries, eng.stats.retries) == (None, 1.0, 1, 0)
    assert [m["content"] for m in row["transcript"] if m["role"] == "assistant"] == ["\\boxed{win}"]


@pytest.fixture(scope="module")
def broken_rows(tiny_generator):  # type: ignore[no-untyped-def]
    """Two plays of an env that always raises in step, one whose reset raises, and two good plays of Flaky
    (one of which the model call fails)."""
    agent = Scripted({0: ["\\boxed{win}"], 1: ["\\boxed{win}"], 2: ["\\boxed{win}"]}, fail=frozenset({2}))
    eng = engine(agent, tokenizer=tiny_generator.tokenizer)
    specs = [EpisodeSpec(env_id_for(BROKEN), BROKEN, seed) for seed in (0, 1)]
    specs += [EpisodeSpec(env_id_for(BROKEN_RESET), BROKEN_RESET, 0)]
    specs += [EpisodeSpec(env_id_for(FLAKY), FLAKY, seed) for seed in (1, 2)]
    rows = eng.run(specs)
    return rows, eng.stats, agent


def test_a_play_that_keeps_breaking_is_kept_with_its_error_type(broken_rows) -> None:  # type: ignore[no-untyped-def]
    rows, stats, agent = broken_rows
    assert [r["error_type"] for r in rows] == ["exception", "exception", "exception", None, "model_error"]
    assert [r["episode_return"] for r in rows] == [0.0, 0.0, 0.0, 1.0, 0.0]
    assert [r["terminated"] for r in rows] == [False, False, False, True, False]
    assert stats.retries == 3 and stats.errors == {"exception": 3, "model_error": 1}
    # Broken is played twice per seed; BadReset never reaches the model; a failed model call is played again
    # once (rollout.model_retries) and still fails.
    assert agent.calls == {0: 2, 1: 2 + 1, 2: 2} and stats.model_retries == 1
    assert rows[0]["token_ids"] and sum(rows[0]["loss_mask"]) > 0  # its tokens are stored, never trained


def test_a_broken_play_is_left_out_of_the_win_rate_and_the_training_batch(broken_rows) -> None:  # type: ignore[no-untyped-def]
    rows, _, _ = broken_rows
    frame = pd.DataFrame(rows)
    envs = pd.DataFrame(
        {
            "env_id": [env_id_for(BROKEN), env_id_for(BROKEN_RESET), env_id_for(FLAKY)],
            "design_id": ["b", "r", "f"],
            "skill": ["optimization"] * 3,
            "valid": [True] * 3,
        }
    )
    scores = score_environments(frame, envs, ScoringConfig())
    # Broken and BadReset broke every play: no win rate, no row; Flaky: 1 win, and a play whose model call
    # failed, left out -> 1.0.
    assert scores["env_id"].tolist() == [env_id_for(FLAKY)] and scores["win_rate"].tolist() == [1.0]
    assert broken_env_ids(frame) == [env_id_for(BROKEN), env_id_for(BROKEN_RESET)]
    window = window_inputs(frame.assign(policy_step=0)).set_index("env_id")
    assert window.loc[env_id_for(BROKEN), "n_broken"] == 2 and window.loc[env_id_for(BROKEN), "n_no_hint"] == 0
    assert window.loc[env_id_for(FLAKY), "win_rate"] == 1.0
    samples, skipped = agent_samples(frame)
    # Only Flaky's won play: the broken plays are left out, the model error never got an agent token.
    assert [s.source_id for s in samples] == [rows[3]["episode_id"]] and skipped == 4
