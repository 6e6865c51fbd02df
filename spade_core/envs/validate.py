# Over 400 lines: the ordered check_* functions, read top to bottom in the order they run.
"""The environment validator (docs/DESIGN.md §7 step 4): small named checks, run in the jail, in order.

Like Gymnasium's ``env_checker``, each ``check_*`` function tests one property and its message shows the
actual value. Validation stops at the first failed check (later checks would only repeat the failure or
wait on a dead jail); ``checks`` maps every check that ran to whether it passed, and ``error_type`` is
the failed check's class: one of the sandbox's (the jail's verdict on the call the check made) or one of
the validator's own, ``nondeterministic``, ``unsolvable``, ``trivial``, all from the one taxonomy in
:mod:`sandbox.outcome`. Host-side parsing uses :mod:`ast` only: no generated code runs outside the jail.
Every step a full-mode check makes must give a reward in the contract's [-1, 1]
(:data:`~spade_core.envs.contract.REWARD_RANGE`; ``contract_error`` otherwise); the jail itself passes any
finite reward up to +-10, which the rollout engine clamps.

Three switches (``validation`` in the config):

- ``disabled_checks``: names from :data:`CHECK_NAMES` that are skipped. A skipped check is *not* recorded
  as passed: it is absent from ``checks`` and listed in ``skipped``, and the stored ``message`` ends with
  ``[disabled checks: a, b]`` (``validations.checks`` is a map of booleans, so the message carries it). The
  jail is still loaded before the first jailed check that runs, so with ``one_env_class`` off a load failure
  fails that next check; a disabled property can still fail a later check that depends on it (a ``reset``
  that raises fails every check that resets). An unknown name is a :class:`~spade_core.config.ConfigError`
  from :func:`validate_code` / :func:`validate_many` before any jail starts.
- ``mode: smoke``: instead of the 8 checks, the authors' smoke test (FIDELITY §3; their
  ``SyntheticGameEnv._validate_game_execution``), still in the jail: load (our loader: one class with
  ``reset``, ``step`` and ``solution``, built with ``max_turns``), ``reset(seed=42)`` giving a non-empty
  observation and an info dict, the 3 test actions ``\\boxed{1}``, ``\\boxed{test}``, ``\\boxed{42}``
  (stopping when the episode ends) each answered with a 5-tuple whose reward is in [-10, 10], then
  ``reset(seed=123)``. The result has the same shape; ``checks`` holds the 4 parts of the smoke test
  (:data:`SMOKE_CHECK_NAMES`, prefixed ``smoke_`` so smoke verdicts are recognisable in the store) and
  ``error_type`` is the jail's verdict or ``contract_error``. The jail's loader applies on top, as
  ``contract`` says: ``ours`` (a ``solution`` method must exist, 0/1 accepted as flags) or ``authors``
  (their smoke test's types exactly: no ``solution`` method needed, ``terminated`` / ``truncated`` real
  bools, ``reset`` may return the observation alone); both refuse non-finite rewards and rewards beyond
  +-10. No solvability, triviality or determinism check runs, as in the paper. ``disabled_checks`` does not
  apply in smoke mode (its names are still checked).
- ``reset_gate``: the authors' tool-use reset gate (:func:`reset_gate`) runs after the checks of either
  mode, recorded as ``checks["reset_gate"]``.
"""

from __future__ import annotations

import ast
import math
import random
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from sandbox.jail import CallResult
from sandbox.outcome import ErrorType
from sandbox.policy import JailLimits
from sandbox.session import EnvSession, run_parallel
from spade_core.config import VALIDATION_CHECKS, ConfigError, ValidationConfig
from spade_core.envs.contract import REWARD_RANGE, env_id_for, split_actions


