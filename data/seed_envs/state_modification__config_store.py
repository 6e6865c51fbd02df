"""Edit a key-value configuration store so that it meets a change request, touching nothing else.

Skill: state_modification. Kind: tool.
"""

import json
import random

from spade_env import ToolEnv

_NUMERIC = [
    "cache.size_mb",
    "db.pool_size",
    "db.timeout_s",
    "http.max_connections",
    "queue.batch_size",
    "worker.threads",
    "upload.max_mb",
    "session.ttl_min",
]
_LEVELS = ["debug", "info", "warning", "error"]
_REGIONS = ["eu-west", "eu-north", "us-east", "us-west", "ap-south", "ap-east"]
_LEGACY = ["legacy.xml_export", "legacy.v1_routes", "legacy.old_auth", "legacy.ftp_sync", "legacy.soap_api"]


class ConfigStoreEnv(ToolEnv):
    def reset(self, seed=None):
        rng = random.Random(seed)
        numeric = rng.sample(_NUMERIC, 5)
        self.store = {k: str(rng.randint(3, 120)) for k in numeric}
        self.store["log.level"] = rng.choice(_LEVELS)
        self.store["log.default_level"] = rng.choice([v for v in _LEVELS if v != self.store["log.level"]])
        region, backup = rng.sample(_REGIONS, 2)
        self.store["deploy.region"] = region
        self.store["deploy.backup_region"] = backup
        legacy = rng.sample(_LEGACY, rng.randint(1, 2))
        for k in legacy:
            self.store[k] = rng.choice(["on", "off"])
        # Shuffle insertion order so list_keys does not reveal which keys are the targets.
        items = list(self.store.items())
        rng.shuffle(items)
        self.store = dict(items)
        self.original = dict(self.store)
        # Three edits whose target values are only knowable by reading the store first.
        double_key = rng.choice(numeric)
        copy_key, source_key = rng.choice(
            [("log.level", "log.default_level"), ("deploy.region", "deploy.backup_region")]
        )
        self.goal = {double_key: str(2 * int(self.store[double_key])), copy_key: self.store[source_key]}
        self.to_delete = legacy
        obs = (
            "You administer a configuration store (string keys and string values). Apply this "
            "change request:\n"
            f"1. Double the current value of {double_key}.\n"
            f"2. Set {copy_key} to the current value of {source_key}.\n"
            '3. Delete every key whose name starts with "legacy.".\n'
            "Do not change or delete any other key. Tools (the store is only visible through them):\n"
            '- list_keys(prefix): key names starting with prefix ("" lists all)\n'
            "- get(key): the value of a key\n"
            "- set(key, value): set a key to a value\n"
            "- delete(key): remove a key\n"
            "Call one tool per turn, for example:\n"
            '<tool_call>{"name": "get", "arguments": {"key": "cache.size_mb"}}</tool_call>\n'
            "When the store is in the requested state, reply <answer>done</answer>: the store is "
            "checked, and if it is not right yet you may keep using the tools."
        )
        return obs, {}

    def tool_list_keys(self, prefix: str = "") -> str:
        """List the key names that start with `prefix` ("" for all keys)."""
        keys = [k for k in self.store if k.startswith(str(prefix))]
        return ", ".join(keys) if keys else f"no keys start with {str(prefix)[:40]!r}"

    def tool_get(self, key: str) -> str:
        """Read the value of one key."""
        key = str(key).strip()
        if key not in self.store:
            return f"error: no key {key[:60]!r}; use list_keys to see the keys"
        return f"{key} = {self.store[key]}"

    def tool_set(self, key: str, value: str) -> str:
        """Set a key to a value (creates the key if it does not exist)."""
        key, value = str(key).strip(), str(value).strip()
        if not key or len(key) > 60 or len(value) > 200:
            return "error: key must be 1-60 characters and value at most 200"
        self.store[key] = value
        return f"ok: {key} = {value}"

    def tool_delete(self, key: str) -> str:
        """Delete one key."""
        key = str(key).strip()
        if key not in self.store:
            return f"error: no key {key[:60]!r}"
        del self.store[key]
        return f"ok: deleted {key}"

    def _checks(self):
        """One boolean per requirement: each goal key, each deletion, and 'nothing else changed'."""
        checks = [self.store.get(k) == v for k, v in self.goal.items()]
        checks += [k not in self.store for k in self.to_delete]
        untouched = {k: v for k, v in self.original.items() if k not in self.goal and k not in self.to_delete}
        others = {k: v for k, v in self.store.items() if k not in self.goal and k not in self.to_delete}
        checks.append(others == untouched)
        return checks

    def is_solved(self):
        return all(self._checks())

    def progress(self):
        # The "nothing else changed" check already holds at the start, so it earns no credit alone.
        checks = self._checks()
        return sum(checks[:-1]) / len(checks) if checks[-1] else 0.0

    def solution(self):
        calls = [{"name": "set", "arguments": {"key": k, "value": v}} for k, v in self.goal.items()]
        calls += [{"name": "delete", "arguments": {"key": k}} for k in self.to_delete]
        return " ".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls) + " <answer>done</answer>"
