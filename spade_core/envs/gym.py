"""``JailedEnv``: a jailed environment as a real ``gymnasium.Env`` with printable ``Text`` spaces.

    from spade_core.envs.gym import register
    register()
    env = gymnasium.make("spade/Jailed-v0", path="data/seed_envs/logical_deduction__seating_row.py")

Unlike the pipeline (which records failures as rows), a Gymnasium user expects exceptions: a failing
call raises :class:`JailedEnvError` carrying the sandbox's ``error_type``.
"""

from __future__ import annotations

import string
from pathlib import Path
from typing import Any

import gymnasium
from gymnasium import spaces

from sandbox.jail import CallResult
from sandbox.policy import JailLimits
from sandbox.session import EnvSession

ENV_ID = "spade/Jailed-v0"
MAX_TEXT = 65536


class JailedEnvError(RuntimeError):
    """A jailed call failed; ``error_type`` is the sandbox classification."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type


class JailedEnv(gymnasium.Env[str, str]):
    """A generated (or seed) environment running in nsjail, driven through the Gymnasium API."""

    metadata = {"render_modes": ["ansi"]}  # noqa: RUF012 - Gymnasium's convention

    def __init__(
        self,
        code: str | None = None,
        path: str | Path | None = None,
        max_turns: int = 12,
        limits: JailLimits | None = None,
        call_timeout_s: float = 5.0,
        render_mode: str | None = None,
    ) -> None:
        if (code is None) == (path is None):
            raise ValueError("JailedEnv needs exactly one of code= or path=")
        if path is not None:
            if not Path(path).is_file():
                raise FileNotFoundError(f"environment file {str(path)!r} does not exist")
            code = Path(path).read_text()
        assert code is not None
        self.code = code
        self.max_turns = max_turns
        self.render_mode = render_mode
        self.observation_space = spaces.Text(max_length=MAX_TEXT, min_length=0, charset=string.printable)
        self.action_space = spaces.Text(max_length=MAX_TEXT, min_length=0, charset=string.printable)
        self._session = EnvSession(code, max_turns=max_turns, limits=limits, call_timeout_s=call_timeout_s)
        self._opened = False
        self._last_obs = ""
        self.tools: list[dict[str, Any]] = []
        self.kind: str | None = None

    def _check(self, result: CallResult) -> dict[str, Any]:
        if not result.ok:
            raise JailedEnvError(result.error_type or "jail_error", result.message or "")
        return result.data

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        if not self._opened:
            self._check(self._session.open())
            self._opened = True
            self.tools, self.kind = self._session.tools, self._session.kind
        data = self._check(self._session.reset(seed))
        self._last_obs = data["obs"]
        return data["obs"], dict(data.get("info") or {})

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if not self._opened:
            raise JailedEnvError("contract_error", "call reset() before step()")
        data = self._check(self._session.step(str(action)))
        self._last_obs = data["obs"]
        return (
            data["obs"],
            float(data["reward"]),
            bool(data["terminated"]),
            bool(data["truncated"]),
            dict(data.get("info") or {}),
        )

    def solution(self) -> str:
        return str(self._check(self._session.solution())["solution"])

    def render(self) -> str | None:
        return self._last_obs if self.render_mode == "ansi" else None

    def close(self) -> None:
        self._session.close()
        super().close()


def register() -> None:
    """Register ``spade/Jailed-v0`` with Gymnasium (idempotent; explicit, not an import side effect)."""
    if ENV_ID not in gymnasium.registry:
        gymnasium.register(id=ENV_ID, entry_point="spade_core.envs.gym:JailedEnv")
