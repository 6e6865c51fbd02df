"""The environment validator (docs/DESIGN.md §7 step 4): small named checks, run in the jail, in order.

Like Gymnasium's ``env_checker``, each ``check_*`` function tests one property and its message shows the
actual value. Validation stops at the first failed check (later checks would only repeat the failure or
wait on a dead jail); ``checks`` maps every check that ran to whether it passed, and ``error_type`` is
the failed check's class: one of the sandbox's (the jail's verdict on the call the check made) or one of
the validator's own, ``nondeterministic``, ``unsolvable``, ``trivial``, all from the one taxonomy in
:mod:`sandbox.outcome`. Host-side parsing uses :mod:`ast` only: no generated code runs outside the jail.
"""

from __future__ import annotations

import ast
import math
import random
import string
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sandbox.jail import CallResult
from sandbox.outcome import ErrorType
from sandbox.policy import JailLimits
from sandbox.session import EnvSession, run_parallel
from spade_core.config import ValidationConfig
from spade_core.envs.contract import env_id_for, split_actions


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
    _require(ctx.session.open(), "loading the environment")


def check_reset_types(ctx: _Context) -> None:
    """reset(seed) returns (str, dict) for every validation seed and for seed=None."""
    for seed in (*ctx.seeds, None):
        _require(ctx.session.reset(seed), f"reset(seed={seed})")


def _check_step_reply(data: dict[str, Any], action: str) -> None:
    reward = data.get("reward")
    if not isinstance(reward, (int, float)) or not math.isfinite(reward) or not 0.0 <= reward <= 1.0:
        raise CheckFailed("contract_error", f"step({action[:40]!r}) gave reward {reward!r}, expected [0, 1]")


def check_step_accepts_any_string(ctx: _Context) -> None:
    """step never raises on arbitrary strings and returns the 5-tuple with a finite reward in [0, 1]."""
    for i, action in enumerate(garbage_actions(ctx.rng, ctx.cfg.garbage_actions)):
        if i % 4 == 0:
            _require(ctx.session.reset(ctx.seeds[0]), "reset")
        data = _require(ctx.session.step(action), f"step({action[:40]!r})")
        _check_step_reply(data, action)
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
        data = _require(ctx.session.step("I am not sure."), "step")
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
            data = _require(ctx.session.step(action), f"replaying solution step {turn}")
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
            data = _require(ctx.session.step(action), "step")
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


def validate_code(code: str, cfg: ValidationConfig | None = None, seeds: Sequence[int] = (0, 1)) -> ValidationResult:
    """Run every check on ``code`` in one jail; never raises for a bad environment."""
    cfg = cfg or ValidationConfig()
    t0 = time.perf_counter()
    session = EnvSession(
        code, max_turns=cfg.max_turns, limits=limits_from_config(cfg), call_timeout_s=cfg.call_timeout_s
    )
    ctx = _Context(code=code, cfg=cfg, session=session, seeds=seeds)
    checks: dict[str, bool] = {}
    error_type: ErrorType | None = None
    message: str | None = None
    try:
        for check, name in zip(CHECKS, CHECK_NAMES, strict=True):
            try:
                check(ctx)
            except CheckFailed as failed:
                checks[name] = False
                error_type, message = failed.error_type, f"{name}: {failed.message}"
                break
            checks[name] = True
    finally:
        session.close()
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
    )


def validate_many(codes: Sequence[str], cfg: ValidationConfig | None = None) -> list[ValidationResult]:
    """Validate many environments, ``cfg.parallel_jails`` at a time, in input order."""
    cfg = cfg or ValidationConfig()
    return run_parallel(lambda code: validate_code(code, cfg), codes, cfg.parallel_jails)


def validate_file(path: str | Path, cfg: ValidationConfig | None = None) -> ValidationResult:
    return validate_code(Path(path).read_text(), cfg)
