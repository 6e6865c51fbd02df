"""Pick one person's answer out of a short list of boxed answers and repeat it.

Skill: logical_deduction. Kind: game. Starter environment (data/starter_envs/): easy enough that the
embedded 135M model wins some plays from the first step, so its GRPO groups have reward variance.

The first observation lists two people, each with a boxed code (a word plus a two-digit number), and asks
for one person's answer, e.g. "Ann: \\boxed{falcon32}\\nBen: \\boxed{copper71}\\nRepeat Ben's answer." The
first reply with a \\boxed{} is final (the last \\boxed{} of the reply counts): reward 1 if it holds the
asked person's code, else 0. A reply without \\boxed{} gets the question again (up to max_turns).

Measured base win rate: 19/64 = 0.297 (the embedded SmolLM2-135M, no hint, the tiny preset's
sampling and limits: temperature 0.6, top-p 0.95, top-k 20, 4 turns of 48 tokens; seeds 100000-100063; 2026-12-03).
"""

import random

from spade_env import parse_boxed

_NAMES = ["Ann", "Ben", "Cleo", "Dan", "Eva", "Finn", "Gus", "Hana"]
_WORDS = ["falcon", "copper", "meadow", "violin", "lantern", "pepper", "harbor", "canyon", "walnut", "orchid"]


class NamedAnswersEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.names = rng.sample(_NAMES, 2)
        self.codes = []
        while len(self.codes) < len(self.names):
            code = rng.choice(_WORDS) + str(rng.randint(10, 99))
            if code not in self.codes:
                self.codes.append(code)
        self.asked = rng.randrange(len(self.names))
        self.turns = 0
        self.done = False
        return self._prompt(), {}

    def _prompt(self):
        lines = ["%s: \\boxed{%s}" % (n, c) for n, c in zip(self.names, self.codes)]
        return "\n".join(lines) + "\nRepeat %s's answer." % self.names[self.asked]

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turns += 1
        guess = parse_boxed(action)
        if guess is None:
            truncated = self.turns >= self.max_turns
            return "No \\boxed{} in your reply.\n" + self._prompt(), 0.0, False, truncated, {}
        self.done = True
        answer = self.codes[self.asked]
        if guess == answer:
            return "Correct.", 1.0, True, False, {"correct": True}
        return "Wrong: %s's answer was \\boxed{%s}." % (self.names[self.asked], answer), 0.0, True, False, {}

    def solution(self):
        return "\\boxed{%s}" % self.codes[self.asked]
