"""Number sequences: infer the hidden rule from the first terms and give the next two terms.

Skill: pattern_recognition. Kind: game.
"""

import random
import re

from spade_env import parse_boxed

_MAX_ANSWERS = 4


def _make_sequence(rng, length):
    """(terms, rule description) for one of several rule families, drawn from ``rng``."""
    family = rng.choice(["arithmetic", "geometric", "quadratic", "fibonacci", "interleaved", "double_plus", "squares"])
    if family == "arithmetic":
        a, d = rng.randint(-20, 40), rng.choice([v for v in range(-9, 13) if v != 0])
        return [a + d * i for i in range(length)], f"add {d:+d} each time"
    if family == "geometric":
        a, r = rng.randint(1, 6), rng.choice([2, 3, -2])
        return [a * r**i for i in range(length)], f"multiply by {r} each time"
    if family == "quadratic":
        # Differences grow by a constant step: the second differences are constant.
        a, d, s = rng.randint(-5, 20), rng.randint(-3, 6), rng.randint(1, 4)
        terms = [a]
        for i in range(length - 1):
            terms.append(terms[-1] + d + s * i)
        return terms, f"differences start at {d} and grow by {s}"
    if family == "fibonacci":
        terms = [rng.randint(1, 9), rng.randint(1, 9)]
        while len(terms) < length:
            terms.append(terms[-1] + terms[-2])
        return terms, "each term is the sum of the two before it"
    if family == "interleaved":
        # Two arithmetic sequences take turns: odd positions follow one, even positions the other.
        a, d = rng.randint(0, 30), rng.choice([v for v in range(-6, 8) if v != 0])
        b, e = rng.randint(0, 30), rng.choice([v for v in range(-6, 8) if v != 0 and v != d])
        return (
            [a + d * (i // 2) if i % 2 == 0 else b + e * (i // 2) for i in range(length)],
            f"two interleaved sequences, steps {d:+d} and {e:+d}",
        )
    if family == "double_plus":
        a, c = rng.randint(1, 9), rng.choice([v for v in range(-3, 6) if v != 0])
        terms = [a]
        while len(terms) < length:
            terms.append(2 * terms[-1] + c)
        return terms, f"double the previous term, then add {c}"
    k, c = rng.randint(1, 4), rng.randint(-10, 10)
    return [(k + i) ** 2 + c for i in range(length)], f"consecutive squares from {k}^2, plus ({c:+d})"


class NextTermsEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        shown = rng.choice([6, 7, 8])
        terms, self.rule = _make_sequence(rng, shown + 2)
        self.shown, self.answer = terms[:shown], terms[shown:]
        self.turn_count = 0
        self.answers = 0
        self.done = False
        obs = (
            "Here are the first terms of an integer sequence that follows one simple hidden rule:\n"
            f"{', '.join(str(t) for t in self.shown)}, ?, ?\n\n"
            "Find the rule and give the next TWO terms, in order. You may submit at most "
            f"{_MAX_ANSWERS} answers; after a wrong one I say which of the two terms are right.\n"
            "Action format: end your reply with \\boxed{<next term>, <term after that>}, "
            "e.g. \\boxed{42, -7}."
        )
        return obs, {}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        content = parse_boxed(action)
        # Bounded digit runs: int() on a huge digit string raises in Python 3.11.
        nums = re.findall(r"-?\d{1,12}", content) if content is not None and len(content) <= 200 else []
        if len(nums) != 2:
            return (
                (
                    "Malformed answer. Give exactly two integers: \\boxed{<next term>, <term after "
                    "that>}, e.g. \\boxed{42, -7}."
                ),
                0.0,
                False,
                truncated,
                {},
            )
        self.answers += 1
        guess = [int(n) for n in nums]
        if guess == self.answer:
            self.done = True
            return f"Correct! The rule: {self.rule}.", 1.0, True, False, {"correct": True}
        right = [guess[i] == self.answer[i] for i in range(2)]
        partial = 0.25 * sum(right)
        verdict = (
            "the first term is right but the second is wrong"
            if right[0]
            else "the second term is right but the first is wrong"
            if right[1]
            else "both terms are wrong"
        )
        if self.answers >= _MAX_ANSWERS:
            self.done = True
            return f"Wrong: {verdict}. No answers left.", partial, True, False, {"correct": False}
        return (
            f"Wrong: {verdict}. {_MAX_ANSWERS - self.answers} answer(s) left.",
            partial,
            False,
            truncated,
            {"correct": False},
        )

    def solution(self):
        return f"\\boxed{{{self.answer[0]}, {self.answer[1]}}}"
