"""Gymnasium's own environment checker over a jailed environment, its verdict as a list of findings.

``spade env check`` prints these, and a test runs them over every bundled environment. The environment is
made the way a Gymnasium user makes it, ``gymnasium.make("spade/Jailed-v0", ...)`` (which adds Gymnasium's
passive checker), and ``gymnasium.utils.env_checker.check_env`` then runs on ``env.unwrapped``, as
Gymnasium recommends, with its render and close checks. The validator's checks (``spade_core.envs.validate``)
still decide admission; this is the Gymnasium user's view of the same environment.

A finding is a warning Gymnasium logged or the error that stopped ``check_env`` (it stops at its first
failed assertion, or at the first call the environment broke in the jail). A broken environment is data:
only a sandbox that cannot start raises, since that is not the environment's fault.
"""

from __future__ import annotations

import re
import traceback
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import gymnasium
from gymnasium.utils.env_checker import check_env

from sandbox.policy import SandboxUnavailable
from spade_core.envs.gym import ENV_ID, register

GYMNASIUM_DIR = Path(gymnasium.__file__).parent
# gymnasium.logger colours its messages and prefixes them with their level ("WARN: ...").
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_LEVEL_PREFIXES = ("WARN: ", "ERROR: ")


@dataclass(frozen=True)
class Finding:
    """One thing Gymnasium's checker reported: ``error`` stopped the check, ``warning`` did not."""

    level: Literal["error", "warning"]
    message: str


def gymnasium_warning(message: str) -> str | None:
    """The text of a warning gymnasium.logger wrote, without colour or level; None for anyone else's.

    >>> gymnasium_warning("\\x1b[33mWARN: The reward is a NaN value.\\x1b[0m")
    'The reward is a NaN value.'
    >>> gymnasium_warning("pandas is slow") is None
    True
    """
    text = _ANSI.sub("", message)
    for prefix in _LEVEL_PREFIXES:
        if text.startswith(prefix):
            return text.removeprefix(prefix)
    return None


def failed_check(exc: BaseException) -> str | None:
    """The name of the innermost Gymnasium checker function ``exc`` passed through (None outside them).

    The checker's assertion messages say what was wrong, not which check asked; the function name says it.
    """
    names = [
        frame.name
        for frame in traceback.extract_tb(exc.__traceback__)
        if Path(frame.filename).is_relative_to(GYMNASIUM_DIR) and frame.name.startswith(("check_", "env_"))
    ]
    return names[-1] if names else None


def describe_error(exc: BaseException) -> str:
    """One line: the check that failed, then the exception (its type where the message does not say it)."""
    message = str(exc).strip() or type(exc).__name__
    if not isinstance(exc, AssertionError | gymnasium.error.Error):
        message = f"{type(exc).__name__}: {message}"
    where = failed_check(exc)
    return f"{where}: {message}" if where else message


def check_jailed_env(*, path: str | Path | None = None, code: str | None = None, **kwargs: Any) -> list[Finding]:
    """Run Gymnasium's ``check_env`` on one environment in the jail; an empty list means it passed.

    Args:
        path: The environment's ``.py`` file (or give ``code``).
        code: The environment's source.
        **kwargs: Passed to :class:`~spade_core.envs.gym.JailedEnv` (``max_turns``, ``limits``,
            ``call_timeout_s``).

    Returns:
        The warnings Gymnasium logged, in order, then the error that stopped the check, if any.

    Raises:
        SandboxUnavailable: nsjail cannot start on this machine.
    """
    register()
    source = {"path": str(path)} if path is not None else {"code": code}
    return check_registered_env(ENV_ID, **source, **kwargs)


def check_registered_env(gym_id: str, **kwargs: Any) -> list[Finding]:
    """Run Gymnasium's ``check_env`` on ``gymnasium.make(gym_id, **kwargs)`` (an id
    :func:`~spade_core.envs.gym.register_export` registered, or ``spade/Jailed-v0`` with a path or code); an
    empty list means it passed.

    Raises:
        SandboxUnavailable: nsjail cannot start on this machine.
    """
    error: Finding | None = None
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every finding, not only the first of each kind
        env = gymnasium.make(gym_id, **kwargs)
        try:
            check_env(env.unwrapped)
        except SandboxUnavailable:
            raise
        except Exception as exc:
            error = Finding("error", describe_error(exc))
        finally:
            env.close()
    found = [Finding("warning", text) for w in caught if (text := gymnasium_warning(str(w.message))) is not None]
    return found + ([error] if error else [])
