"""The two ways a reply is played in its jail (``rollout.tool_protocol``; :mod:`spade_core.play.rollout`).

``user_messages`` (:class:`UserMessages`, and every game under either protocol): the reply goes to ``step``,
which in a tool-use environment runs its first ``<tool_call>``, and the observation comes back as a user
message. ``native`` (:class:`Native`, the authors', ``orchestrator.py:786-1031``): a tool-use reply with
``<answer>``, or without a call, goes to ``step``; otherwise every call of the reply runs in order through the
jail's ``call_tool`` (counting no turn of the environment's), each result comes back as a ``tool`` message,
and the turn's reward is 0. A malformed call (``<tool_call>`` written, nothing parsed) goes to ``step`` and,
with ``rollout.mask_malformed_tool_calls``, its reply's tokens get mask 0.
"""

from __future__ import annotations

from typing import Any

from sandbox.jail import CallResult
from sandbox.runtime.spade_env import is_malformed_call, parse_answer, parse_native_calls
from spade_core.config import RolloutConfig
from spade_core.play.actions import game_action
from spade_core.play.episode import Episode, Turn
from spade_core.play.recorder import Recorder


class UserMessages:
    """Every reply goes to ``step``; what it answers comes back as a user message."""

    def __init__(self, cfg: RolloutConfig, recorder: Recorder) -> None:
        self.cfg = cfg
        self.recorder = recorder

    def turn(self, episode: Episode, reply: str, eos: bool) -> Turn:
        """The turn to play for a recorded ``reply`` (``eos``: it ended with the end-of-turn token)."""
        return Turn(episode, self.action(episode, reply), [], eos)

    def action(self, episode: Episode, reply: str) -> str:
        """What the environment's ``step`` receives for ``reply`` (``rollout.action``; tool use: the reply)."""
        return reply if episode.session.kind == "tool" else game_action(reply, self.cfg.action)

    def play(self, turn: Turn) -> list[CallResult]:
        """Run the turn in the episode's jail: one step."""
        return [turn.episode.session.step(turn.action)]

    def record(self, turn: Turn, results: list[CallResult]) -> None:
        """Record what the jail answered to :meth:`play`."""
        self.recorder.step(turn.episode, results[0], turn.eos, turn.malformed)


class Native(UserMessages):
    """A tool-use reply's calls run outside ``step``, each result a ``tool`` message; other replies as
    :class:`UserMessages`."""

    def turn(self, episode: Episode, reply: str, eos: bool) -> Turn:
        calls, malformed = self.calls(episode, reply)
        return Turn(episode, self.action(episode, reply), calls, eos, malformed)

    def calls(self, episode: Episode, reply: str) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """The tool calls to run outside ``step`` for ``reply``: every call of a tool-use reply without an
        ``<answer>`` (the authors' orchestrator.py:891-997); otherwise none, and the reply goes to ``step``. A
        malformed reply (``<tool_call>`` but no call) goes to ``step`` too, which scores its format error; with
        ``rollout.mask_malformed_tool_calls`` its tokens leave the loss. Also returns whether the reply was
        such a masked malformed call."""
        if episode.session.kind != "tool" or parse_answer(reply) is not None:
            return [], False
        calls = parse_native_calls(reply)
        masked = self.cfg.mask_malformed_tool_calls and is_malformed_call(reply, calls)
        if masked:
            start = episode.reply_start
            episode.loss_mask[start:] = [0] * (len(episode.loss_mask) - start)
        return calls, masked

    def play(self, turn: Turn) -> list[CallResult]:
        """Run the turn in the episode's jail: every call in order (stopping at a failed one), or one step."""
        if not turn.calls:
            return super().play(turn)
        results = []
        for name, arguments in turn.calls:
            results.append(turn.episode.session.call_tool(name, arguments))
            if not results[-1].ok:
                break
        return results

    def record(self, turn: Turn, results: list[CallResult]) -> None:
        """A turn of tool calls: reward 0, no termination; each result comes back as a ``tool`` message."""
        if not turn.calls:
            super().record(turn, results)
            return
        episode = turn.episode
        failed = next((r for r in results if not r.ok), None)
        if failed is not None:  # as a failed step: rollout.step_error_return, or a fault of the environment
            self.recorder.step(episode, failed, turn.eos)
            return
        episode.rewards.append(0.0)  # the authors' orchestrator.py:1000: a tool turn's reward is 0
        if len(episode.rewards) >= self.recorder.turn_limit(episode):
            episode.done = True  # out of turns: truncated, return 0
            return
        # str(): the reply comes from the jail, which the environment's code shares
        self.recorder.observations(
            episode, [{"role": "tool", "content": str(r.data.get("output"))} for r in results], turn.eos
        )


def tool_protocol(cfg: RolloutConfig, recorder: Recorder) -> UserMessages:
    """The protocol ``rollout.tool_protocol`` names."""
    return Native(cfg, recorder) if cfg.tool_protocol == "native" else UserMessages(cfg, recorder)
