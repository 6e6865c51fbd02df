"""Word problem: recover two unknown counts from a total count and a weighted total.

Skill: mathematical_reasoning. Kind: game.
"""

import random
import re

from spade_env import parse_boxed

# Each story is the same 2x2 linear system (x + y = n, a*x + b*y = t) told differently, so the agent
# has to read the text instead of pattern-matching one template. Fields: the story (with {n}, {t},
# {a}, {b}), the first kind, the second kind, the noun for the count, the unit of the total, and
# whether the per-item weights are fixed by nature (legs) or drawn at random.
_STORIES = [
    (
        "A cinema sold {n} tickets for a total of {t} dollars. An adult ticket costs {a} dollars and a "
        "child ticket costs {b} dollars.",
        "adult tickets",
        "child tickets",
        "tickets",
        "dollars",
        None,
    ),
    (
        "A farmyard holds {n} animals, all of them chickens (2 legs) or sheep (4 legs). Together they have {t} legs.",
        "chickens",
        "sheep",
        "animals",
        "legs",
        (2, 4),
    ),
    (
        "A bakery sold {n} pastries and earned {t} coins. A croissant costs {a} coins and a muffin costs {b} coins.",
        "croissants",
        "muffins",
        "pastries",
        "coins",
        None,
    ),
    (
        "A jar holds {n} coins, each worth either {a} cents or {b} cents. The jar is worth {t} cents in total.",
        "{a}-cent coins",
        "{b}-cent coins",
        "coins",
        "cents",
        None,
    ),
]


class TwoUnknownsEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        story, first, second, noun, unit, fixed = _STORIES[rng.randrange(len(_STORIES))]
        if fixed:
            a, b = fixed
        else:
            a = rng.randint(2, 15)
            b = rng.choice([v for v in range(2, 25) if v != a])
        self.x, self.y = rng.randint(3, 40), rng.randint(3, 40)
        self.a, self.b = a, b
        self.n, self.t = self.x + self.y, a * self.x + b * self.y
        self.first = first.format(a=a, b=b)
        self.second = second.format(a=a, b=b)
        self.noun, self.unit = noun, unit
        self.turn_count = 0
        self.done = False
        obs = (
            story.format(n=self.n, t=self.t, a=a, b=b)
            + f"\n\nQuestion: how many {self.first} and how many {self.second} are there?\n"
            "Rules: you may answer several times (up to "
            f"{self.max_turns} turns); after a wrong answer I tell you which totals your counts "
            "would give.\n"
            f"Action format: end your reply with \\boxed{{<number of {self.first}>, "
            f"<number of {self.second}>}}, e.g. \\boxed{{12, 7}}."
        )
        return obs, {}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        content = parse_boxed(action)
        # Bounded digit runs: int() on a huge digit string raises in Python 3.11.
        nums = re.findall(r"-?\d{1,9}", content) if content is not None and len(content) <= 200 else []
        if len(nums) != 2:
            return (
                (
                    f"Malformed answer. End your reply with \\boxed{{<number of {self.first}>, "
                    f"<number of {self.second}>}}, e.g. \\boxed{{12, 7}}."
                ),
                0.0,
                False,
                truncated,
                {},
            )
        gx, gy = int(nums[0]), int(nums[1])
        if (gx, gy) == (self.x, self.y):
            self.done = True
            return "Correct!", 1.0, True, False, {"correct": True}
        # Partial credit per correct count; feedback recomputes both totals so the agent can check
        # its own algebra rather than being told the answer.
        partial = 0.2 * ((gx == self.x) + (gy == self.y))
        obs = (
            f"Not correct. {gx} {self.first} and {gy} {self.second} would make {gx + gy} {self.noun} "
            f"and {self.a * gx + self.b * gy} {self.unit}, but the story says {self.n} {self.noun} "
            f"and {self.t} {self.unit}. Try again."
        )
        return obs, partial, False, truncated, {"correct": False}

    def solution(self):
        return f"\\boxed{{{self.x}, {self.y}}}"
