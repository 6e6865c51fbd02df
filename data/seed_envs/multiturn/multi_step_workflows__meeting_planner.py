"""Plan a meeting by a script of instructions, each given when the previous one is done.

Skill: multi_step_workflows. Kind: tool (multi-turn instructions).
"""

import json
import random

from spade_env import InstructionEnv

_PEOPLE = ["ana", "ben", "chen", "dara", "eli", "fay"]
_HOURS = list(range(9, 17))
_ROOMS = {"attic": 4, "library": 8, "hall": 20}


class MeetingPlannerEnv(InstructionEnv):
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.busy = {p: set(rng.sample(_HOURS, rng.randint(2, 5))) for p in _PEOPLE}
        self.pair = sorted(rng.sample(_PEOPLE, 2))
        free = [h for h in _HOURS if all(h not in self.busy[p] for p in self.pair)]
        if not free:  # keep one common hour so the script can be done
            keep = rng.choice(_HOURS)
            for p in self.pair:
                self.busy[p].discard(keep)
            free = [keep]
        self.hour = free[0]
        self.size = rng.randint(5, 15)
        self.room_needed = min((c, r) for r, c in _ROOMS.items() if c >= self.size)[1]
        self.meeting = None  # (hour, room) once booked
        self.attendees = set()
        a, b = self.pair
        self.user_messages = [
            "Book a meeting at the earliest hour when both %s and %s are free, in any room." % (a, b),
            "Invite %s and %s to it." % (a, b),
            "%d people will come in all: move it to the smallest room that seats them." % self.size,
        ]
        self.criteria = [
            lambda env: env.meeting is not None and env.meeting[0] == env.hour,
            lambda env: set(env.pair) <= env.attendees,
            lambda env: env.meeting is not None and env.meeting == (env.hour, env.room_needed),
        ]
        obs = (
            "You plan meetings through tools (busy_hours, rooms, book, invite). You will get instructions one "
            "at a time; each next one arrives in a tool result once the current one is done. Reply "
            "<answer>done</answer> when told that all steps are complete.\n"
            "Instruction 1: " + self.user_messages[0]
        )
        return obs, {}

    def tool_busy_hours(self, person: str) -> str:
        """The hours (9-16) at which a person is busy."""
        person = str(person).strip().lower()
        if person not in self.busy:
            return "error: unknown person; people: " + ", ".join(_PEOPLE)
        return "%s is busy at %s" % (person, ", ".join(str(h) for h in sorted(self.busy[person])))

    def tool_rooms(self) -> str:
        """The rooms and how many people each seats."""
        return ", ".join("%s (%d seats)" % (r, c) for r, c in sorted(_ROOMS.items(), key=lambda x: x[1]))

    def tool_book(self, hour: int, room: str) -> str:
        """Book (or move) the meeting to an hour and a room (attic, library or hall)."""
        try:
            hour = int(hour)
        except (TypeError, ValueError):
            return "error: hour must be a whole number from 9 to 16"
        room = str(room).strip().lower()
        if hour not in _HOURS or room not in _ROOMS:
            return "error: hour must be 9-16 and room one of " + ", ".join(_ROOMS)
        self.meeting = (hour, room)
        return "meeting booked at %d in the %s" % (hour, room)

    def tool_invite(self, person: str) -> str:
        """Invite a person to the booked meeting."""
        person = str(person).strip().lower()
        if self.meeting is None:
            return "error: book the meeting first"
        if person not in self.busy:
            return "error: unknown person; people: " + ", ".join(_PEOPLE)
        if self.meeting[0] in self.busy[person]:
            return "error: %s is busy at %d" % (person, self.meeting[0])
        self.attendees.add(person)
        return "invited " + person

    def solution(self):
        a, b = self.pair
        calls = [
            {"name": "book", "arguments": {"hour": self.hour, "room": "hall"}},
            {"name": "invite", "arguments": {"person": a}},
            {"name": "invite", "arguments": {"person": b}},
            {"name": "book", "arguments": {"hour": self.hour, "room": self.room_needed}},
        ]
        return " ".join("<tool_call>%s</tool_call>" % json.dumps(c) for c in calls) + " <answer>done</answer>"
