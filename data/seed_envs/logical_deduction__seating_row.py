"""Logic puzzle: deduce the left-to-right seating order of six people from a set of clues.

Skill: logical_deduction. Kind: game.
"""

import itertools
import random
import re

from spade_env import parse_boxed

_NAMES = [
    "Ada",
    "Ben",
    "Cleo",
    "Dev",
    "Eli",
    "Fay",
    "Gus",
    "Hana",
    "Ivo",
    "Jon",
    "Kim",
    "Lea",
    "Max",
    "Nia",
    "Omar",
    "Pia",
]
_SIZE = 6
_MAX_ANSWERS = 3  # a hard cap on full answers keeps blind guessing among 720 orders hopeless


def _holds(clue, pos):
    """Whether ``clue`` is true for a seating given as {name: seat index 0..5}."""
    kind, args = clue[0], clue[1:]
    if kind == "seat":
        return pos[args[0]] == args[1]
    if kind == "not_seat":
        return pos[args[0]] != args[1]
    if kind == "left_of":
        return pos[args[0]] < pos[args[1]]
    if kind == "right_next":
        return pos[args[1]] == pos[args[0]] + 1
    if kind == "adjacent":
        return abs(pos[args[0]] - pos[args[1]]) == 1
    if kind == "not_adjacent":
        return abs(pos[args[0]] - pos[args[1]]) != 1
    if kind == "end":
        return pos[args[0]] in (0, _SIZE - 1)
    if kind == "between":
        return min(pos[args[0]], pos[args[2]]) < pos[args[1]] < max(pos[args[0]], pos[args[2]])
    if kind == "gap":
        return abs(pos[args[0]] - pos[args[1]]) - 1 == args[2]
    return False


def _text(clue):
    kind, a = clue[0], clue[1:]
    if kind == "seat":
        return f"{a[0]} sits in seat {a[1] + 1}."
    if kind == "not_seat":
        return f"{a[0]} does not sit in seat {a[1] + 1}."
    if kind == "left_of":
        return f"{a[0]} sits somewhere to the left of {a[1]}."
    if kind == "right_next":
        return f"{a[1]} sits immediately to the right of {a[0]}."
    if kind == "adjacent":
        return f"{a[0]} and {a[1]} sit next to each other."
    if kind == "not_adjacent":
        return f"{a[0]} and {a[1]} do not sit next to each other."
    if kind == "end":
        return f"{a[0]} sits at one of the two ends of the row."
    if kind == "between":
        return f"{a[1]} sits somewhere between {a[0]} and {a[2]}."
    return f"Exactly {a[2]} {'person sits' if a[2] == 1 else 'people sit'} between {a[0]} and {a[1]}."


def _true_clues(order):
    """Every clue of every kind that the hidden order satisfies (a list, so order is deterministic)."""
    pos = {name: i for i, name in enumerate(order)}
    clues = []
    for x in order:
        clues.append(("seat", x, pos[x]))
        clues += [("not_seat", x, k) for k in range(_SIZE) if k != pos[x]]
        clues.append(("end", x))
        for y in order:
            if x == y:
                continue
            clues += [("left_of", x, y), ("right_next", x, y), ("adjacent", x, y), ("not_adjacent", x, y)]
            if abs(pos[x] - pos[y]) > 1:  # a gap of 0 would just repeat "next to each other"
                clues.append(("gap", x, y, abs(pos[x] - pos[y]) - 1))
            clues += [("between", x, y, z) for z in order if z not in (x, y)]
    return [c for c in clues if _holds(c, pos)]


class SeatingRowEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        people = rng.sample(_NAMES, _SIZE)
        self.order = people[:]
        rng.shuffle(self.order)
        candidates = _true_clues(self.order)
        rng.shuffle(candidates)
        # Greedy: keep a clue only if it rules out some still-possible order, until one is left.
        # Direct "X sits in seat k" clues make the puzzle trivial, so at most one is allowed.
        remaining = [dict((n, i) for i, n in enumerate(p)) for p in itertools.permutations(people)]
        clues = []
        for clue in candidates:
            if len(remaining) == 1:
                break
            if clue[0] == "seat" and any(c[0] == "seat" for c in clues):
                continue
            kept = [p for p in remaining if _holds(clue, p)]
            if len(kept) < len(remaining):
                clues.append(clue)
                remaining = kept
        # Drop clues that turned out redundant, so every clue matters to the deduction.
        for clue in list(reversed(clues)):
            rest = [c for c in clues if c is not clue]
            perms = itertools.permutations(people)
            count = 0
            for p in perms:
                pos = {n: i for i, n in enumerate(p)}
                if all(_holds(c, pos) for c in rest):
                    count += 1
                    if count > 1:
                        break
            if count == 1:
                clues = rest
        self.people = sorted(people)
        self.clues = clues
        self.turn_count = 0
        self.answers = 0
        self.done = False
        lines = "\n".join(f"{i + 1}. {_text(c)}" for i, c in enumerate(clues))
        obs = (
            f"Six people - {', '.join(self.people)} - sit in one row of seats numbered 1 to 6 from "
            "left to right, one person per seat. Exactly one seating satisfies all these clues:\n"
            f"{lines}\n\n"
            "Give the full seating from seat 1 (left) to seat 6 (right). You may submit at most "
            f"{_MAX_ANSWERS} complete answers; after a wrong one I list the clues it breaks.\n"
            "Action format: end your reply with \\boxed{name1, name2, name3, name4, name5, name6}, "
            f"e.g. \\boxed{{{', '.join(self.people)}}}."
        )
        return obs, {}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        content = parse_boxed(action)
        names = re.findall(r"[A-Za-z]+", content) if content is not None and len(content) <= 300 else []
        lookup = {p.lower(): p for p in self.people}
        guess = [lookup.get(n.lower()) for n in names]
        if len(guess) != _SIZE or None in guess or len(set(guess)) != _SIZE:
            return (
                (
                    "Malformed answer: list each of " + ", ".join(self.people) + " exactly once, "
                    "seat 1 first, like \\boxed{" + ", ".join(self.people) + "}."
                ),
                0.0,
                False,
                truncated,
                {},
            )
        self.answers += 1
        if guess == self.order:
            self.done = True
            return "Correct - that is the seating.", 1.0, True, False, {"correct": True}
        pos = {n: i for i, n in enumerate(guess)}
        broken = [str(i + 1) for i, c in enumerate(self.clues) if not _holds(c, pos)]
        partial = 0.5 * (len(self.clues) - len(broken)) / len(self.clues)
        left = _MAX_ANSWERS - self.answers
        if left <= 0:
            self.done = True
            return (
                (f"Wrong; it breaks clue(s) {', '.join(broken) or 'none'}. No answers left."),
                partial,
                True,
                False,
                {"correct": False},
            )
        msg = f"Wrong. Your seating breaks clue(s) {', '.join(broken)}." if broken else "Wrong."
        return msg + f" {left} answer(s) left.", partial, False, truncated, {"correct": False}

    def solution(self):
        return "\\boxed{" + ", ".join(self.order) + "}"
