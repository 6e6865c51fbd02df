"""The reasoning-gym hard split as the authors evaluate games: 100 datasets at the paper's hard parameters,
8 sampled episodes each, their prompt, their sampling, their scoring; through the real runner."""

from __future__ import annotations

import pytest
from agents import InOrder

from spade_core.config import load_config
from spade_core.eval import get_suite
from spade_core.eval.reasoning_gym_hard import EPISODES, ReasoningGymHardSuite, episode_order, prompt
from spade_core.eval.rg_hard_configs import HARD_CONFIGS
from spade_core.eval.runner import evaluate_suite
from spade_core.llm.base import Completion, GenerationRequest, SamplingParams


def test_the_split_is_100_datasets_by_8_episodes_episode_major() -> None:
    suite = ReasoningGymHardSuite()
    assert len(HARD_CONFIGS) == 100 and EPISODES == 8
    order = episode_order()
    assert len(order) == 800 and len(set(order)) == 800 and order[100] == ("ab", 1)
    first = suite.items(3, seed=0)
    assert [i.item_id for i in first] == ["rghard/ab/0", "rghard/acre/0", "rghard/advanced_geometry/0"]
    assert [i.item_id for i in suite.items(3, seed=9)] == [i.item_id for i in first]  # the split is fixed
    item = suite.item("rghard/gcd/3")
    assert item.messages == [{"role": "user", "content": prompt(item.data["entry"]["question"])}]
    with pytest.raises(KeyError):
        suite.item("rghard/gcd/8")


def test_gold_answers_pass_wrong_ones_fail_and_a_box_is_read_when_no_tag() -> None:
    suite = ReasoningGymHardSuite()
    for item in [suite.item(f"rghard/{name}/1") for name in ("gcd", "basic_arithmetic", "syllogism", "spell_backward")]:
        assert suite.score(item, suite.gold_response(item)) == (1.0, True), item.item_id
    gcd = suite.item("rghard/gcd/0")
    assert suite.score(gcd, f"\\boxed{{{gcd.answer}}}") == (1.0, True)
    assert suite.score(gcd, "<answer>-1</answer>")[1] is False and suite.score(gcd, "no answer") == (0.0, False)


def test_the_runner_samples_as_the_authors_and_the_paper_games_preset_names_the_split() -> None:
    suite = get_suite("reasoning_gym_hard")
    items = suite.items(2, seed=0)
    seen: list[SamplingParams] = []

    class Recording(InOrder):
        def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
            seen.append(params)
            return super().generate(requests, params)

    model = Recording([suite.gold_response(items[0]), "<answer>wrong</answer>"])
    frame = evaluate_suite(model, suite, items, "scripted")
    assert frame["passed"].tolist() == [True, False]
    assert [r.messages for r in model.requests] == [i.messages for i in items]
    (params,) = seen
    assert (params.temperature, params.top_p, params.top_k, params.max_new_tokens) == (0.6, 0.8, 20, 8192)
    greedy: list[SamplingParams] = []
    other = get_suite("reasoning_gym")

    class Greedy(InOrder):
        def generate(self, requests: list[GenerationRequest], params: SamplingParams) -> list[Completion]:
            greedy.append(params)
            return super().generate(requests, params)

    evaluate_suite(Greedy(["x"]), other, other.items(1, seed=0), "scripted")
    assert (greedy[0].temperature, greedy[0].top_k) == (0.0, None)  # every other suite stays greedy
    cfg = load_config("paper-games").evaluation
    assert cfg.suites == ["reasoning_gym_hard"] and cfg.limit == len(HARD_CONFIGS) * EPISODES
