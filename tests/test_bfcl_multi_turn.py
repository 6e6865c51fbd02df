"""The BFCL multi-turn categories the paper reports (suite ``bfcl_multi_turn``): base, miss_func, miss_param,
long_context, executed and checked by BFCL's own code inside the jail."""

from __future__ import annotations

import json

import pytest

from spade_core.config import load_config
from spade_core.eval import SUITES, BFCLMultiTurnSuite, BFCLSuite
from spade_core.eval.base import EvalItem
from spade_core.eval.bfcl import MULTI_TURN_CATEGORIES, system_prompt
from spade_core.eval.runner import evaluate_suite

NEW = ("multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context")


def gold_dialogue(suite: BFCLSuite, item: EvalItem) -> list[list[str]]:
    """Per turn, the replies a perfect agent gives: the ground-truth calls, then a reply without calls."""
    return [[*turn, "Done."] for turn in json.loads(suite.gold_response(item))["turns"]]


def play(suite: BFCLSuite, item: EvalItem, dialogue: list[list[str]]) -> tuple[list[str], dict, list[str]]:  # type: ignore[type-arg]
    """Run the suite's follow-up loop over scripted replies: (replies, state, messages it appended)."""
    state, replies, appended = suite.new_state(item), [], []
    for turn in dialogue:
        for reply in turn:
            replies.append(reply)
            (follow,) = suite.follow_up_many([item], [replies], [state])
            appended += [m["content"] for m in follow or []]
    return replies, state, appended


def test_the_multi_turn_suite_is_registered_with_the_paper_categories() -> None:
    assert SUITES["bfcl_multi_turn"] is BFCLMultiTurnSuite
    assert BFCLMultiTurnSuite().categories == MULTI_TURN_CATEGORIES == ("multi_turn_base", *NEW)
    assert BFCLSuite().categories == ("simple", "parallel", "irrelevance", "multi_turn_base")
    ids = [i.item_id for i in BFCLMultiTurnSuite().items(8, 0)]
    assert [i.split("/")[1] for i in ids] == [c for c in MULTI_TURN_CATEGORIES for _ in range(2)]
    assert all(i.suite == "bfcl_multi_turn" for i in BFCLMultiTurnSuite().items(4, 0))
    assert "bfcl_full" in load_config("paper-tool-use").evaluation.suites  # it holds the multi-turn sets


@pytest.mark.parametrize("category", NEW)
def test_ground_truth_passes_and_wrong_answers_fail(category: str) -> None:
    suite = BFCLMultiTurnSuite(categories=(category,))
    items = suite.items(3, seed=2)
    assert suite.score_many(items, [suite.gold_response(i) for i in items]) == [(1.0, True)] * 3
    wrong = [json.dumps({"turns": [["[ls(a=True)]"] for _ in i.answer]}) for i in items]
    assert suite.score_many(items, wrong) == [(0.0, False)] * 3


def test_miss_func_holds_functions_out_until_a_turn_reveals_them() -> None:
    suite = BFCLMultiTurnSuite(categories=("multi_turn_miss_func",))
    item = suite.item("bfcl/multi_turn_miss_func/0")  # `sort` is held out until turn 3
    names = [f["name"] for f in item.data["functions"]]
    assert "sort" not in names and "grep" in names and '"name": "sort"' not in item.messages[0]["content"]
    (reveal,) = item.data["turns"][3]
    assert reveal["role"] == "user" and "'name': 'sort'" in reveal["content"]
    assert reveal["content"].endswith("I have updated some more functions you can choose from. What about now?")
    replies, state, appended = play(suite, item, gold_dialogue(suite, item))
    assert any("'name': 'sort'" in m for m in appended)  # the revealed docs reached the agent at turn 3
    assert suite.score(item, suite.final_response(item, replies, state)) == (1.0, True)


def test_long_context_items_execute_with_bfcl_long_context() -> None:
    suite = BFCLMultiTurnSuite(categories=("multi_turn_long_context",))
    item = next(i for i in suite.items(20, 0) if "GorillaFileSystem" in i.data["entry"]["involved_classes"])
    as_base = {**item.data["entry"], "id": item.data["entry"]["id"].replace("long_context", "base")}
    listing = ["ls(a=True)"]
    (long_out,), (base_out,) = (
        suite._run_jobs([{"kind": "execute", "entry": e, "steps": [listing]}])[0] for e in (item.data["entry"], as_base)
    )
    assert len(long_out) > len(base_out)  # BFCL's executor filled the file system for long context


@pytest.mark.slow
def test_each_new_category_runs_on_the_tiny_model(tiny_generator) -> None:  # type: ignore[no-untyped-def]
    for category in NEW:
        suite = BFCLMultiTurnSuite(categories=(category,), max_steps_per_turn=1)
        (item,) = suite.items(1, seed=4)
        # The real prompt documents every function of the involved classes (~4k tokens: minutes on 2 CPU
        # cores) and long-context results are long: keep the ground truth's functions that the item shows
        # from the start, and its first two turns, so that generate, execute, next turn stay quick.
        used = {call.split("(")[0] for turn in item.answer for call in turn}
        shown = [f for f in item.data["functions"] if f["name"] in used]
        item.messages[0] = {"role": "system", "content": system_prompt(shown)}
        item.data["turns"] = item.data["turns"][:2]
        frame = evaluate_suite(tiny_generator, suite, [item], "tiny", max_new_tokens=8)
        assert len(frame) == 1 and frame["score"][0] == 0.0, category  # two turns of more: incomplete
        recorded = json.loads(frame["response"][0])
        assert len(recorded["turns"]) == 2 and all(recorded["turns"]), category
