"""Tidy a small file system by a script of instructions, each given when the previous one is done.

Skill: state_modification. Kind: tool (multi-turn instructions).
"""

import json
import random

from spade_env import InstructionEnv

_PROJECTS = ["apollo", "borealis", "cobalt", "delta", "ember", "fjord"]
_EXTENSIONS = ["txt", "csv", "log", "md"]


class FileWorkflowEnv(InstructionEnv):
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.cwd = "/home"
        self.dirs = {"/home", "/home/inbox", "/home/archive"}
        names = rng.sample(["notes", "budget", "draft", "report", "minutes", "plan", "todo", "summary"], 5)
        sizes = rng.sample(range(3, 90), 5)
        self.files = {"/home/inbox/%s.%s" % (n, rng.choice(_EXTENSIONS)): s for n, s in zip(names, sizes)}
        self.project = rng.choice(_PROJECTS)
        self.largest = max(self.files, key=self.files.get)
        self.smallest = min(self.files, key=self.files.get)
        self.user_messages = [
            "Create a directory named %s inside /home." % self.project,
            "Move the largest file in /home/inbox into /home/%s." % self.project,
            "Move the smallest file in /home/inbox into /home/archive.",
            "Finally, make /home/%s your current directory." % self.project,
        ]
        target = "/home/" + self.project
        largest_name = self.largest.rsplit("/", 1)[1]
        smallest_name = self.smallest.rsplit("/", 1)[1]
        self.criteria = [
            lambda env: target in env.dirs,
            lambda env: "%s/%s" % (target, largest_name) in env.files,
            lambda env: "/home/archive/%s" % smallest_name in env.files,
            lambda env: env.cwd == target,
        ]
        obs = (
            "You operate a small file system through tools (pwd, ls, cd, mkdir, mv). You will get "
            "instructions one at a time; each next one arrives in a tool result once the current one is "
            "done. Reply <answer>done</answer> when told that all steps are complete.\n"
            "Instruction 1: " + self.user_messages[0]
        )
        return obs, {}

    def _path(self, path):
        path = str(path).strip() or self.cwd
        if not path.startswith("/"):
            path = self.cwd.rstrip("/") + "/" + path
        return path.rstrip("/") or "/"

    def tool_pwd(self) -> str:
        """The current directory."""
        return self.cwd

    def tool_ls(self, path: str = "") -> str:
        """List a directory: subdirectories, then files with their sizes in KB."""
        path = self._path(path)
        if path not in self.dirs:
            return "error: no directory %r" % path[:80]
        subdirs = sorted(d.rsplit("/", 1)[1] + "/" for d in self.dirs if d.rsplit("/", 1)[0] == path)
        files = sorted("%s (%d KB)" % (f.rsplit("/", 1)[1], s) for f, s in self.files.items() if f.rsplit("/", 1)[0] == path)
        return ", ".join(subdirs + files) or "(empty)"

    def tool_cd(self, path: str) -> str:
        """Change the current directory."""
        path = self._path(path)
        if path not in self.dirs:
            return "error: no directory %r" % path[:80]
        self.cwd = path
        return "now in " + path

    def tool_mkdir(self, name: str) -> str:
        """Create a directory (a name is relative to the current directory)."""
        path = self._path(name)
        if path in self.dirs or path in self.files:
            return "error: %r already exists" % path[:80]
        if path.rsplit("/", 1)[0] not in self.dirs:
            return "error: the parent of %r does not exist" % path[:80]
        self.dirs.add(path)
        return "created " + path

    def tool_mv(self, source: str, destination_dir: str) -> str:
        """Move a file into a directory."""
        source, target = self._path(source), self._path(destination_dir)
        if source not in self.files:
            return "error: no file %r" % source[:80]
        if target not in self.dirs:
            return "error: no directory %r" % target[:80]
        moved = target.rstrip("/") + "/" + source.rsplit("/", 1)[1]
        self.files[moved] = self.files.pop(source)
        return "moved %s to %s" % (source, moved)

    def solution(self):
        target = "/home/" + self.project
        calls = [
            {"name": "mkdir", "arguments": {"name": target}},
            {"name": "mv", "arguments": {"source": self.largest, "destination_dir": target}},
            {"name": "mv", "arguments": {"source": self.smallest, "destination_dir": "/home/archive"}},
            {"name": "cd", "arguments": {"path": target}},
        ]
        return " ".join("<tool_call>%s</tool_call>" % json.dumps(c) for c in calls) + " <answer>done</answer>"
