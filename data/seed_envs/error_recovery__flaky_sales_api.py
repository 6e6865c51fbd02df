"""A flaky sales API: recover from a transient auth failure and a retired API version to read a figure.

Skill: error_recovery. Kind: tool.
"""

import json
import random

from spade_env import ToolEnv

_REGIONS = ["north", "south", "east", "west", "central"]
_MONTHS = [
    "january",
    "february",
    "march",
    "april",
    "may",
    "june",
    "july",
    "august",
    "september",
    "october",
    "november",
    "december",
]
_PRODUCTS = ["kettles", "toasters", "blenders", "heaters", "fans", "lamps"]


class FlakySalesApiEnv(ToolEnv):
    def reset(self, seed=None):
        rng = random.Random(seed)
        self.product = rng.choice(_PRODUCTS)
        self.region = rng.choice(_REGIONS)
        self.month = rng.choice(_MONTHS)
        # Every (region, month) has its own figure, so the answer cannot be read off anything but
        # the one successful API call.
        self.sales = {(r, m): rng.randint(1000, 9999) for r in _REGIONS for m in _MONTHS}
        self.token = "tk-" + "".join(rng.choice("0123456789abcdef") for _ in range(8))
        self.version = rng.choice([2, 3, 4])  # the only supported version: revealed by an error
        self.token_calls = 0
        self.failed = []  # which failure modes the agent has run into (for partial reward)
        self.expected_answer = str(self.sales[(self.region, self.month)])
        obs = (
            f"Find how many {self.product} were sold in the {self.region} region in "
            f"{self.month.capitalize()}, using the company sales API. The API is unreliable: when "
            "a call fails, read the error message, fix the problem and call again.\n"
            "Tools:\n"
            "- get_token(): an access token for the sales API\n"
            "- get_sales(region, month, token, api_version): units sold in one region and month "
            "(api_version is an integer and defaults to 1)\n"
            "Call one tool per turn, for example:\n"
            '<tool_call>{"name": "get_sales", "arguments": {"region": "north", "month": "march", '
            '"token": "tk-0000", "api_version": 1}}</tool_call>\n'
            "Finish with the number only, e.g. <answer>1234</answer>. A wrong answer does not end the "
            "task: keep using the tools and answer again."
        )
        return obs, {}

    def tool_get_token(self) -> str:
        """Get an access token for the sales API."""
        self.token_calls += 1
        # Deterministic transient failure: the auth service is always "warming up" on the first call.
        if self.token_calls == 1:
            self._note("auth")
            return "error: 503 auth service is warming up; please retry get_token"
        return f"token: {self.token}"

    def tool_get_sales(self, region: str, month: str, token: str = "", api_version: int = 1) -> str:
        """Units sold in one region and month. Needs a token from get_token."""
        if str(token).strip() != self.token or self.token_calls < 2:
            return "error: 401 unauthorized: pass the token returned by get_token"
        try:
            version = int(api_version)
        except (TypeError, ValueError):
            return f"error: api_version must be an integer, got {str(api_version)[:20]!r}"
        if version != self.version:
            self._note("version")
            return f"error: 410 api_version {version} is not supported; retry with api_version={self.version}"
        region, month = str(region).strip().lower(), str(month).strip().lower()
        if region not in _REGIONS:
            return f"error: unknown region {region[:30]!r}; regions: {', '.join(_REGIONS)}"
        if month not in _MONTHS:
            return f"error: unknown month {month[:30]!r}; use a full month name like 'march'"
        self._note("data" if (region, month) == (self.region, self.month) else "other")
        return f"{self.product} sold in {region}, {month}: {self.sales[(region, month)]} units"

    def _note(self, what):
        if what not in self.failed:
            self.failed.append(what)

    def progress(self):
        # Hitting and getting past each failure is progress; the right figure is the last step.
        return len([w for w in self.failed if w in ("auth", "version", "data")]) / 4

    def solution(self):
        calls = [
            {"name": "get_token", "arguments": {}},
            {"name": "get_token", "arguments": {}},
            {
                "name": "get_sales",
                "arguments": {
                    "region": self.region,
                    "month": self.month,
                    "token": self.token,
                    "api_version": self.version,
                },
            },
        ]
        return (
            " ".join(f"<tool_call>{json.dumps(c)}</tool_call>" for c in calls)
            + f" <answer>{self.expected_answer}</answer>"
        )
