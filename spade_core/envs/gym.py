"""``JailedEnv``: a jailed environment as a real ``gymnasium.Env`` with text spaces (:class:`AnyText`).

    from spade_core.envs.gym import register
    register()
    env = gymnasium.make("spade/Jailed-v0", path="data/seed_envs/logical_deduction__seating_row.py")

Unlike the pipeline (which records failures as rows), a Gymnasium user expects exceptions: a failing
call raises :class:`JailedEnvError` carrying the sandbox's ``error_type``.

Seeding follows Gymnasium's contract: ``reset(seed=s)`` hands ``s`` to the environment as it is (the episode
``spade env play --seed s`` shows), and seeds the wrapper's ``np_random``; a seedless ``reset()`` hands the
environment the next seed drawn from ``np_random``, so a seed given once fixes every later episode (vector
autoresets included). A design still implements ``reset(seed=None)`` as a fresh random instance: the
pipeline drives it through :class:`~sandbox.session.EnvSession`, never through this wrapper.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any

import gymnasium
import pandas as pd
from gymnasium import spaces

from sandbox.jail import CallResult
from sandbox.policy import JailLimits
from sandbox.session import EnvSession
from spade_core.envs.export import export_ids, read_export

ENV_ID = "spade/Jailed-v0"
EXPORT_NAMESPACE = "spade"
# Gymnasium's id grammar (gymnasium.envs.registration.ENV_ID_RE) allows word characters, ':', '.' and '-' in a
# name; an env_id is 16 hex, an RLVE pool row's ``rlve:NAME@dD`` has an '@'.
_NOT_IN_GYM_ID = re.compile(r"[^\w:.-]")
# Seeds drawn for seedless resets stay below 2**31: every design's `random.Random(seed)` takes any int, and a
# small one is what a person retypes into `spade env play --seed`.
EPISODE_SEED_BOUND = 2**31


class JailedEnvError(RuntimeError):
    """A jailed call failed; ``error_type`` is the sandbox classification."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type


class AnyText(spaces.Text):
    """A ``Text`` space that contains every string within its length bounds, whatever its characters.

    Gymnasium's ``Text`` contains only strings over its charset, but an observation is whatever text the
    environment writes (accents, arrows, degree signs) and the contract has ``step`` accept any string, so
    membership checks the length alone. ``sample`` still draws from the printable charset: a charset of all
    of Unicode would build a table of a million characters, and random printable strings are what the
    validator feeds ``step`` too.
    """

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def __eq__(self, other: object, /) -> bool:
        return isinstance(other, AnyText) and super().__eq__(other)

    def __repr__(self) -> str:
        return f"AnyText({self.min_length}, {self.max_length})"


def text_space(limits: JailLimits | None) -> AnyText:
    """The space of the text that crosses the jail: no longer than one reply frame can carry."""
    max_length = (limits or JailLimits()).max_message_bytes
    return AnyText(max_length=max_length, min_length=0, charset=string.printable)


class JailedEnv(gymnasium.Env[str, str]):
    """A generated (or seed) environment running in nsjail, driven through the Gymnasium API."""

    # Gymnasium's render checker asks every env that declares render modes for a frame rate. An ``ansi`` frame
    # is returned to the caller, never redrawn on a clock, so the rate is nominal (Gymnasium's toy-text games,
    # which render ``ansi`` too, declare 4).
    metadata = {"render_modes": ["ansi"], "render_fps": 4}  # noqa: RUF012 - Gymnasium's convention

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
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode={render_mode!r} is not one of {self.metadata['render_modes']} or None")
        if path is not None:
            if not Path(path).is_file():
                raise FileNotFoundError(f"environment file {str(path)!r} does not exist")
            code = Path(path).read_text()
        assert code is not None
        self.code = code
        self.max_turns = max_turns
        self.render_mode = render_mode
        self.observation_space = text_space(limits)
        self.action_space = text_space(limits)
        self._session = EnvSession(code, max_turns=max_turns, limits=limits, call_timeout_s=call_timeout_s)
        self._opened = False
        self._last_obs = ""
        self.tools: list[dict[str, Any]] = []
        self.kind: str | None = None
        self.episode_seed: int | None = None

    def _check(self, result: CallResult) -> dict[str, Any]:
        if not result.ok:
            raise JailedEnvError(result.error_type or "jail_error", result.message or "")
        return result.data

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        """Start an episode and return its first observation and info.

        Args:
            seed: The environment's seed for this episode, which also seeds ``np_random``; None draws the
                episode's seed from ``np_random`` (kept in :attr:`episode_seed`).
            options: Ignored: the contract's ``reset`` takes a seed only.
        """
        super().reset(seed=seed)
        if not self._opened:
            self._check(self._session.open())
            self._opened = True
            self.tools, self.kind = self._session.tools, self._session.kind
        self.episode_seed = seed if seed is not None else int(self.np_random.integers(EPISODE_SEED_BOUND))
        data = self._check(self._session.reset(self.episode_seed))
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


def export_gym_id(env_id: str) -> str:
    """The Gymnasium id an exported environment is registered under: ``spade/<env_id>`` (a character
    Gymnasium's ids do not allow becomes ``_``).

    >>> export_gym_id("68b5b61c505576a0")
    'spade/68b5b61c505576a0'
    >>> export_gym_id("rlve:Sorting@d0")
    'spade/rlve:Sorting_d0'
    """
    return f"{EXPORT_NAMESPACE}/{_NOT_IN_GYM_ID.sub('_', env_id)}"


def register_export(directory: str, *, endpoint_url: str | None = None, **kwargs: Any) -> list[str]:
    """Register every environment of the export in ``directory`` with Gymnasium, each as a
    :class:`JailedEnv` over its code (so ``gymnasium.make("spade/<env_id>")`` runs it in the jail, as
    ``spade/Jailed-v0`` does); returns the ids, in the export's order. Registering again replaces them.

    Args:
        directory: An export (``spade envs export``), local or ``s3://``.
        endpoint_url: The S3 endpoint of an ``s3://`` directory (default ``$AWS_ENDPOINT_URL``).
        **kwargs: Defaults for every environment's :class:`JailedEnv` (``max_turns``, ``limits``,
            ``call_timeout_s``); ``gymnasium.make`` may still override them.

    Raises:
        spade_core.envs.export.ExportError: ``directory`` holds no export, or two of its rows map to one id.
    """
    frame = read_export(directory, endpoint_url=endpoint_url)
    ids = [export_gym_id(e) for e in export_ids(frame)]
    export_ids(pd.DataFrame({"env_id": ids}))  # two env_ids that differ only in a replaced character
    for gym_id, code in zip(ids, frame["code"], strict=True):
        gymnasium.register(id=gym_id, entry_point="spade_core.envs.gym:JailedEnv", kwargs={"code": code, **kwargs})
    return ids
