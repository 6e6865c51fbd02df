"""The rollout engine: many episodes against jailed environments, advanced together.

Against an in-process model (transformers), each turn every live episode's next prompt goes to the
generator in ONE batched call; finished episodes leave the batch; the environments then step in parallel
(one long-lived jail per episode: :mod:`spade_core.play.lockstep`). Against a server (vLLM, any
OpenAI-compatible one: ``streams``) there is no batch barrier: each episode sends its next request as soon as
its jail has answered, up to ``rollout.max_in_flight`` at once, and the server batches whatever is in flight
(:mod:`spade_core.play.stream`). Episode return per DESIGN.md §5 (the authors'
``spade/core/utils/rewards.py:47-50``): the last reward clamped to [-1, 1] if the episode terminated, else 0
(truncated, out of turns or out of context); each row says whether it ``terminated``. A failed environment
or model call ends that episode with an ``error_type`` and return 0 and never stops the others.

A play the environment broke (an error of :data:`sandbox.outcome.ENV_ERROR_TYPES`: it raised, timed out,
ran out of memory, broke the contract or its jail failed, at load, reset or any step) is played again
from the start, in a fresh jail with the same seed, up to ``rollout.env_retries`` [1] times; its requests
then carry other sampling seeds, so the agent's replies need not repeat. Only the last attempt becomes the
row; one that still fails keeps its ``error_type``, and scoring and training leave it out
(:mod:`spade_core.method.scoring`, :func:`spade_core.train.data.agent_samples`). A play whose model call failed
(``model_error``: the engine refused, died or hung, after the backend's own retries and restarts) is played
again from the start the same way, up to ``rollout.model_retries`` [1] times, on the engine as it then is; one
that still fails is left out the same way: an engine fault is never trained or scored as a lost play (but in
the authors' hinted arm, ``rollout.hinted_play_rules: authors``, where every failure but a raising step scores 0
unretried, as theirs).
With ``rollout.play_deadline_s`` a play that runs past it (checked after every turn) ends with ``deadline``:
left out the same way, and never retried (the authors' ``orchestrator.py:1521-1541`` drop it).

Episode rules that differ between this project and the authors are settings (paper presets: theirs;
``orchestrator.py:403-491``, ``synthetic_game_env.py:226-246, 429-434``): ``rollout.action`` (the game
gets the whole reply, or the reply's first ``\\boxed{}``: :mod:`spade_core.play.actions`),
``rollout.end_without_eos`` (a reply cut at the token limit ends the episode as truncated, unplayed),
``rollout.context_margin_tokens`` (stop once at most that many context tokens are left, replies cut to
leave them; otherwise stop when another whole turn no longer fits), ``rollout.game_max_turns`` (the game
keeps its own ``max_turns``, capped at ``rollout.max_turns``) and ``rollout.step_error_return`` (a ``step``
that raises or returns a broken tuple ends the play, terminated, with that reward; only the sandbox's own
faults are then retried).

Tool use has two protocols (``rollout.tool_protocol``, :mod:`spade_core.play.tool_protocols`):
``user_messages`` sends every reply to ``step``; ``native`` (the authors', ``orchestrator.py:786-1031``) runs a
tool-use reply's calls through the jail's ``call_tool``, each result coming back as a ``tool`` message.

The authors' prompts and rules that differ from ours are settings too (docs/method.md, "What the paper
presets reproduce"): ``rollout.agent_prompt`` (:mod:`spade_core.play.agent_prompts`), ``rollout.hinted_play_rules``
(``authors``: a hinted game play gets ``max_tokens_per_turn`` every turn, no end-of-turn or context-margin rule,
stops only on a full context; a hinted tool-use play keeps those rules, as theirs goes through the no-hint tool
path, ``orchestrator.py:1839-1850``; no hinted play is retried, a step that raises scores
``rollout.step_error_return`` through their game wrapper, ``synthetic_game_env.py:431-434``, and any other
failure scores 0 and is kept, its message appended to the transcript; ``orchestrator.py:1783-1917``),
``rollout.tool_turns`` (``free``: a turn of native tool calls
counts toward ``rollout.max_turns`` only, the environment's own limit counting its steps;
``orchestrator.py:835-1003``), ``rollout.malformed_call_feedback`` (the authors' ``[FORMAT]`` line after a
masked malformed call) and ``validation.contract`` (what the jail's loader admits, at play as at validation).

For training, each episode keeps the token ids of the whole conversation and a loss mask: 1 on the
agent's own sampled tokens, 0 on prompt, template and environment text (:mod:`spade_core.llm.chat_tokens`).

With ``rollout.reuse_kv_cache`` each episode's requests name it by a
:class:`~spade_core.llm.base.CacheSlot` (a fresh key per episode, bounded by ``rollout.max_context_tokens``),
so a backend that keeps KV caches prefills only what the last turn added; the engine releases an episode's
slot as soon as the episode is over. The tokens, and so the loss masks, are the same either way.

The pieces: the episode state (:mod:`spade_core.play.episode`), one episode's turns, retries and deadline
(:mod:`spade_core.play.player`), the reply and observation tokens and the rules that end an episode
(:mod:`spade_core.play.recorder`), the two tool protocols and the two run modes; this module picks the run
mode and turns the episodes into rows.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Sequence
from typing import Any

from sandbox.policy import JailLimits
from spade_core.config import RolloutConfig, SpadeConfig
from spade_core.envs.validate import limits_from_config
from spade_core.llm.base import Generator, SamplingParams
from spade_core.play.episode import Episode, EpisodeSpec, RolloutStats
from spade_core.play.lockstep import MAX_STEP_WORKERS, run_lockstep
from spade_core.play.player import Player
from spade_core.play.recorder import MALFORMED_CALL_FEEDBACK, NAN, STEP_FAULTS
from spade_core.play.stream import run_stream

__all__ = [
    "CONDITIONS",
    "MALFORMED_CALL_FEEDBACK",
    "MAX_STEP_WORKERS",
    "NAN",
    "STEP_FAULTS",
    "EpisodeSpec",
    "RolloutEngine",
    "RolloutStats",
]

CONDITIONS = ("no_hint", "hint")


class RolloutEngine:
    """Plays batches of :class:`EpisodeSpec` with one generator and jailed environments."""

    def __init__(
        self,
        generator: Generator,
        cfg: RolloutConfig,
        sampling: SamplingParams,
        limits: JailLimits | None = None,
        call_timeout_s: float = 5.0,
        tokenizer: Any = None,
        jail_workers: int = 2,
        enable_thinking: bool | None = None,
        contract: str = "ours",
    ) -> None:
        self.generator = generator
        self.contract = contract  # validation.contract: what the jail's loader holds each environment to
        self.enable_thinking = enable_thinking  # model.enable_thinking, for the chat template
        self.cfg = cfg
        # Log-probs of every sampled token are kept: they are the behaviour policy for truncated importance
        # sampling at training time.
        self.sampling = SamplingParams(
            **{**sampling.__dict__, "max_new_tokens": cfg.max_tokens_per_turn, "logprobs": True}
        )
        self.limits = limits
        self.call_timeout_s = call_timeout_s
        self.tokenizer = tokenizer if tokenizer is not None else getattr(generator, "tokenizer", None)
        self.jail_workers = max(1, jail_workers)
        self.stats = RolloutStats()
        self._counting = threading.Lock()  # retries are counted from the jail workers' threads

    @classmethod
    def from_config(cls, cfg: SpadeConfig, generator: Generator, tokenizer: Any = None) -> RolloutEngine:
        """Engine with the run's sampling settings and jail limits (a long wall clock and CPU budget: jails
        live while the model generates; memory and processes stay as validation sets them)."""
        limit = cfg.rollout.jail_time_limit_s
        limits = dataclasses.replace(limits_from_config(cfg.validation), time_limit_s=limit, cpu_seconds=limit)
        return cls(
            generator,
            cfg.rollout,
            SamplingParams.from_config(cfg.model, seed=cfg.seed),
            limits,
            cfg.validation.call_timeout_s,
            tokenizer,
            cfg.validation.parallel_jails,
            cfg.model.enable_thinking,
            cfg.validation.contract,
        )

    def run(
        self, specs: Sequence[EpisodeSpec], on_turn: Callable[[int, int], None] | None = None
    ) -> list[dict[str, Any]]:
        """Play every spec to the end; returns one ``episodes`` row per spec, in order.

        A generator that serves requests concurrently (``streams``: the server backends) gets a stream:
        every episode advances on its own (:func:`~spade_core.play.stream.run_stream`); an in-process one gets
        one batched call per turn (:func:`~spade_core.play.lockstep.run_lockstep`). The rows are the same
        either way."""
        # a player per run, on the engine's settings as they are now; it counts into the engine's stats
        player = Player(
            self.generator,
            self.cfg,
            self.sampling,
            limits=self.limits,
            call_timeout_s=self.call_timeout_s,
            tokenizer=self.tokenizer,
            jail_workers=self.jail_workers,
            enable_thinking=self.enable_thinking,
            contract=self.contract,
            stats=self.stats,
            counting=self._counting,
        )
        if getattr(self.generator, "streams", False):
            episodes = run_stream(player, specs, on_turn)
        else:
            episodes = run_lockstep(player, specs, on_turn)
        rows = [self._row(e) for e in episodes]
        self.stats.episodes += len(rows)
        self.stats.generated_tokens += sum(e.generated_tokens for e in episodes)
        for e in episodes:
            if e.error_type:
                self.stats.errors[e.error_type] = self.stats.errors.get(e.error_type, 0) + 1
                self.stats.messages.setdefault(e.error_type, e.error or "")
        return rows

    def _row(self, episode: Episode) -> dict[str, Any]:
        has_tokens = bool(episode.token_ids)
        return {
            "episode_id": episode.spec.episode_id,
            "env_id": episode.spec.env_id,
            "condition": episode.spec.condition,
            "seed": episode.spec.seed,
            "episode_return": episode.episode_return,
            "turns": len(episode.rewards),
            "terminated": episode.terminated and episode.error_type is None,
            "error_type": episode.error_type,
            "transcript": episode.messages,
            "rewards": episode.rewards,
            "model_ref": self.generator.model_ref,
            "token_ids": episode.token_ids if has_tokens else None,
            "loss_mask": episode.loss_mask if has_tokens else None,
            "logprobs": episode.logprobs if has_tokens else None,
        }
