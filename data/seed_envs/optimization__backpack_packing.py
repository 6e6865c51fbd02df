"""0/1 knapsack: choose the set of hiking items with the highest total value under a weight limit.

Skill: optimization. Kind: game.
"""

import random
import re

from spade_env import parse_boxed

_ITEMS = [
    "tent",
    "stove",
    "rope",
    "lantern",
    "camera",
    "novel",
    "blanket",
    "compass",
    "kettle",
    "binoculars",
    "hammock",
    "radio",
    "map",
    "flask",
    "axe",
    "tarp",
]
_COUNT = 9
_MAX_SUBMISSIONS = 4  # 512 possible packings: a handful of blind tries essentially never hits the best


class BackpackPackingEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        names = rng.sample(_ITEMS, _COUNT)
        self.items = [(n, rng.randint(1, 9), rng.randint(2, 20)) for n in names]  # (name, kg, value)
        total = sum(w for _, w, _ in self.items)
        self.capacity = max(5, int(total * rng.uniform(0.35, 0.55)))
        # Exhaustive search over all 2^9 packings gives the true optimum to grade against.
        best_value, best_mask = -1, 0
        for mask in range(1 << _COUNT):
            weight = sum(self.items[i][1] for i in range(_COUNT) if mask >> i & 1)
            value = sum(self.items[i][2] for i in range(_COUNT) if mask >> i & 1)
            if weight <= self.capacity and value > best_value:
                best_value, best_mask = value, mask
        self.best_value = best_value
        self.best = [self.items[i][0] for i in range(_COUNT) if best_mask >> i & 1]
        self.turn_count = 0
        self.submissions = 0
        self.done = False
        table = "\n".join(f"- {n}: {w} kg, value {v}" for n, w, v in self.items)
        obs = (
            f"You are packing a backpack that can carry at most {self.capacity} kg. Available items "
            "(each can be taken at most once):\n"
            f"{table}\n\n"
            "Goal: choose the items with the HIGHEST possible total value whose total weight is at "
            f"most {self.capacity} kg. Only an optimal packing wins. You may submit at most "
            f"{_MAX_SUBMISSIONS} packings; after each I report its weight and value and whether a "
            "better one exists.\n"
            "Action format: end your reply with the chosen item names separated by commas, e.g. "
            f"\\boxed{{{self.items[0][0]}, {self.items[1][0]}}}."
        )
        return obs, {}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        content = parse_boxed(action)
        words = [w.strip().lower() for w in re.split(r"[,;\n]", content)] if content is not None else []
        words = [w for w in words if w]
        lookup = {n: (w, v) for n, w, v in self.items}
        unknown = [w for w in words if w not in lookup]
        if content is None or len(content) > 500 or not words or unknown or len(set(words)) != len(words):
            hint = f" Unknown item(s): {', '.join(unknown[:5])[:200]}." if unknown else ""
            return (
                (
                    "Malformed packing: list distinct item names from the table, separated by commas, "
                    f"e.g. \\boxed{{{self.items[0][0]}, {self.items[1][0]}}}.{hint}"
                ),
                0.0,
                False,
                truncated,
                {},
            )
        self.submissions += 1
        weight = sum(lookup[w][0] for w in words)
        value = sum(lookup[w][1] for w in words)
        if weight <= self.capacity and value == self.best_value:
            self.done = True
            return (f"Optimal! Weight {weight} kg, value {value}.", 1.0, True, False, {"value": value, "optimal": True})
        if weight > self.capacity:
            verdict, partial = f"too heavy ({weight} kg > {self.capacity} kg)", 0.0
        else:
            verdict = f"weight {weight} kg, value {value}; a packing with a higher value exists"
            partial = 0.5 * value / self.best_value
        left = _MAX_SUBMISSIONS - self.submissions
        if left <= 0:
            self.done = True
            return f"Not optimal: {verdict}. No submissions left.", partial, True, False, {"value": value}
        return (f"Not optimal: {verdict}. {left} submission(s) left.", partial, False, truncated, {"value": value})

    def solution(self):
        return "\\boxed{" + ", ".join(self.best) + "}"
