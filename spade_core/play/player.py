"""One episode's plays, turn by turn, as both run modes of :mod:`spade_core.play.rollout` drive them.

A :class:`Player` opens an episode (its jail, reset with the spec's seed, and its first prompt), builds its
next request, takes the model's reply and hands it to the tool protocol (:mod:`spade_core.play.tool_protocols`),
and applies the rules that end or restart a play: ``rollout.end_without_eos`` (a reply cut at the token limit
ends the episode as truncated, unplayed), ``rollout.play_deadline_s`` (a play past it ends with ``deadline``,
never retried; the authors' ``orchestrator.py:1521-1541``), ``rollout.env_retries`` (a play the environment
broke is played again from the start, in a fresh jail with the same seed) and ``rollout.model_retries`` (the
same after a failed model call). A retry's requests carry other sampling seeds.
"""

from __future__ import annotations

import hashlib
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from sandbox.outcome import is_env_error
from sandbox.policy import JailLimits
from sandbox.session import EnvSession
from spade_core.config import RolloutConfig
from spade_core.llm.base import (
    CacheSlot,
    Completion,
    GenerationRequest,
    Generator,
    KVCacheOwner,
    ModelError,
    SamplingParams,
)
from spade_core.llm.chat_tokens import TemplateError, ensure_template
from spade_core.play.agent_prompts import first_observation, system_prompt
from spade_core.play.episode import Episode, EpisodeSpec, RolloutStats, Turn
from spade_core.play.recorder import Recorder
from spade_core.play.tool_protocols import UserMessages, tool_protocol


