"""The reasoning-gym hard split, as the authors evaluate their games runs (their ``_games_gem.yaml``:
100 tasks × 8 episodes, 2 turns, temperature 0.6, 8192 tokens; ``gem_evaluator.py:86-185, 262-330``).

Each of the 100 datasets of :data:`~spade_core.eval.rg_hard_configs.HARD_CONFIGS` is built as theirs,
``create_dataset(name, size=500, seed=42, **params)``. An item is one episode: ``rghard/{dataset}/{k}`` asks
item ``k`` of that dataset (k < 8); their fresh environment per episode draws its item with GEM's seeded
``random.choice``, which is not reproduced. The prompt is theirs: reasoning-gym's canonical instruction with
a ``Problem:`` line holding the question and the environment's "Put your final answer within \\boxed{}."
suffix, as one user message. Sampling as theirs: temperature 0.6, top-p 0.8, top-k 20 (the suite's own;
every other suite decodes greedily). The reply is scored as their environment scores it: the last
``<answer>...</answer>``, else the last ``\\boxed{}``, through the dataset's ``score_answer``; a task
episode ends after one answer (their ``max_turns: 2`` is never reached). ``passed`` = full credit, their win.

Items come episode-major (episode 0 of every dataset, then episode 1, ...), so a small ``limit`` still covers
many datasets; ``limit`` 800 is the whole split. The evaluation seed does not change the items: the split
is fixed.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from spade_core.eval.base import EvalItem, Suite, last_boxed
from spade_core.eval.rg_hard_configs import HARD_CONFIGS

EPISODES = 8  # per task
DATASET_SEED = 42
DATASET_SIZE = 500
BOXED_SUFFIX = "\n\nPut your final answer within \\boxed{}."  # their environment's reset
_ANSWER = re.compile(r"<answer>\s*(.*?)\s*</answer>", re.DOTALL | re.IGNORECASE)


@functools.cache
def _dataset(name: str) -> Any:
    import reasoning_gym

    return reasoning_gym.create_dataset(name, size=DATASET_SIZE, seed=DATASET_SEED, **HARD_CONFIGS[name])


def prompt(question: str) -> str:
    """The authors' user message: reasoning-gym's default instruction, a ``Problem:`` line after its first
    sentence.

    >>> prompt("2 + 2?").splitlines()[1:4]
    ['Problem: 2 + 2?', '', 'Put your final answer within \\\\boxed{}.']
    """
    from reasoning_gym.utils import SYSTEM_PROMPTS

    first, rest = SYSTEM_PROMPTS["default"].split("\n", 1)
    return f"{first}\nProblem: {question}{BOXED_SUFFIX}\n{rest}"


def extract_answer(reply: str) -> str | None:
    r"""The answer their environment scores: the last ``<answer>`` payload, else the last ``\boxed{}``.

    >>> extract_answer("<answer>3</answer> no, <answer> 4 </answer>"), extract_answer(r"\boxed{5}")
    ('4', '5')
    """
    found = _ANSWER.findall(reply or "")
    return found[-1].strip() if found else last_boxed(reply or "")


def episode_order() -> list[tuple[str, int]]:
    """Every (dataset, episode) of the split, episode-major.

    >>> order = episode_order()
    >>> len(order), order[:2], order[100]
    (800, [('ab', 0), ('acre', 0)], ('ab', 1))
    """
    return [(name, k) for k in range(EPISODES) for name in sorted(HARD_CONFIGS)]


class ReasoningGymHardSuite(Suite):
    """The 100 datasets of the hard split, :data:`EPISODES` sampled episodes each."""

    name = "reasoning_gym_hard"
    max_new_tokens = 8192
    temperature = 0.6
    top_p = 0.8
    top_k = 20

    def items(self, limit: int, seed: int) -> list[EvalItem]:
        return [self._item(name, k) for name, k in episode_order()[:limit]]

    def item(self, item_id: str) -> EvalItem:
        prefix, name, episode = ([*item_id.split("/"), "", ""])[:3]
        if prefix != "rghard" or name not in HARD_CONFIGS or not episode.isdigit() or int(episode) >= EPISODES:
            raise KeyError(f"not a reasoning_gym_hard item id: {item_id!r}")
        return self._item(name, int(episode))

    def _item(self, name: str, episode: int) -> EvalItem:
        entry = _dataset(name)[episode]
        return EvalItem(
            suite=self.name,
            item_id=f"rghard/{name}/{episode}",
            messages=[{"role": "user", "content": prompt(entry["question"])}],
            answer=entry["answer"],
            data={"dataset": name, "episode": episode, "entry": entry},
        )

    def score(self, item: EvalItem, response: str) -> tuple[float, bool]:
        answer = extract_answer(response)
        if answer is None:
            return 0.0, False
        try:
            value = float(_dataset(item.data["dataset"]).score_answer(answer=answer, entry=item.data["entry"]))
        except Exception:  # a scorer choking on a malformed answer is a wrong answer
            return 0.0, False
        value = min(1.0, max(0.0, value)) if value == value else 0.0
        return value, value >= 1.0 - 1e-9

    def gold_response(self, item: EvalItem) -> str:
        return f"<answer>{item.answer}</answer>"
