"""Which of two objects is on the left? Both candidates are shown inside \\boxed{}.

Skill: spatial_reasoning. Kind: game. Starter environment (data/starter_envs/): easy enough that the
embedded 135M model wins some plays from the first step, so its GRPO groups have reward variance.

The first observation places two objects ("The cup is to the right of the key.") and asks which one is on
the left, offering both as "\\boxed{key} or \\boxed{cup}" in random order. The relation is "left of" or
"right of" at random, so repeating the first object named is right only half the time. The first reply
with a \\boxed{} is final (the last \\boxed{} of the reply counts): reward 1 for the object on the left,
else 0. A reply without \\boxed{} gets the question again (up to max_turns).

Measured base win rate: 22/64 = 0.344 (the embedded SmolLM2-135M, no hint, the tiny preset's
sampling and limits: temperature 0.6, top-p 0.95, top-k 20, 4 turns of 48 tokens; seeds 100000-100063; 2026-12-03).
"""

import random

from spade_env import parse_boxed

_OBJECTS = ["cat", "dog", "cup", "lamp", "book", "shoe", "key", "ball", "vase", "clock", "chair", "plant"]


class LeftOrRightEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        self.left, self.right = rng.sample(_OBJECTS, 2)
        if rng.random() < 0.5:
            self.fact = "The %s is to the left of the %s." % (self.left, self.right)
        else:
            self.fact = "The %s is to the right of the %s." % (self.right, self.left)
        self.options = [self.left, self.right]
        rng.shuffle(self.options)
        self.turns = 0
        self.done = False
        return self._prompt(), {}

    def _prompt(self):
        return "%s What is on the left? The answer is \\boxed{%s} or \\boxed{%s}. Repeat the right answer." % (
            self.fact,
            self.options[0],
            self.options[1],
        )

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turns += 1
        guess = parse_boxed(action)
        if guess is None:
            truncated = self.turns >= self.max_turns
            return "No \\boxed{} in your reply. " + self._prompt(), 0.0, False, truncated, {}
        self.done = True
        if guess.lower() == self.left:
            return "Correct.", 1.0, True, False, {"correct": True}
        return "Wrong: the %s is on the left." % self.left, 0.0, True, False, {"correct": False}

    def solution(self):
        return "\\boxed{%s}" % self.left
