"""Structural causal model: predict the values of two variables after an intervention do(X = v).

Skill: causal_inference. Kind: game.
"""

import random
import re

from spade_env import parse_boxed

# Variable names carry no digits so that the integers in an answer are unambiguous.
_THEMES = [
    ["rainfall", "reservoir", "pressure", "irrigation", "harvest", "exports", "prices"],
    ["ads", "visits", "signups", "support", "revenue", "bonus", "morale"],
    ["sunlight", "algae", "oxygen", "fish", "herons", "tourists", "fees"],
    ["voltage", "current", "heat", "fan", "noise", "wear", "repairs"],
]
_MAX_ANSWERS = 3


def _draw_model(rng, names):
    """A random linear structural model over a prefix of ``names``: (order, inputs, equations)."""
    count = rng.randint(5, 7)
    order = names[:count]  # the theme lists are already in a plausible causal order
    n_roots = 2 if count >= 6 else rng.randint(1, 2)
    roots = {n: rng.randint(1, 9) for n in order[:n_roots]}
    equations = {}
    for i in range(n_roots, count):
        parents = rng.sample(order[:i], min(i, rng.choice([1, 2, 2])))
        terms = [(rng.choice([-2, -1, 1, 1, 2, 3]), p) for p in parents]
        equations[order[i]] = (terms, rng.randint(-5, 5))
    return order, roots, equations


def _descendants(name, order, equations):
    """Every variable downstream of ``name``: exactly what an intervention on it can change."""
    found = []
    for child in order:  # topological order, so parents are classified before their children
        if child in equations and any(p == name or p in found for _, p in equations[child][0]):
            found.append(child)
    return found


def _evaluate(order, equations, roots, forced=None):
    """Values of every variable in topological order; ``forced`` = {name: value} cuts equations."""
    forced = forced or {}
    values = {}
    for name in order:
        if name in forced:
            values[name] = forced[name]
        elif name in roots:
            values[name] = roots[name]
        else:
            terms, const = equations[name]
            values[name] = sum(coef * values[parent] for coef, parent in terms) + const
    return values


def _render(name, terms, const):
    text = ""
    for coef, parent in terms:
        part = parent if abs(coef) == 1 else f"{abs(coef)}*{parent}"
        text += (
            part if not text and coef > 0 else f"-{part}" if not text else f" + {part}" if coef > 0 else f" - {part}"
        )
    if const:
        text += f" + {const}" if const > 0 else f" - {-const}"
    return f"{name} = {text}"


class InterventionEffectsEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        names = rng.choice(_THEMES)[:]
        # Redraw the graph until some non-input variable has both descendants and bystanders.
        while True:
            order, roots, equations = _draw_model(rng, names)
            desc_of = {n: _descendants(n, order, equations) for n in order}
            targets = [n for n in order if n not in roots and desc_of[n] and len(desc_of[n]) < len(order) - 1]
            if targets:
                break
        self.order, self.roots, self.equations = order, roots, equations
        self.before = _evaluate(order, equations, roots)
        # Intervene on a variable with descendants; ask about one descendant (it changes) and one
        # non-descendant (it does not: the intervention cuts only the arrows INTO the target, so
        # upstream and side variables keep their values - the classic trap). Non-input bystanders
        # are preferred because their equations must be read, not just copied from the inputs.
        self.target = rng.choice(targets)
        desc = desc_of[self.target]
        others = [n for n in order if n != self.target and n not in desc]
        others = [n for n in others if n not in roots] or others
        self.value = rng.choice([v for v in range(-5, 16) if v != self.before[self.target]])
        after = _evaluate(order, equations, roots, {self.target: self.value})
        asked = [rng.choice(desc), rng.choice(others)]
        rng.shuffle(asked)
        self.asked = asked
        self.answer = [after[a] for a in asked]
        self.turn_count = 0
        self.answers = 0
        self.done = False
        eqs = "\n".join(_render(n, *self.equations[n]) for n in order if n in self.equations)
        current = ", ".join(f"{n} = {self.before[n]}" for n in order)
        obs = (
            "A system is described by these structural equations (each variable is caused by the "
            "variables on the right-hand side of its equation):\n"
            f"{eqs}\n"
            f"Inputs set from outside (no equation): {', '.join(self.roots)}. Right now: {current}.\n\n"
            f"An experimenter now INTERVENES and forces {self.target} to {self.value} (do({self.target} "
            f"= {self.value})): its own equation is switched off, everything else keeps following its "
            "equation.\n"
            f"Question: after the intervention, what are the values of {asked[0]} and {asked[1]}?\n"
            f"You may submit at most {_MAX_ANSWERS} answers.\n"
            f"Action format: \\boxed{{<{asked[0]}>, <{asked[1]}>}}, e.g. \\boxed{{17, -3}}."
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
                (f"Malformed answer. Give two integers, {self.asked[0]} first: \\boxed{{17, -3}}."),
                0.0,
                False,
                truncated,
                {},
            )
        self.answers += 1
        guess = [int(n) for n in nums]
        if guess == self.answer:
            self.done = True
            return "Correct!", 1.0, True, False, {"correct": True}
        right = [self.asked[i] for i in range(2) if guess[i] == self.answer[i]]
        partial = 0.25 * len(right)
        verdict = f"only {right[0]} is right" if right else "both values are wrong"
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
