"""Multi-turn instruction environments (``spade_env.InstructionEnv``, ``designer.multiturn``) and the authors'
reset gate (``validation.reset_gate``), in the real jail."""

from __future__ import annotations

import json
import random

import pytest
from agents import Scripted

from sandbox.session import EnvSession
from spade_core.config import RolloutConfig, ValidationConfig, load_config
from spade_core.designer.batch import prompt_from_text
from spade_core.designer.memory import Memory
from spade_core.designer.prompt_text import MULTITURN_TOOL_ACTIONS, TASK_VARIANTS, TOOL_ACTIONS, TOOL_DOMAINS
from spade_core.envs.contract import env_id_for, split_actions
from spade_core.envs.seeds import load_multiturn_envs, load_seed_envs
from spade_core.envs.validate import validate_code
from spade_core.llm.base import SamplingParams
from spade_core.play.rollout import EpisodeSpec, RolloutEngine

pytestmark = pytest.mark.usefixtures("jail_processes_checked")

MULTITURN = load_multiturn_envs()
GATED = ValidationConfig(reset_gate=True)

STEPS = """
import random
from spade_env import InstructionEnv

class Steps(InstructionEnv):
    def reset(self, seed=None):
        self.value = 0
        self.user_messages = ["seed %s: set the value to 2." % seed, "Now set it to 5.", "Now set it to 1."]
        self.criteria = [CRITERIA]
        return self.user_messages[0], {}

    def tool_set(self, value: int) -> str:
        \"\"\"Set the value.\"\"\"
        self.value = int(value)
        return "value is %d" % self.value

    def tool_get(self) -> str:
        \"\"\"Read the value.\"\"\"
        return "value is %d" % self.value

    def solution(self):
        calls = ['{"name": "set", "arguments": {"value": %d}}' % v for v in (2, 5, 1)]
        return " ".join("<tool_call>%s</tool_call>" % c for c in calls) + " <answer>done</answer>"
"""
CRITERIA = "lambda env: env.value == 2, lambda env: env.value == 5, lambda env: env.value == 1"


def steps_env(criteria: str = CRITERIA) -> str:
    return STEPS.replace("CRITERIA", criteria)


def call(name: str, **arguments: object) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


@pytest.mark.parametrize("env", MULTITURN, ids=lambda e: e.name)
def test_the_multiturn_seeds_pass_the_validator_and_the_reset_gate(env) -> None:  # type: ignore[no-untyped-def]
    result = validate_code(env.code, GATED)
    assert result.ok, result.message
    assert result.kind == "tool" and result.checks["reset_gate"] and result.checks["solution_reaches_goal"]
    with EnvSession(env.code) as session:
        session.open()
        for seed in (0, 1, 2):
            assert session.criteria_at_reset(seed).data["errors"] in ([None] * 3, [None] * 4, [None] * 5)


def test_there_are_three_multiturn_seeds_of_tool_skills_apart_from_the_library() -> None:
    assert len(MULTITURN) >= 3 and {e.kind for e in MULTITURN} == {"tool"}
    assert not {e.env_id for e in MULTITURN} & {e.env_id for e in load_seed_envs()}


def test_instructions_arrive_one_at_a_time_and_only_done_at_the_end_wins() -> None:
    with EnvSession(steps_env()) as session:
        session.open()
        assert session.reset(0).data["obs"] == "seed 0: set the value to 2."
        early = session.step("<answer>done</answer>").data
        assert early["reward"] == 0.0 and 'still on step 1/3: "seed 0: set the value to 2."' in early["obs"]
        assert session.step(call("set", value=3)).data["obs"] == "value is 3"  # criterion not met: nothing new
        assert (
            session.step(call("set", value=2))
            .data["obs"]
            .endswith("[STEP 1 COMPLETE - NEW INSTRUCTION] Now set it to 5.")
        )
        # outside step (the native protocol) the base class advances the same way
        assert session.call_tool("set", {"value": 5}).data["output"].endswith("NEW INSTRUCTION] Now set it to 1.")
        done = session.call_tool("set", {"value": 1}).data["output"]
        assert done.endswith("[ALL STEPS COMPLETE] Submit <answer>done</answer>.")
        assert session.step("<answer>finished</answer>").data["reward"] == 0.0
        won = session.step("<answer>Done</answer>").data
        assert (won["reward"], won["terminated"]) == (1.0, True)


def test_a_criterion_met_early_advances_one_step_per_call() -> None:
    # steps 1 and 2 hold at once: the first call completes step 1 only, the next call (any tool) step 2
    with EnvSession(
        steps_env("lambda env: env.value == 5, lambda env: env.value >= 5, lambda env: env.value == 1")
    ) as s:
        s.open()
        s.reset(0)
        assert s.call_tool("set", {"value": 5}).data["output"].endswith("Now set it to 5.")
        assert s.call_tool("get", {}).data["output"].endswith("Now set it to 1.")


