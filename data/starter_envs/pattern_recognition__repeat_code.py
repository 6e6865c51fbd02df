"""Repeat a code word that the observation already shows inside \\boxed{}: a pure answer-format task.

Skill: pattern_recognition. Kind: game. Starter environment (data/starter_envs/): easy enough that the
embedded 135M model wins some plays from the first step, so its GRPO groups have reward variance.

The first observation reads "The answer is \\boxed{falcon32}. Repeat the answer."; the code is a word plus a
two-digit number (900 codes). The first reply with a \\boxed{} is final: reward 1 if it holds exactly the
code, else 0. A reply without \\boxed{} is answered with the instruction again (up to max_turns).

Measured base win rate: 12/64 = 0.188 (the embedded SmolLM2-135M, no hint, the tiny preset's
sampling and limits: temperature 0.6, top-p 0.95, top-k 20, 4 turns of 48 tokens; seeds 100000-100063; 2026-12-03).
"""

import random

from spade_env import parse_boxed

_WORDS = ["falcon", "copper", "meadow", "violin", "lantern", "pepper", "harbor", "canyon", "walnut", "orchid"]


class RepeatCodeEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.code = rng.choice(_WORDS) + str(rng.randint(10, 99))
        self.turns = 0
        self.done = False
        return self._prompt(), {}

    def _prompt(self):
        return "The answer is \\boxed{%s}. Repeat the answer." % self.code

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turns += 1
        guess = parse_boxed(action)
        if guess is None:
            truncated = self.turns >= self.max_turns
            return "No \\boxed{} in your reply. " + self._prompt(), 0.0, False, truncated, {}
        self.done = True
        if guess == self.code:
            return "Correct.", 1.0, True, False, {"correct": True}
        return "Wrong: the answer was \\boxed{%s}." % self.code, 0.0, True, False, {"correct": False}

    def solution(self):
        return "\\boxed{%s}" % self.code
