"""The rollout engine on seed environments with the tiny model: masks, returns, schema, hostile envs."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from agents import OracleAgent, oracle_answers
from typer.testing import CliRunner

from sandbox.session import EnvSession
from spade_core.cli import app
from spade_core.config import RolloutConfig, load_config
from spade_core.envs.contract import env_id_for
from spade_core.envs.seeds import load_seed_envs
from spade_core.llm.base import SamplingParams
from spade_core.rollout import EpisodeSpec, RolloutEngine
from spade_core.store import Store

pytestmark = pytest.mark.usefixtures("jail_processes_checked")
SEEDS = {e.skill: e for e in load_seed_envs()}
GAME, TOOL = SEEDS["pattern_recognition"], SEEDS["data_retrieval"]
SMALL = RolloutConfig(max_turns=2, max_tokens_per_turn=16, max_context_tokens=2048)


def engine(generator, cfg: RolloutConfig = SMALL, **kw) -> RolloutEngine:  # type: ignore[no-untyped-def]
    return RolloutEngine(generator, cfg, SamplingParams(temperature=0.6, seed=0), call_timeout_s=3.0, **kw)


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
        assert 0.0 <= row["episode_return"] <= 1.0
        if row["episode_return"] > 0:
            assert row["episode_return"] == row["rewards"][-1]


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
    rows = engine(tiny_generator).run(specs)
    assert [r["error_type"] for r in rows] == [None, "timeout", "exception", "memory", None]
    assert [r["episode_return"] for r in rows[1:4]] == [0.0, 0.0, 0.0]
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
