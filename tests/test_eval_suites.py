"""Held-out suites without a model: the registry, deterministic item selection, and scripted oracles (gold
answers score 1, wrong ones 0) for every suite, with BFCL's multi-turn calls executed and checked in the jail.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from spade_core.config import ConfigError
from spade_core.eval import (
    SUITE_NAMES,
    SUITES,
    BFCLSuite,
    EvalItem,
    HumanEvalSuite,
    ReasoningGymSuite,
    Suite,
    UnknownSuiteError,
    get_suite,
    summarize,
)
from spade_core.eval.bfcl_calls import parse_calls, try_parse_calls
from spade_core.eval.humaneval import problems
from spade_core.eval.reasoning_gym_suite import DATASETS


def small_suites() -> list[Suite]:
    return [ReasoningGymSuite(), HumanEvalSuite(time_limit_s=5), BFCLSuite()]


# -- registry ----------------------------------------------------------------------------------------------


def test_registry_names_every_suite_once() -> None:
    assert SUITE_NAMES == (
        "reasoning_gym",
        "reasoning_gym_hard",
        "humaneval",
        "bfcl",
        "bfcl_multi_turn",
        "bfcl_full",
        "tau2",
    )
    for name, cls in SUITES.items():
        assert cls.name == name and isinstance(get_suite(name), cls)


def test_unknown_suite_is_one_line_naming_it_and_the_allowed_names() -> None:
    with pytest.raises(UnknownSuiteError) as info:
        get_suite("mmlu")
    allowed = "reasoning_gym, reasoning_gym_hard, humaneval, bfcl, bfcl_multi_turn, bfcl_full, tau2"
    assert str(info.value) == f"unknown evaluation suite 'mmlu'; allowed: {allowed}"
    assert isinstance(info.value, ConfigError) and isinstance(info.value, ValueError)


# -- determinism -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("suite", small_suites(), ids=lambda s: s.name)
def test_same_seed_same_items_and_other_seed_other_items(suite: Suite) -> None:
    first, again, other = suite.items(8, seed=11), suite.items(8, seed=11), suite.items(8, seed=12)
    assert len(first) == 8 and len({i.item_id for i in first}) == 8
    assert [(i.item_id, i.messages) for i in first] == [(i.item_id, i.messages) for i in again]
    assert [i.item_id for i in first] != [i.item_id for i in other]
    for item in first:  # an item id alone rebuilds its item
        rebuilt = suite.item(item.item_id)
        assert (rebuilt.item_id, rebuilt.messages, rebuilt.answer) == (item.item_id, item.messages, item.answer)


def test_item_ids_are_traceable() -> None:
    assert all(re.fullmatch(r"rg/[a-z_]+/\d+", i.item_id) for i in ReasoningGymSuite().items(10, 0))
    assert all(re.fullmatch(r"HumanEval/\d+", i.item_id) for i in HumanEvalSuite().items(5, 0))
    ids = [i.item_id for i in BFCLSuite().items(8, 0)]
    assert [i.split("/")[1] for i in ids] == ["simple"] * 2 + ["parallel"] * 2 + ["irrelevance"] * 2 + [
        "multi_turn_base"
    ] * 2
    with pytest.raises(KeyError):
        BFCLSuite().item("bfcl/simple/99999")


def test_reasoning_gym_mixes_math_logic_and_algorithmic_datasets() -> None:
    names = [i.data["dataset"] for i in ReasoningGymSuite().items(len(DATASETS), 3)]
    assert sorted(names) == sorted(DATASETS)
    assert names[:3] == ["basic_arithmetic", "syllogism", "spell_backward"]


# -- scripted oracles -------------------------------------------------------------------------------------


def test_reasoning_gym_gold_answers_score_one_and_wrong_ones_zero() -> None:
    suite = ReasoningGymSuite()
    items = suite.items(30, seed=5)
    for item in items:
        assert suite.score(item, "Let me think. " + suite.gold_response(item)) == (1.0, True), item.item_id
        assert suite.score(item, f"\\boxed{{{item.answer}}}")[1], item.item_id
        score, passed = suite.score(item, "<answer>definitely not it 0xdeadbeef</answer>")
        assert not passed and score < 1.0, item.item_id  # some datasets give partial credit by similarity
        if item.data["dataset"] in ("basic_arithmetic", "gcd", "chain_sum", "lcm", "simple_equations"):
            assert score == 0.0
        assert suite.score(item, str(item.answer)) == (0.0, False)  # the answer must be tagged
        assert suite.score(item, "") == (0.0, False)


def test_humaneval_canonical_solutions_pass_and_wrong_bodies_fail() -> None:
    suite = HumanEvalSuite(time_limit_s=5)
    items = suite.items(4, seed=2)
    wrong = [f"```python\n{problems()[i.item_id]['prompt']}    return None\n```" for i in items]
    body_only = [str(i.answer) for i in items]  # the original completion format: the indented body
    scores = suite.score_many(items * 3, [suite.gold_response(i) for i in items] + body_only + ["no code here"] * 4)
    assert scores[:8] == [(1.0, True)] * 8
    assert scores[8:] == [(0.0, False)] * 4
    assert suite.score_many(items, wrong) == [(0.0, False)] * 4


def test_bfcl_ground_truth_calls_pass_and_wrong_calls_fail() -> None:
    suite = BFCLSuite(categories=("simple", "parallel", "irrelevance"))
    items = suite.items(12, seed=9)
    gold = [suite.gold_response(i) for i in items]
    assert suite.score_many(items, gold) == [(1.0, True)] * 12
    wrong = []
    for item, reply in zip(items, gold, strict=True):
        if item.data["category"] == "irrelevance":
            name = item.data["functions"][0]["name"]
            wrong.append(f"[{name}(x=1)]")  # calling anything is wrong here
        else:
            calls = parse_calls(reply)
            wrong.append(reply.replace(calls[0].name + "(", calls[0].name + "_v2(", 1))
    assert suite.score_many(items, wrong) == [(0.0, False)] * 12
    simple = next(i for i in items if i.data["category"] == "simple")
    assert suite.score(simple, "I would call the function.") == (0.0, False)


def test_bfcl_decoder_never_evaluates_model_text(tmp_path: Path) -> None:
    canary = tmp_path / "canary"
    hostile = [
        f"[__import__('os').system('touch {canary}')]",
        f"[f(x=__import__('os').system('touch {canary}'))]",
        f"[f(x=(lambda: open('{canary}', 'w'))())]",
        "[f(x=9**9**9)]",
        "[f(**{'a': 1})]",
    ]
    for text in hostile:
        calls = try_parse_calls(text)
        assert calls is None or all(isinstance(v, str | dict) for c in calls for v in c.kwargs.values()), text
    assert not canary.exists()
    assert parse_calls("[f(x=os.system(c='ls'))]")[0].kwargs == {"x": {"os.system": {"c": "ls"}}}  # data, not run


def gold_dialogue(suite: BFCLSuite, item: EvalItem) -> list[list[str]]:
    """Per turn, the replies a perfect agent gives: the ground-truth calls, then a reply without calls."""
    steps = json.loads(suite.gold_response(item))["turns"]
    return [[*turn, "Done."] for turn in steps]


def test_bfcl_multi_turn_ground_truth_passes_and_wrong_or_short_fails() -> None:
    suite = BFCLSuite(categories=("multi_turn_base",))
    items = suite.items(4, seed=1)
    gold = [suite.gold_response(i) for i in items]
    assert suite.score_many(items, gold) == [(1.0, True)] * 4
    wrong, short = [], []
    for reply in gold:
        turns = json.loads(reply)["turns"]
        wrong.append(json.dumps({"turns": [["[ls(a=True)]"] for _ in turns]}))
        short.append(json.dumps({"turns": turns[:-1]}))
    assert suite.score_many(items, wrong) == [(0.0, False)] * 4
    assert suite.score_many(items, short) == [(0.0, False)] * 4
    assert suite.score(items[0], "not json") == (0.0, False)


def test_bfcl_multi_turn_dialogue_executes_calls_in_the_jail_and_scores_the_gold_agent() -> None:
    suite = BFCLSuite(categories=("multi_turn_base",))
    item = suite.item("bfcl/multi_turn_base/0")  # a file-system task: cd, mkdir, mv, grep, ...
    state = suite.new_state(item)
    replies: list[str] = []
    appended: list[str] = []
    for turn in gold_dialogue(suite, item):
        for reply in turn:
            replies.append(reply)
            (follow,) = suite.follow_up_many([item], [replies], [state])
            appended += [m["content"] for m in follow or []]
    assert state["turn"] == len(item.data["turns"]) and not state["force_terminated"]
    tool_results = [m for m in appended if m.startswith("[{'role': 'tool'")]
    assert len(tool_results) == len(json.loads(suite.gold_response(item))["turns"])
    assert "budget analysis" in " ".join(tool_results)  # grep's output came back from BFCL's file system
    assert suite.score(item, suite.final_response(item, replies, state)) == (1.0, True)


def test_bfcl_multi_turn_step_limit_force_terminates() -> None:
    suite = BFCLSuite(categories=("multi_turn_base",), max_steps_per_turn=2)
    item = suite.item("bfcl/multi_turn_base/0")
    state, replies = suite.new_state(item), []
    for _ in range(3):
        replies.append("[ls(a=True)]")
        (follow,) = suite.follow_up_many([item], [replies], [state])
    assert follow is None and state["force_terminated"]
    assert suite.score(item, suite.final_response(item, replies, state)) == (0.0, False)


def test_summarize_gives_items_pass_at_1_and_mean_score_per_suite() -> None:
    import pandas as pd

    frame = pd.DataFrame(
        {
            "suite": ["humaneval", "humaneval", "bfcl"],
            "item_id": ["HumanEval/1", "HumanEval/2", "bfcl/simple/1"],
            "checkpoint": ["m"] * 3,
            "score": [1.0, 0.0, 1.0],
            "passed": [True, False, True],
            "response": ["a", "b", "c"],
        }
    )
    assert summarize(frame).to_dict("records") == [
        {"suite": "bfcl", "items": 1, "pass@1": 1.0, "mean_score": 1.0},
        {"suite": "humaneval", "items": 2, "pass@1": 0.5, "mean_score": 0.5},
    ]
