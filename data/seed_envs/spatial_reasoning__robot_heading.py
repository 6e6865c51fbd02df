"""Grid navigation with a heading: steer a robot that can only turn and step forward to a goal cell.

Skill: spatial_reasoning. Kind: game.
"""

import collections
import random

from spade_env import parse_boxed

_SIZE = 6
_HEADINGS = "NESW"  # clockwise, so turning right is +1 and turning left is -1
_DELTA = {"N": (-1, 0), "E": (0, 1), "S": (1, 0), "W": (0, -1)}
_ARROW = {"N": "^", "E": ">", "S": "v", "W": "<"}
_MAX_COMMANDS = 40


def _shortest(walls, start, heading, goal):
    """Breadth-first search over (row, col, heading): the shortest F/L/R program, or None."""
    first = (start[0], start[1], heading)
    prev = {first: None}
    queue = collections.deque([first])
    while queue:
        state = queue.popleft()
        r, c, h = state
        if (r, c) == goal:
            program = []
            while prev[state] is not None:
                state, cmd = prev[state]
                program.append(cmd)
            return "".join(reversed(program))
        dr, dc = _DELTA[h]
        turns = [
            ("L", (r, c, _HEADINGS[(_HEADINGS.index(h) - 1) % 4])),
            ("R", (r, c, _HEADINGS[(_HEADINGS.index(h) + 1) % 4])),
        ]
        nr, nc = r + dr, c + dc
        if 0 <= nr < _SIZE and 0 <= nc < _SIZE and (nr, nc) not in walls:
            turns.append(("F", (nr, nc, h)))
        for cmd, nxt in turns:
            if nxt not in prev:
                prev[nxt] = (state, cmd)
                queue.append(nxt)
    return None


class RobotHeadingEnv:
    def __init__(self, max_turns=12, **kwargs):
        self.max_turns = max_turns
        self.reset()

    def reset(self, seed=None):
        rng = random.Random(seed)
        cells = [(r, c) for r in range(_SIZE) for c in range(_SIZE)]
        # Redraw until the goal is reachable and far enough that a plan (not one lucky move) is needed.
        while True:
            walls = [cell for cell in cells if rng.random() < 0.25]
            free = [cell for cell in cells if cell not in walls]
            if len(free) < 2:
                continue
            start, goal = rng.sample(free, 2)
            heading = rng.choice(_HEADINGS)
            program = _shortest(walls, start, heading, goal)
            if program is not None and 6 <= len(program) <= 14:
                break
        self.walls, self.goal = walls, goal
        self.pos, self.heading = start, heading
        self.start = (start, heading)
        self.program = program
        self.turn_count = 0
        self.done = False
        obs = (
            f"A robot stands on a {_SIZE}x{_SIZE} grid. Rows are numbered 1-{_SIZE} from top to "
            f"bottom, columns 1-{_SIZE} from left to right; north is up.\n"
            "Map ('#' wall, '.' floor, 'G' goal, the robot is an arrow showing where it faces: "
            "^ north, > east, v south, < west):\n"
            f"{self._render()}\n"
            f"The robot is at row {start[0] + 1}, column {start[1] + 1}, facing {self._facing()}.\n"
            "Commands: F = step one cell forward in the facing direction, L = turn 90 degrees left "
            "in place, R = turn 90 degrees right in place. A forward step into a wall or off the map "
            "is blocked: the robot stops and ignores the rest of that program.\n"
            "Goal: get the robot onto G. Each turn send a program of commands; the robot runs it and "
            "reports where it ended up. Reaching G ends the game.\n"
            "Action format: \\boxed{<commands>}, e.g. \\boxed{FFRF}."
        )
        return obs, {}

    def _facing(self):
        return {"N": "north", "E": "east", "S": "south", "W": "west"}[self.heading]

    def _render(self):
        rows = []
        for r in range(_SIZE):
            row = ""
            for c in range(_SIZE):
                if (r, c) == self.pos:
                    row += _ARROW[self.heading]
                elif (r, c) == self.goal:
                    row += "G"
                else:
                    row += "#" if (r, c) in self.walls else "."
            rows.append(row)
        return "\n".join(rows)

    def _distance(self):
        program = _shortest(self.walls, self.pos, self.heading, self.goal)
        return len(program) if program is not None else len(self.program)

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.turn_count += 1
        truncated = self.turn_count >= self.max_turns
        content = parse_boxed(action)
        program = "".join(content.split()).replace(",", "").upper() if content is not None else ""
        if not program or len(program) > _MAX_COMMANDS or any(ch not in "FLR" for ch in program):
            return (
                (f"Invalid program. Use only the letters F, L and R (at most {_MAX_COMMANDS}), e.g. \\boxed{{FFRF}}."),
                0.0,
                False,
                truncated,
                {},
            )
        note = ""
        for i, cmd in enumerate(program):
            idx = _HEADINGS.index(self.heading)
            if cmd == "L":
                self.heading = _HEADINGS[(idx - 1) % 4]
            elif cmd == "R":
                self.heading = _HEADINGS[(idx + 1) % 4]
            else:
                dr, dc = _DELTA[self.heading]
                nr, nc = self.pos[0] + dr, self.pos[1] + dc
                if not (0 <= nr < _SIZE and 0 <= nc < _SIZE) or (nr, nc) in self.walls:
                    note = f" Command {i + 1} (F) was blocked, so the rest of the program was skipped."
                    break
                self.pos = (nr, nc)
            if self.pos == self.goal:
                self.done = True
                return "The robot reached G. Success!", 1.0, True, False, {"reached": True}
        # Partial reward: how much of the initial shortest plan has been covered (always < 0.5 here).
        progress = max(0.0, 1.0 - self._distance() / len(self.program))
        obs = (
            f"The robot is now at row {self.pos[0] + 1}, column {self.pos[1] + 1}, facing "
            f"{self._facing()}.{note}\n{self._render()}"
        )
        return obs, 0.5 * progress, False, truncated, {"reached": False}

    def solution(self):
        return "\\boxed{" + self.program + "}"