class Player:
    """Plays episodes with one generator: what the run modes do to each episode, and the stats they count."""

    def __init__(
        self,
        generator: Generator,
        cfg: RolloutConfig,
        sampling: SamplingParams,
        limits: JailLimits | None,
        call_timeout_s: float,
        tokenizer: Any,
        jail_workers: int,
        enable_thinking: bool | None,
        contract: str,
        stats: RolloutStats,
        counting: threading.Lock,
    ) -> None:
        self.generator = generator
        self.cfg = cfg
        self.sampling = sampling
        self.limits = limits
        self.call_timeout_s = call_timeout_s
        self.tokenizer = tokenizer
        self.jail_workers = jail_workers
        self.contract = contract  # validation.contract: what the jail's loader holds each environment to
        self.stats = stats
        self._counting = counting  # retries are counted from the jail workers' threads
        self.recorder = Recorder(cfg, tokenizer, enable_thinking)
        self.protocol: UserMessages = tool_protocol(cfg, self.recorder)

    # -- opening and retrying a play -----------------------------------------------------------------
    def _open(self, spec: EpisodeSpec, attempt: int = 0, model_attempt: int = 0) -> Episode:
        episode = Episode(
            spec,
            EnvSession(
                spec.code,
                max_turns=self.cfg.max_turns,
                limits=self.limits,
                call_timeout_s=self.call_timeout_s,
                own_max_turns=self.cfg.game_max_turns,
                contract=self.contract,
                at_play=True,
                reset_placeholder=self.cfg.reset_failure == "placeholder",
            ),
            attempt=attempt,
            model_attempt=model_attempt,
            authors_hinted=self.cfg.hinted_play_rules == "authors" and spec.condition == "hint",
        )
        result = episode.session.open()
        if result.ok:
            result = episode.session.reset(spec.seed)
        if not result.ok:
            episode.fail(result.error_type or "jail_error", result.message)
            return episode
        kind = episode.session.kind or "game"
        chat = self.recorder.chat(episode)
        in_template = chat is not None and chat.tools is not None
        style = self.cfg.agent_prompt
        system = system_prompt(kind, episode.session.tools, in_template, self.cfg.tool_protocol, self.cfg.action, style)
        episode.messages = [
            *([{"role": "system", "content": system}] if system is not None else []),
            {"role": "user", "content": first_observation(result.data["obs"], spec.hint, kind, style)},
        ]
        if chat is not None:
            # once per template and conversation shape: a template that cannot be split stops the rollout
            native = kind == "tool" and self.cfg.tool_protocol == "native"
            ensure_template(chat, system=system is not None, tool_messages=native)
            episode.token_ids = chat.prompt(episode.messages)
            episode.loss_mask = [0] * len(episode.token_ids)
            episode.logprobs = [0.0] * len(episode.token_ids)
            # the authors' check before the first reply (theirs only: ours lets the first turn run)
            margin_rule = self.cfg.context_margin_tokens is not None and not episode.free_of_rules
            episode.done = margin_rule and self.recorder.context_spent(episode)
        return episode

    def open(self, spec: EpisodeSpec, attempt: int = 0, model_attempt: int = 0) -> Episode:
        """A new play of ``spec``, opened and reset, with its first prompt; anything unexpected is recorded
        on the episode instead of raised."""
        try:
            return self._open(spec, attempt, model_attempt)
        except TemplateError as exc:  # the model's template, not this episode: no play could be assembled
            raise ModelError(str(exc)) from None
        except Exception as exc:  # e.g. a tokenizer refusing text: data about this episode only
            hinted = self.cfg.hinted_play_rules == "authors" and spec.condition == "hint"
            episode = Episode(spec, EnvSession(spec.code), attempt=attempt, authors_hinted=hinted)
            episode.model_attempt = model_attempt
            episode.fail("jail_error", f"{type(exc).__name__}: {exc}")
            return episode

    def reopen(self, episode: Episode) -> Episode:
        """A fresh play of a failed episode's spec (a new jail, the same seed), counted as the retry it is: of
        a model call (``model_attempt``) or of the environment (``attempt``). The caller closes the old jail."""
        model = episode.error_type == "model_error"
        with self._counting:
            if model:
                self.stats.model_retries += 1
            else:
                self.stats.retries += 1
        return self.open(episode.spec, episode.attempt + (not model), episode.model_attempt + model)

    def retries_left(self, episode: Episode) -> bool:
        """Whether the play failed in a way that is played again and has retries left: a failed model call
        (``rollout.model_retries``) or the environment broke it (``rollout.env_retries``); a play past its
        deadline is not (the authors retry no timed-out play)."""
        if episode.error_type == "model_error":
            return episode.model_attempt < self.cfg.model_retries
        retriable = is_env_error(episode.error_type) and episode.error_type != "deadline"
        return retriable and episode.attempt < self.cfg.env_retries

    def check_deadline(self, episode: Episode) -> None:
        """End a play that has run past ``rollout.play_deadline_s`` (counted from its attempt's start): it is
        dropped, ``error_type`` deadline, also when it ended in the turn that overran, as the authors cancel a
        play at its limit (``orchestrator.py:1521-1541``); a hinted play under the authors' rules scores 0."""
        limit = self.cfg.play_deadline_s
        if limit is None or episode.error_type is not None or time.monotonic() - episode.started <= limit:
            return
        if episode.authors_hinted and episode.done and episode.error is not None:
            return  # already failed (scored 0)
        episode.fail("deadline", f"the play ran past rollout.play_deadline_s ({limit:g} s)")

    # -- one turn ------------------------------------------------------------------------------------
    def request(self, episode: Episode) -> GenerationRequest:
        """The episode's next request: its conversation (as token ids where the generator takes them), a
        sampling seed of its own for this turn and attempt, and its KV-cache slot."""
        token_prompt = self.generator.supports_token_prompts and self.tokenizer is not None
        chat = self.recorder.chat(episode)
        # Tool schemas travel in the system prompt unless the chat template renders them itself; a
        # server is never sent `tools=` (vLLM refuses it without a tool-call parser).
        tools = episode.session.tools if token_prompt and chat is not None and chat.tools is not None else None
        turn = sum(m["role"] == "assistant" for m in episode.messages)
        key = f"{self.sampling.seed}:{episode.spec.episode_id}:{turn}"
        if episode.attempt:  # a retry samples afresh: the same replies would likely break it again
            key += f":retry{episode.attempt}"
        if episode.model_attempt:
            key += f":model-retry{episode.model_attempt}"
        return GenerationRequest(
            messages=list(episode.messages),
            prompt_ids=list(episode.token_ids) if token_prompt else None,
            tools=tools,
            seed=int(hashlib.sha256(key.encode()).hexdigest()[:8], 16),  # plays of one env must differ
            cache_slot=self._cache_slot(episode) if token_prompt else None,
        )

    def _cache_slot(self, episode: Episode) -> CacheSlot | None:
        """The episode's KV-cache slot: a key of its own (never its episode id, which repeats across runs
        and duplicate specs), bounded by the context limit that ends the episode anyway."""
        if not self.cfg.reuse_kv_cache:
            return None
        if episode.cache_key is None:
            episode.cache_key = uuid.uuid4().hex
        return CacheSlot(episode.cache_key, self.cfg.max_context_tokens)

    def release(self, episodes: Sequence[Episode]) -> None:
        """Free the kept KV caches of episodes that are over (once per episode)."""
        keys = [e.cache_key for e in episodes if e.cache_key is not None]
        for e in episodes:
            e.cache_key = None
        if keys and isinstance(self.generator, KVCacheOwner):
            self.generator.release(keys)

    def take_reply(self, episode: Episode, completion: Completion) -> Turn | None:
        """Record the agent's reply; the turn to play in the jail, or None when the episode ends here."""
        if completion.error is not None:
            episode.fail("model_error", completion.error)
            return None
        eos, cut, reply = self.recorder.reply(episode, completion)
        if self.cfg.end_without_eos and cut and not episode.free_of_rules:
            episode.done = True  # cut at the token limit: truncated, unplayed, return 0
            return None
        return self.protocol.turn(episode, reply, eos)

    def count_prompts(self, completions: Sequence[Completion]) -> None:
        self.stats.prompt_tokens += sum(c.prompt_tokens for c in completions)
        self.stats.cached_tokens += sum(c.cached_tokens for c in completions)
