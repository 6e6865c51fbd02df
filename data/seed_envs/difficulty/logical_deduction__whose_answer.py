"""Repeat one person's boxed word out of a list of people: the test bed's parent family, whose parameter
_NAMES sets the difficulty by its length (how many people the observation lists).

Skill: logical_deduction. Kind: game. Not part of the seed library: the parent of every design of the
designer's test bed (data/configs/designer-bench.yaml, benchmarks/designer_learning.py), where the designer
writes new values for the parameters below.

The first observation lists every person of _NAMES, each with a boxed word drawn from _WORDS, and asks for
one person's word, e.g. "Ann: \\boxed{falcon}\\nBen: \\boxed{copper}\\nRepeat Ben's answer." The people shown
are the distinct names, as many as _WORDS has distinct words (at least one). The first
reply with a \\boxed{} is final (the last \\boxed{} of the reply counts): reward 1 if it holds the asked
person's word and no other listed word (case-insensitive), else 0. A reply without \\boxed{} gets the
question again (up to max_turns).

Measured base win rate by people shown, 16 plays each (the embedded SmolLM2-135M, no hint, the
designer-bench preset's sampling and limits, evaluation seeds 2**32 + i; benchmarks/designer_learning.py at
load 1-2 on 2 cores; 2026-12-06): 1: 0.19, 2: 0.38, 3: 0.31, 4: 0.13, 6: 0.13, 8: 0.00, 12: 0.00. The 135M
agent copies a boxed word exactly in at most ~40% of its replies, so no length wins near 1; other phrasings
of the task and retries after a wrong answer did no better (benchmarks/README.md, designer_learning.py).
"""

import random

from spade_env import parse_boxed

_NAMES = ["Ann", "Ben", "Cleo", "Dan"]
_WORDS = ["falcon", "copper", "meadow", "violin", "lantern", "pepper", "harbor", "canyon", "walnut", "orchid"]


class WhoseAnswerEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        names = list(dict.fromkeys(str(n) for n in _NAMES)) or ["Ann"]
        words = list(dict.fromkeys(str(w) for w in _WORDS if str(w).strip())) or ["falcon"]
        count = min(len(names), len(words))
        self.names = rng.sample(names, count)
        self.words = rng.sample(words, count)
        self.asked = rng.randrange(count)
        self.turns = 0
        self.done = False
        return self._prompt(), {}

    def _prompt(self):
        lines = ["%s: \\boxed{%s}" % (n, w) for n, w in zip(self.names, self.words)]
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
        said = guess.strip().lower()
        answer = self.words[self.asked]
        others = [w for w in self.words if w != answer]
        if answer.lower() in said and not any(w.lower() in said for w in others):
            return "Correct.", 1.0, True, False, {"correct": True}
        return "Wrong: %s's answer was \\boxed{%s}." % (self.names[self.asked], answer), 0.0, True, False, {}

    def solution(self):
        return "\\boxed{%s}" % self.words[self.asked]
