"""reasoning-gym: procedurally generated math, logic and algorithmic problems, scored by each dataset's own
``score_answer``.

Held-out by construction: every dataset is built with the fixed seed :data:`HELDOUT_SEED`, which nothing in
SPADE's training uses (training plays generated and seed environments, never reasoning-gym), and the
evaluation seed only picks *which* indices of that virtual dataset are asked. So ``rg/gcd/48213`` names the
same problem on every machine and for every evaluation seed: ``create_dataset("gcd", seed=HELDOUT_SEED,
size=DATASET_SIZE)[48213]``.

The model is told to end with ``<answer>...</answer>`` (``\\boxed{...}`` is accepted too); a reply with
neither scores 0. ``passed`` means the dataset's score is 1 (some datasets give partial credit).
"""

from __future__ import annotations

import functools
import random
from typing import Any

from spade_core.eval.base import EvalItem, Suite, extract_final_answer

# Math, logic and algorithmic datasets interleaved, so that a small limit still covers all three kinds.
DATASETS: tuple[str, ...] = (
    "basic_arithmetic",
    "syllogism",
    "spell_backward",
    "gcd",
    "knights_knaves",
    "letter_counting",
    "chain_sum",
    "family_relationships",
    "lcm",
    "simple_equations",
)
HELDOUT_SEED = 2_718_281_828  # fixed: an item id alone identifies its problem
DATASET_SIZE = 1_000_000
SYSTEM_PROMPT = (
    "Solve the problem. Think briefly, then give only the final answer inside <answer></answer> tags, "
    "for example <answer>42</answer>."
)


@functools.cache
def _dataset(name: str) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(name, seed=HELDOUT_SEED, size=DATASET_SIZE)


def _split(limit: int, parts: int) -> list[int]:
    """``limit`` items over ``parts`` datasets as evenly as possible, earlier datasets first.

    >>> _split(12, 5)
    [3, 3, 2, 2, 2]
    """
    return [limit // parts + (1 if i < limit % parts else 0) for i in range(parts)]


class ReasoningGymSuite(Suite):
    """A fixed mix of reasoning-gym datasets; items interleave the datasets so small limits stay mixed."""

    name = "reasoning_gym"
    max_new_tokens = 512

    def __init__(self, datasets: tuple[str, ...] = DATASETS) -> None:
        self.datasets = datasets

    def items(self, limit: int, seed: int) -> list[EvalItem]:
        per_dataset: list[list[EvalItem]] = []
        for name, count in zip(self.datasets, _split(limit, len(self.datasets)), strict=True):
            rng = random.Random(f"spade-eval/reasoning_gym/{seed}/{name}")
            indices = rng.sample(range(DATASET_SIZE), count)
            per_dataset.append([self._item(name, index) for index in indices])
        rounds = max(map(len, per_dataset), default=0)
        return [items[i] for i in range(rounds) for items in per_dataset if i < len(items)]

    def item(self, item_id: str) -> EvalItem:
        prefix, name, index = ([*item_id.split("/"), "", ""])[:3]
        if prefix != "rg" or name not in self.datasets or not index.isdigit() or int(index) >= DATASET_SIZE:
            raise KeyError(f"not a reasoning_gym item id: {item_id!r}")
        return self._item(name, int(index))

    def _item(self, name: str, index: int) -> EvalItem:
        entry = _dataset(name)[index]
        return EvalItem(
            suite=self.name,
            item_id=f"rg/{name}/{index}",
            messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": entry["question"]}],
            answer=entry["answer"],
            data={"dataset": name, "index": index, "entry": entry},
        )

    def score(self, item: EvalItem, response: str) -> tuple[float, bool]:
        answer = extract_final_answer(response or "")
        if answer is None:
            return 0.0, False
        try:
            value = float(_dataset(item.data["dataset"]).score_answer(answer, item.data["entry"]))
        except Exception:  # a dataset's scorer choking on a malformed answer is a wrong answer
            return 0.0, False
        value = min(1.0, max(0.0, value)) if value == value else 0.0  # NaN -> 0
        return value, value >= 1.0

    def gold_response(self, item: EvalItem) -> str:
        return f"<answer>{item.answer}</answer>"
