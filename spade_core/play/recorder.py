"""Writing a play into its :class:`~spade_core.play.episode.Episode`: the agent's replies, what the
environment answered, the rewards, and the episode rules that end it (:mod:`spade_core.play.rollout`).

Tokens per :mod:`spade_core.llm.chat_tokens`: a reply's sampled ids get mask 1 and their log-probs (NaN where
the backend gave none); the template and environment text after it get mask 0 and log-prob 0. The rules are
settings (docs/method.md, "What the paper presets reproduce"): ``rollout.context_margin_tokens`` (stop once at
most that many context tokens are left, replies cut to leave them; otherwise stop when another whole turn no
longer fits), ``rollout.tool_turns`` (which turn limit counts) and ``rollout.step_error_return`` (a ``step``
that raises or breaks its return contract ends the play, terminated, with that reward, unretried).
"""

from __future__ import annotations

from typing import Any

from sandbox.jail import CallResult
from sandbox.outcome import ErrorType
from spade_core.config import RolloutConfig
from spade_core.llm.base import Completion
from spade_core.llm.chat_tokens import ChatTokens, template_kwargs
from spade_core.play.episode import Episode

# A step ending with one of these was the environment's own code (it raised or broke the return contract),
# not its jail: with ``rollout.step_error_return`` set it scores that reward instead of being retried.
STEP_FAULTS: frozenset[ErrorType] = frozenset({"exception", "contract_error"})
NAN = float("nan")
# What the authors append to the observation after a masked malformed tool call (orchestrator.py:937-945).
MALFORMED_CALL_FEEDBACK = (
    '[FORMAT] Your previous <tool_call> could not be parsed. Emit exactly: <tool_call>{"name": "<tool_name>", '
    '"arguments": {<args>}}</tool_call>'
)


class Recorder:
    """Appends turns to episodes, as messages and (with a tokenizer) as token ids, loss mask and log-probs."""

    def __init__(self, cfg: RolloutConfig, tokenizer: Any, enable_thinking: bool | None) -> None:
        self.cfg = cfg
        self.tokenizer = tokenizer
        self.enable_thinking = enable_thinking  # model.enable_thinking, for the chat template

    def chat(self, episode: Episode) -> ChatTokens | None:
        if self.tokenizer is None:
            return None
        tools = episode.session.tools if episode.session.kind == "tool" else None
        return ChatTokens(self.tokenizer, tools, template_kwargs(self.enable_thinking))

    def context_spent(self, episode: Episode) -> bool:
        """Whether the conversation has no room for another reply (then the episode ends, truncated)."""
        if self.tokenizer is None:
            return False
        left = self.cfg.max_context_tokens - len(episode.token_ids)
        if episode.free_of_rules:  # the authors check no context on a hinted game play: only a full one stops it
            return left <= 0
        margin = self.cfg.context_margin_tokens
        return left <= margin if margin is not None else left < self.cfg.max_tokens_per_turn

    def reply(self, episode: Episode, completion: Completion) -> tuple[bool, bool, str]:
        """Append the agent's reply (tokens with mask 1). Returns whether its tokens end with the end-of-turn
        token, whether it was cut (at the token limit, or by ``rollout.context_margin_tokens``, which cuts
        its tokens to leave that room) and its text (as cut)."""
        chat = self.chat(episode)
        ids, text = completion.token_ids, completion.text
        stopped = completion.finish_reason == "stop"
        episode.reply_start = len(episode.token_ids)
        if chat is not None:
            if not ids:  # a server backend returned text only: tokenize it
                ids = chat.completion_ids(completion.text, stopped=stopped)
            sampled = completion.logprobs
            margin = None if episode.free_of_rules else self.cfg.context_margin_tokens
            room = self.cfg.max_context_tokens - len(episode.token_ids) - (margin or 0)
            if margin is not None and len(ids) > room:  # the authors' max_tokens = remaining - 64
                ids, sampled, stopped = ids[: max(room, 0)], sampled[: max(room, 0)] if sampled else sampled, False
                text = chat.decode(ids)
            episode.token_ids += ids
            episode.loss_mask += [1] * len(ids)
            # A log-prob per sampled token, or NaN where the backend gave none (or retokenized the text).
            episode.logprobs += list(sampled) if sampled is not None and len(sampled) == len(ids) else [NAN] * len(ids)
        episode.generated_tokens += len(ids)
        episode.messages.append({"role": "assistant", "content": text})
        eos = bool(ids) and chat is not None and ids[-1] == chat.eos_id
        return eos, not stopped, text

    def turn_limit(self, episode: Episode) -> int:
        """Agent turns the episode may take: the environment's limit, or with ``rollout.tool_turns: free``
        ``rollout.max_turns`` (tool-call turns then count toward the environment's limit not at all)."""
        return self.cfg.max_turns if self.cfg.tool_turns == "free" else episode.session.max_turns

    def step(self, episode: Episode, result: CallResult, ended_with_eos: bool, malformed: bool = False) -> None:
        """Record what ``step`` answered: its reward and observation, or how it failed; end the episode when it
        terminated, truncated or ran out of turns."""
        episode.env_steps += 1
        if not result.ok:
            if self.cfg.step_error_return is not None and result.error_type in STEP_FAULTS:
                # the authors' synthetic_game_env.py:429-434: the play ends with that reward, not retried; their
                # hinted arm steps through the same wrapper, so a hinted play scores it too
                episode.rewards.append(self.cfg.step_error_return)
                episode.terminated = episode.done = True
                episode.messages.append({"role": "user", "content": f"Error: {result.message}"})
                return
            episode.fail(result.error_type or "jail_error", result.message)
            return
        data = result.data
        episode.rewards.append(float(data["reward"]))
        episode.terminated = bool(data["terminated"])
        out_of_turns = episode.env_steps >= episode.session.max_turns or len(episode.rewards) >= self.turn_limit(
            episode
        )
        if episode.terminated or data["truncated"] or out_of_turns:
            episode.done = True
            return
        observation = data["obs"]
        if malformed and self.cfg.malformed_call_feedback:  # the authors' orchestrator.py:937-945
            observation = f"{observation}\n\n{MALFORMED_CALL_FEEDBACK}"
        self.observations(episode, [{"role": "user", "content": observation}], ended_with_eos)

    def observations(self, episode: Episode, following: list[dict[str, str]], ended_with_eos: bool) -> None:
        """Close the agent's turn and add what the environment answered (messages and tokens, mask 0)."""
        chat = self.chat(episode)
        if chat is not None:
            history, reply = episode.messages[:-1], episode.messages[-1]["content"]
            env_ids = chat.after_assistant(history, reply, ended_with_eos, following)
            episode.token_ids += env_ids
            episode.loss_mask += [0] * len(env_ids)
            episode.logprobs += [0.0] * len(env_ids)
        episode.messages.extend(following)
        episode.done = self.context_spent(episode)  # context budget spent: truncated, return 0