class CheckFailed(Exception):
    """A check failed; carries the error type and a message that shows the offending value."""

    def __init__(self, error_type: ErrorType, message: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.message = message


@dataclass
class ValidationResult:
    env_id: str
    ok: bool
    error_type: ErrorType | None
    message: str | None
    checks: dict[str, bool]
    kind: str | None = None
    class_name: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    seconds: float = 0.0
    skipped: list[str] = field(default_factory=list)  # disabled checks: neither run nor passed

    def as_row(self) -> dict[str, Any]:
        return {
            "env_id": self.env_id,
            "ok": self.ok,
            "error_type": self.error_type,
            "message": self.message,
            "checks": dict(self.checks),
            "seconds": self.seconds,
        }


@dataclass
class _Context:
    code: str
    cfg: ValidationConfig
    session: EnvSession
    seeds: Sequence[int] = (0, 1)
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    loaded: CallResult | None = None  # the jail's load, once (the first jailed check that runs triggers it)

    def load(self) -> dict[str, Any]:
        """Load the environment into the jail (once); a failed load fails the check that needed it."""
        if self.loaded is None:
            self.loaded = self.session.open()
        return _require(self.loaded, "loading the environment")


def limits_from_config(cfg: ValidationConfig) -> JailLimits:
    return JailLimits(
        memory_mb=cfg.memory_mb,
        max_pids=cfg.max_pids,
        time_limit_s=cfg.jail_time_limit_s,
        cpu_seconds=cfg.jail_time_limit_s,
        max_message_bytes=cfg.max_message_kb * 1024,
    )


def garbage_actions(rng: random.Random, count: int) -> list[str]:
    """Arbitrary strings an agent might send: empty, malformed, huge, binary-ish, random printable."""
    fixed = [
        "",
        " ",
        "\\boxed{}",
        "\\boxed{" + "}" * 3,
        "<tool_call>not json</tool_call>",
        '<tool_call>{"name": 5}</tool_call>',
        "<answer></answer>",
        "ünïcødé 🎲 \u200b",
        "\x00\x01\x7f",
        "x" * 5000,
    ]
    randoms = ["".join(rng.choice(string.printable) for _ in range(rng.randint(1, 80))) for _ in range(count)]
    return fixed + randoms


def _require(result: CallResult, what: str) -> dict[str, Any]:
    if not result.ok:
        raise CheckFailed(result.error_type or "jail_error", f"{what}: {result.message}")
    return result.data


# -- the checks --------------------------------------------------------------------------------------
def check_parses(ctx: _Context) -> None:
    """The source parses as Python."""
    try:
        ast.parse(ctx.code)
    except SyntaxError as exc:
        raise CheckFailed("syntax_error", f"line {exc.lineno}: {exc.msg}: {(exc.text or '').strip()!r}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; absurdly deep nesting
        raise CheckFailed("syntax_error", f"{type(exc).__name__}: {str(exc)[:200]}") from None


def check_one_env_class(ctx: _Context) -> None:
    """Exactly one class with reset and step, constructible with max_turns (loaded in the jail)."""
    ctx.load()


def check_reset_types(ctx: _Context) -> None:
    """reset(seed) returns (str, dict) for every validation seed and for seed=None."""
    for seed in (*ctx.seeds, None):
        _require(ctx.session.reset(seed), f"reset(seed={seed})")


def _check_step_reply(data: dict[str, Any], action: str) -> None:
    reward = data.get("reward")
    low, high = REWARD_RANGE
    if not isinstance(reward, (int, float)) or not math.isfinite(reward) or not low <= reward <= high:
        raise CheckFailed(
            "contract_error", f"step({action[:40]!r}) gave reward {reward!r}, expected [{low:g}, {high:g}]"
        )


def _step(ctx: _Context, action: str, what: str) -> dict[str, Any]:
    """One step whose reply must be ok and whose reward must lie in the contract's range (every check)."""
    data = _require(ctx.session.step(action), what)
    _check_step_reply(data, action)
    return data


def check_step_accepts_any_string(ctx: _Context) -> None:
    """step never raises on arbitrary strings and returns the 5-tuple with a finite reward in [-1, 1]."""
    for i, action in enumerate(garbage_actions(ctx.rng, ctx.cfg.garbage_actions)):
        if i % 4 == 0:
            _require(ctx.session.reset(ctx.seeds[0]), "reset")
        data = _step(ctx, action, f"step({action[:40]!r})")
        if data["terminated"] or data["truncated"]:
            _require(ctx.session.reset(ctx.seeds[0]), "reset")


def check_deterministic_reset(ctx: _Context) -> None:
    """The same seed gives the same first observation."""
    for seed in ctx.seeds:
        first = _require(ctx.session.reset(seed), f"reset(seed={seed})")["obs"]
        again = _require(ctx.session.reset(seed), f"reset(seed={seed})")["obs"]
        if first != again:
            raise CheckFailed("nondeterministic", f"seed {seed} gave {first[:80]!r} then {again[:80]!r}")


def check_ends_within_max_turns(ctx: _Context) -> None:
    """An episode of unhelpful actions ends (terminated or truncated) within max_turns steps."""
    _require(ctx.session.reset(ctx.seeds[0]), "reset")
    for _ in range(ctx.session.max_turns):
        data = _step(ctx, "I am not sure.", "step")
        if data["terminated"] or data["truncated"]:
            return
    raise CheckFailed("contract_error", f"episode still running after max_turns={ctx.session.max_turns} steps")


def check_solution_reaches_goal(ctx: _Context) -> None:
    """Replaying solution() action by action from the same seed reaches reward 1 (terminated)."""
    for seed in ctx.seeds:
        _require(ctx.session.reset(seed), f"reset(seed={seed})")
        solution = _require(ctx.session.solution(), "solution()")["solution"]
        actions = split_actions(solution)
        if not actions:
            raise CheckFailed(
                "contract_error",
                f"solution() returned {solution[:100]!r}: no \\boxed{{}}, <tool_call> or <answer> actions",
            )
        _require(ctx.session.reset(seed), f"reset(seed={seed})")
        data: dict[str, Any] = {}
        for turn, action in enumerate(actions, 1):
            data = _step(ctx, action, f"replaying solution step {turn}")
            if data["terminated"] or data["truncated"]:
                break
        if not (data.get("terminated") and data.get("reward") == 1.0):
            raise CheckFailed(
                "unsolvable",
                f"seed {seed}: replaying {len(actions)} solution action(s) ended with "
                f"reward {data.get('reward')!r}, terminated={data.get('terminated')!r}",
            )


def check_not_trivial(ctx: _Context) -> None:
    """Empty actions and random actions do not reach full reward."""
    plays = [[""] * ctx.session.max_turns]
    for _ in range(ctx.cfg.random_plays):
        plays.append(garbage_actions(ctx.rng, ctx.session.max_turns)[-ctx.session.max_turns :])
    for p, play in enumerate(plays):
        _require(ctx.session.reset(ctx.seeds[p % len(ctx.seeds)]), "reset")
        for action in play:
            data = _step(ctx, action, "step")
            if data["reward"] >= 1.0:
                what = "empty actions" if p == 0 else f"random action {action[:40]!r}"
                raise CheckFailed("trivial", f"{what} reached reward {data['reward']!r}")
            if data["terminated"] or data["truncated"]:
                break


CHECKS: tuple[Callable[[_Context], None], ...] = (
    check_parses,
    check_one_env_class,
    check_reset_types,
    check_step_accepts_any_string,
    check_deterministic_reset,
    check_ends_within_max_turns,
    check_solution_reaches_goal,
    check_not_trivial,
)
CHECK_NAMES = tuple(fn.__name__.removeprefix("check_") for fn in CHECKS)
if CHECK_NAMES != VALIDATION_CHECKS:  # config names them without importing this module
    raise RuntimeError(f"validate.CHECKS {CHECK_NAMES} != config.VALIDATION_CHECKS {VALIDATION_CHECKS}")
_HOST_ONLY = frozenset({"parses"})  # checks that need no jail


# -- the authors' smoke test (validation.mode: smoke) -----------------------------------------------------
SMOKE_RESET_SEED = 42
SMOKE_REPLAY_SEED = 123
SMOKE_ACTIONS = ("\\boxed{1}", "\\boxed{test}", "\\boxed{42}")
SMOKE_REWARD_RANGE = (-10.0, 10.0)


def smoke_load(ctx: _Context) -> None:
    """The source loads: one environment class, constructed with max_turns."""
    ctx.load()


def smoke_reset(ctx: _Context) -> None:
    """reset(seed=42) returns a non-empty str observation and an info dict."""
    obs = _require(ctx.session.reset(SMOKE_RESET_SEED), f"reset(seed={SMOKE_RESET_SEED})")["obs"]
    if not obs:
        raise CheckFailed("contract_error", f"reset(seed={SMOKE_RESET_SEED}) returned an empty observation")


def smoke_steps(ctx: _Context) -> None:
    """The 3 boxed test actions return 5-tuples with a reward in [-10, 10]; stops when the episode ends."""
    low, high = SMOKE_REWARD_RANGE
    for i, action in enumerate(SMOKE_ACTIONS, 1):
        data = _require(ctx.session.step(action), f"test action {i} {action!r}")
        reward = data.get("reward")
        if not isinstance(reward, (int, float)) or not low <= reward <= high:
            raise CheckFailed(
                "contract_error", f"test action {i} {action!r} gave reward {reward!r}, expected [{low:g}, {high:g}]"
            )
        if data["terminated"] or data["truncated"]:
            return


def smoke_reset_again(ctx: _Context) -> None:
    """reset(seed=123) works: the environment can be replayed."""
    _require(ctx.session.reset(SMOKE_REPLAY_SEED), f"reset(seed={SMOKE_REPLAY_SEED})")


SMOKE_CHECKS: tuple[Callable[[_Context], None], ...] = (smoke_load, smoke_reset, smoke_steps, smoke_reset_again)
SMOKE_CHECK_NAMES = tuple(fn.__name__ for fn in SMOKE_CHECKS)

RESET_GATE_SEEDS = (0, 1, 2)


def reset_gate(ctx: _Context) -> None:
    """No instruction criterion raises at every seed: after ``reset(seed)`` for seeds 0, 1, 2 each criterion of
    ``env.criteria`` is evaluated on the state, and a criterion that raised at every seed that reset rejects the
    environment (the authors' ``criteria_throw_at_reset``, synthetic_game_env.py:487-534). A seed whose reset
    raises is skipped; an environment without criteria passes, and so does a criterion that holds at reset."""
    raised: dict[int, list[str]] = {}
    reset_seeds = 0
    for seed in RESET_GATE_SEEDS:
        result = ctx.session.criteria_at_reset(seed)
        if not result.ok and result.error_type == "exception":
            continue
        errors = _require(result, f"reset(seed={seed}) for the criteria").get("errors")
        if not isinstance(errors, list):  # the jail's reply, which the environment's code shares
            raise CheckFailed("contract_error", f"reset(seed={seed}): the criteria check replied {errors!r:.80}")
        reset_seeds += 1
        for i, error in enumerate(errors):
            if error is not None:
                raised.setdefault(i, []).append(str(error))
    for i, errors in sorted(raised.items()):
        if reset_seeds and len(errors) == reset_seeds:
            raise CheckFailed(
                "contract_error", f"criterion {i + 1} raises at every seed {RESET_GATE_SEEDS} after reset: {errors[0]}"
            )


def check_disabled_names(names: Sequence[str]) -> None:
    """Raise a one-line :class:`ConfigError` naming an unknown check in ``validation.disabled_checks``.

    >>> check_disabled_names(["not_trivial"])
    >>> check_disabled_names(["not_trivia"])
    Traceback (most recent call last):
    ...
    spade_core.config.ConfigError: validation.disabled_checks has unknown check 'not_trivia'; checks: \
parses, one_env_class, reset_types, step_accepts_any_string, deterministic_reset, ends_within_max_turns, \
solution_reaches_goal, not_trivial
    """
    for name in names:
        if name not in CHECK_NAMES:
            raise ConfigError(
                f"validation.disabled_checks has unknown check {name!r}; checks: {', '.join(CHECK_NAMES)}"
            )


def _plan(cfg: ValidationConfig) -> tuple[list[tuple[str, Callable[[_Context], None]]], list[str]]:
    """The checks to run, in order, and the disabled ones (none in smoke mode)."""
    gate = [("reset_gate", reset_gate)] if cfg.reset_gate else []
    if cfg.mode == "smoke":
        return [*zip(SMOKE_CHECK_NAMES, SMOKE_CHECKS, strict=True), *gate], []
    disabled = set(cfg.disabled_checks)
    run = [(name, fn) for name, fn in zip(CHECK_NAMES, CHECKS, strict=True) if name not in disabled]
    return [*run, *gate], [name for name in CHECK_NAMES if name in disabled]


def validate_code(code: str, cfg: ValidationConfig | None = None, seeds: Sequence[int] = (0, 1)) -> ValidationResult:
    """Run the configured checks on ``code`` in one jail; never raises for a bad environment.

    ``cfg.mode`` picks the 8 checks (``full``, less ``cfg.disabled_checks``) or the authors' smoke test.

    Raises:
        ConfigError: ``cfg.disabled_checks`` names a check that does not exist.
    """
    cfg = cfg or ValidationConfig()
    check_disabled_names(cfg.disabled_checks)
    t0 = time.perf_counter()
    session = EnvSession(
        code,
        max_turns=cfg.max_turns,
        limits=limits_from_config(cfg),
        call_timeout_s=cfg.call_timeout_s,
        contract=cfg.contract,
    )
    ctx = _Context(code=code, cfg=cfg, session=session, seeds=seeds)
    plan, skipped = _plan(cfg)
    checks: dict[str, bool] = {}
    error_type: ErrorType | None = None
    message: str | None = None
    try:
        for name, check in plan:
            try:
                if name not in _HOST_ONLY:
                    ctx.load()
                check(ctx)
            except CheckFailed as failed:
                checks[name] = False
                error_type, message = failed.error_type, f"{name}: {failed.message}"
                break
            checks[name] = True
    finally:
        session.close()
    if skipped:
        note = f"[disabled checks: {', '.join(skipped)}]"
        message = f"{message} {note}" if message else note
    return ValidationResult(
        env_id=env_id_for(code),
        ok=error_type is None,
        error_type=error_type,
        message=message,
        checks=checks,
        kind=session.kind,
        class_name=session.class_name,
        tools=session.tools,
        seconds=time.perf_counter() - t0,
        skipped=skipped,
    )


def validate_many(codes: Sequence[str], cfg: ValidationConfig | None = None) -> list[ValidationResult]:
    """Validate many environments, ``cfg.parallel_jails`` at a time, in input order.

    Raises:
        ConfigError: ``cfg.disabled_checks`` names a check that does not exist (before any jail starts).
    """
    cfg = cfg or ValidationConfig()
    check_disabled_names(cfg.disabled_checks)
    return run_parallel(lambda code: validate_code(code, cfg), codes, cfg.parallel_jails)