@pytest.mark.parametrize("protocol", ["user_messages", "native"])
def test_the_seeds_solutions_win_under_both_protocols(tiny_generator, protocol: str) -> None:  # type: ignore[no-untyped-def]
    cfg = RolloutConfig(max_turns=12, max_tokens_per_turn=64, max_context_tokens=8192, tool_protocol=protocol)
    specs, scripts = [], {}
    for seed, env in enumerate(MULTITURN):
        with EnvSession(env.code) as session:
            session.open()
            session.reset(seed)
            actions = split_actions(session.solution().data["solution"])
        # native: all the calls in one reply; user_messages: one call per reply
        scripts[seed] = ["".join(actions[:-1]), actions[-1]] if protocol == "native" else actions
        code = env.code.replace("return obs, {}", 'return "seed %s: " % seed + obs, {}')
        specs.append(EpisodeSpec(env_id_for(code), code, seed))
    engine = RolloutEngine(
        Scripted(scripts), cfg, SamplingParams(seed=0), call_timeout_s=5.0, tokenizer=tiny_generator.tokenizer
    )
    rows = engine.run(specs)
    assert [(r["error_type"], r["episode_return"]) for r in rows] == [(None, 1.0)] * len(MULTITURN)
    if protocol == "native":
        assert all(r["turns"] == 2 for r in rows)
        last_tool = [[m for m in r["transcript"] if m["role"] == "tool"][-1]["content"] for r in rows]
        assert all(t.endswith("[ALL STEPS COMPLETE] Submit <answer>done</answer>.") for t in last_tool)


def test_the_reset_gate_rejects_a_criterion_that_raises_at_every_seed() -> None:
    always = steps_env("lambda env: env.missing == 2, lambda env: env.value == 5, lambda env: env.value == 1")
    # the paper preset's smoke test alone keeps it: no step ever checks a criterion
    assert validate_code(always, ValidationConfig(mode="smoke")).ok
    result = validate_code(always, ValidationConfig(mode="smoke", reset_gate=True))
    assert not result.ok and result.error_type == "contract_error" and result.checks["reset_gate"] is False
    assert "criterion 1 raises at every seed (0, 1, 2) after reset: AttributeError" in (result.message or "")


def test_the_reset_gate_keeps_criteria_that_raise_at_some_seeds_and_envs_without_criteria() -> None:
    sometimes = steps_env("lambda env: 1 // (env.seed_used - 1) or env.value == 2, " + CRITERIA.split(", ", 1)[1])
    sometimes = sometimes.replace("self.value = 0\n", "self.value = 0\n        self.seed_used = seed\n")
    smoke = ValidationConfig(mode="smoke", reset_gate=True)
    assert validate_code(sometimes, smoke).checks["reset_gate"] is True  # raises at seed 1 only
    plain = load_seed_envs()[0]  # a game: no criteria at all
    assert validate_code(plain.code, smoke).checks["reset_gate"] is True


def test_the_multiturn_design_prompt_shows_the_framing_a_domain_a_task_variant_and_a_seed() -> None:
    cfg = load_config("tiny", overrides=["designer.mode=write", "designer.multiturn=true"])
    doc = "The Hanseatic League traded salt and herring."
    prompt = prompt_from_text(cfg, "data_retrieval", "d1", doc, Memory(), random.Random(0))
    text = prompt.messages[-1]["content"]
    seed = next(e for e in MULTITURN if e.skill == "data_retrieval")
    assert MULTITURN_TOOL_ACTIONS in text and TOOL_ACTIONS not in text and seed.code.strip() in text
    assert "MULTI-TURN INSTRUCTION environment (subclass spade_env.InstructionEnv" in text
    assert "Optional flavour" in text and doc in text and "grounded in a concept" not in text
    briefs = {
        (domain, task)
        for i in range(40)
        for text in [
            prompt_from_text(cfg, "data_retrieval", None, None, Memory(), random.Random(i)).messages[-1]["content"]
        ]
        for domain in TOOL_DOMAINS
        for task in TASK_VARIANTS
        if f"Domain: {domain}." in text and f"Task variant: {task}. {TASK_VARIANTS[task]}" in text
    }
    assert len(briefs) >= 10 and {t for _, t in briefs} == set(TASK_VARIANTS)  # rotated per prompt
    other = prompt_from_text(cfg, "api_orchestration", None, None, Memory(), random.Random(0)).messages[-1]["content"]
    assert MULTITURN[0].code.strip() in other  # no seed of that skill: the first one
    game = prompt_from_text(cfg, "optimization", None, doc, Memory(), random.Random(0)).messages[-1]["content"]
    assert MULTITURN_TOOL_ACTIONS not in game and "InstructionEnv" not in game and "grounded in a concept" in game
    plain_cfg = load_config("tiny", overrides=["designer.mode=write"])
    plain = prompt_from_text(plain_cfg, "data_retrieval", None, None, Memory(), random.Random(0))
    assert TOOL_ACTIONS in plain.messages[-1]["content"] and "InstructionEnv" not in plain.messages[-1]["content"]
