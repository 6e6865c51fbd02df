"""A jailed environment instance: one :class:`JailedProcess` with one environment loaded in it."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sandbox.jail import CallResult, JailedProcess
from sandbox.outcome import ErrorType, episode_return
from sandbox.policy import JailLimits


@dataclass
class Replay:
    """A fixed action sequence played from one seed: what the environment answered, or why it stopped."""

    observations: list[str] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    error_type: ErrorType | None = None
    message: str | None = None

    @property
    def episode_return(self) -> float:
        """clamp(last reward, -1, 1) if the episode terminated cleanly, else 0 (docs/DESIGN.md §5)."""
        return episode_return(self.rewards, self.terminated) if self.error_type is None else 0.0


class EnvSession:
    """Start a jail, load ``code`` into it, then ``reset`` / ``step`` / ``solution``; always ``close``.

    Every method returns a :class:`CallResult`: a broken environment is data, never an exception.
    """

    def __init__(
        self,
        code: str,
        *,
        max_turns: int = 12,
        limits: JailLimits | None = None,
        call_timeout_s: float = 5.0,
        own_max_turns: bool = False,
        contract: str = "ours",
        at_play: bool = False,
        reset_placeholder: bool = False,
    ) -> None:
        """``max_turns`` is given to the environment; with ``own_max_turns`` the environment keeps its own
        default, capped at ``max_turns`` (``self.max_turns`` is then what it kept, once loaded). ``contract``
        (``validation.contract``) is what the loader holds the environment to (:mod:`sandbox.runtime.host`);
        ``at_play`` loads it for a play (under the authors' contract, ``step`` results are then converted as their
        wrapper does) and ``reset_placeholder`` (``rollout.reset_failure``) turns a raising ``reset`` into their
        placeholder observation."""
        self.code = code
        self.contract = contract
        self.at_play = at_play
        self.reset_placeholder = reset_placeholder
        self.max_turns = max_turns
        self.own_max_turns = own_max_turns
        self.jail = JailedProcess(limits, call_timeout_s)
        self.kind: str | None = None
        self.tools: list[dict[str, Any]] = []
        self.class_name: str | None = None

    def open(self) -> CallResult:
        started = self.jail.start()
        if not started.ok:
            return started
        loaded = self.jail.call(
            "load",
            source=self.code,
            max_turns=self.max_turns,
            own_max_turns=self.own_max_turns,
            contract=self.contract,
            at_play=self.at_play,
            reset_placeholder=self.reset_placeholder,
        )
        if loaded.ok:
            self.max_turns = int(loaded.data.get("max_turns") or self.max_turns)
            self.kind = loaded.data.get("kind")
            self.tools = loaded.data.get("tools") or []
            self.class_name = loaded.data.get("class_name")
        loaded.seconds += started.seconds
        return loaded

    def reset(self, seed: int | None = None) -> CallResult:
        return self.jail.call("reset", seed=seed)

    def step(self, action: str) -> CallResult:
        return self.jail.call("step", action=action)

    def call_tool(self, name: str, arguments: dict[str, Any]) -> CallResult:
        """Run one tool of a tool-use environment outside ``step`` (no turn counted): ``data["output"]``."""
        return self.jail.call("call_tool", name=name, arguments=arguments)

    def criteria_at_reset(self, seed: int | None) -> CallResult:
        """Reset to ``seed`` and evaluate each instruction criterion there: ``data["errors"]``, one entry per
        criterion, None or the error it raised."""
        return self.jail.call("criteria_at_reset", seed=seed)

    def solution(self) -> CallResult:
        return self.jail.call("solution")

    def replay(self, seed: int | None, actions: list[str]) -> Replay:
        """Reset to ``seed`` (the session must be open) and play ``actions`` until the episode ends."""
        out = Replay()
        result = self.reset(seed)
        if result.ok:
            out.observations.append(result.data["obs"])
            for action in actions:
                result = self.step(action)
                if not result.ok:
                    break
                out.observations.append(result.data["obs"])
                out.rewards.append(float(result.data["reward"]))
                out.terminated, out.truncated = bool(result.data["terminated"]), bool(result.data["truncated"])
                if out.terminated or out.truncated:
                    break
        if not result.ok:
            out.error_type, out.message = result.error_type, result.message
        return out

    def close(self) -> None:
        self.jail.close()

    def __enter__(self) -> EnvSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_parallel[T, R](fn: Callable[[T], R], items: Iterable[T], workers: int) -> list[R]:
    """Apply ``fn`` to ``items`` with ``workers`` jails at once, keeping the input order.

    Each item's work runs in its own jail(s); the threads only wait on pipes, so the GIL is not the limit.
    """
    items = list(items)
    if workers <= 1 or len(items) <= 1:
        return [fn(item) for item in items]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jail") as pool:
        return list(pool.map(fn, items))
