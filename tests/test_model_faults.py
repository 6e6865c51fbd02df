"""A failed model call is a fault, not play: counted, left out, and past a share of the plays it stops the run.

The plays run for real in the jail; the model is scripted (tests/agents.py) so that exactly the chosen calls
fail, as a server's refusal does (``Completion.error``). The engine's own faults (a killed or hung vLLM
worker) are tested on the real engine in tests/test_engine_faults.py.
"""

from __future__ import annotations

import pandas as pd
import pytest
from agents import FailFirst, Scripted
from typer.testing import CliRunner

from spade_core.cli import app
from spade_core.config import load_config
from spade_core.envs.contract import env_id_for
from spade_core.llm.base import ModelError
from spade_core.pipeline.stage import _sum_counts
from spade_core.pipeline.status import model_faults
from spade_core.play.plays import Played, PlayRun, plan, rollouts
from spade_core.report.summary import summary_markdown
from spade_core.store.markers import StageRecord
from spade_core.train.data import agent_samples

WIN = """
class Win:
    def __init__(self, max_turns=4, **kwargs):
        self.max_turns = max_turns

    def reset(self, seed=None):
        return "seed %s: say win" % seed, {}

    def step(self, action):
        return "won", 1.0, True, False, {}

    def solution(self):
        return "win"
"""


def _run(**rollout: object) -> PlayRun:
    sets = ["rollout.plays_no_hint=4", "rollout.plays_hint=0", *[f"rollout.{k}={v}" for k, v in rollout.items()]]
    return PlayRun(load_config("tiny", overrides=sets), gen=1, seed=0, step=0, policy_step=0)


def _play(run: PlayRun, agent: object) -> Played:
    envs = pd.DataFrame({"env_id": [env_id_for(WIN)], "code": [WIN]})
    return rollouts(run, envs, pd.DataFrame(columns=["env_id", "hint"]), agent, 1)  # type: ignore[arg-type]


def _seeds(run: PlayRun) -> list[int]:
    envs = pd.DataFrame({"env_id": [env_id_for(WIN)], "code": [WIN]})
    return [s.seed for s in plan(run, envs, pd.DataFrame(columns=["env_id", "hint"]), 1)]


def test_a_play_whose_model_call_keeps_failing_is_counted_and_never_trained() -> None:
    run = _run(model_retries=1)
    seeds = _seeds(run)
    agent = Scripted({seed: ["win"] for seed in seeds}, fail=frozenset(seeds[:1]))
    played = _play(run, agent)
    frame = played.frame
    assert [e if isinstance(e, str) else None for e in frame["error_type"]] == ["model_error", None, None, None]
    assert played.info() == {"model_errors": 1, "model_retries": 1}
    assert agent.calls[seeds[0]] == 2  # played again once (rollout.model_retries), then kept as a row
    samples, skipped = agent_samples(frame.assign(token_ids=[[1, 2]] * 4, loss_mask=[[0, 1]] * 4))
    assert skipped == 1 and len(samples) == 3


def test_a_failed_call_on_an_engine_that_recovers_is_played_again_and_counts() -> None:
    run = _run(model_retries=1)
    seeds = _seeds(run)
    played = _play(run, FailFirst(Scripted({seed: ["win"] for seed in seeds}), failures=2))
    assert played.frame["error_type"].isna().all() and (played.frame["episode_return"] == 1.0).all()
    assert played.info() == {"model_errors": 0, "model_retries": 2}


def test_too_many_failed_calls_stop_the_generation_with_one_line() -> None:
    run = _run(model_retries=0, max_model_error_share=0.25)
    seeds = _seeds(run)
    agent = Scripted({seed: ["win"] for seed in seeds}, fail=frozenset(seeds[:2]))
    with pytest.raises(ModelError) as caught:
        _play(run, agent)
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("2 of 4 plays at generation 1 step 0 failed in the model call (50% > ")
    assert "rollout.max_model_error_share 0.25" in line and "the server said no" in line
    # at the share itself the rollout goes on (1 of 4 = 0.25 is not over it), and share 1 never stops
    assert _play(run, Scripted({seed: ["win"] for seed in seeds}, fail=frozenset(seeds[:1]))).model_errors == 1
    assert _play(_run(model_retries=0, max_model_error_share=1.0), agent).model_errors == 2


def _record(name: str, shard: int | None, info: dict[str, object]) -> StageRecord:
    return StageRecord(stage=name, shard=shard, run_id="r", gen=1, artifact_hash="h", digest="d", info=info)


def test_the_whole_stage_sums_its_shards_counts_and_status_reads_them() -> None:
    shards = [_record("rollout-s0", i, {"model_errors": i, "model_retries": 2}) for i in range(3)]
    assert _sum_counts(shards) == {"model_errors": 3, "model_retries": 6}
    assert _sum_counts([_record("validate", 0, {"rows": 1})]) == {}
    whole = {
        "rollout-s0": _record("rollout-s0", None, {"model_errors": 3, "model_retries": 6}),
        "rollout-s0-0": shards[0],  # a shard's own record is not counted twice
        "rollout-s1": _record("rollout-s1", None, {"model_errors": 1}),
        "train-s0": _record("train-s0", None, {"model_errors": 9}),
    }
    assert model_faults(whole) == (4, 6)


def test_the_summary_counts_the_plays_that_failed_in_the_model_call() -> None:
    summary = {
        "run_id": "r",
        "gen": 1,
        "designs": 0,
        "valid": 0,
        "valid_rate": None,
        "envs": 1,
        "replayed": 0,
        "episodes": 8,
        "model_errors": 2,
        "model_retries": 3,
        "win_rate": None,
        "regret": None,
        "diversity": None,
        "train_loss": None,
        "train_steps": 0,
        "model_calls": 0,
        "stages": [],
    }
    assert "| plays failed in the model call, left out (retried) | 2 (3) |" in summary_markdown(summary)


def test_spade_status_prints_the_count(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from test_verify import _generation

    from spade_core.store.markers import write_marker

    ctx, records = _generation(str(tmp_path))
    runner = CliRunner()
    quiet = runner.invoke(app, ["status", "r", "--store", str(tmp_path)])
    assert quiet.exit_code == 0 and "model call" not in quiet.output
    rollout = next(r for r in records if r.stage == "rollout-s0")
    write_marker(
        ctx.store, rollout.model_copy(update={"info": {**rollout.info, "model_errors": 2, "model_retries": 5}})
    )
    result = runner.invoke(app, ["status", "r", "--store", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "2 plays failed in the model call (left out), 5 played again after one" in result.output
