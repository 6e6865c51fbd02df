"""The rollout engine: many episodes against jailed environments, advanced together.

Against an in-process model (transformers), each turn every live episode's next prompt goes to the
generator in ONE batched call; finished episodes leave the batch; the environments then step in parallel
(one long-lived jail per episode). Against a server (vLLM, any OpenAI-compatible one: ``streams``) there is
no batch barrier: each episode sends its next request as soon as its jail has answered, up to
``rollout.max_in_flight`` at once, and the server batches whatever is in flight. Episode
return per DESIGN.md §5 (the authors' ``spade/core/utils/rewards.py:47-50``): the last reward clamped to
[-1, 1] if the episode terminated, else 0 (truncated, out of turns or out of context); each row says
whether it ``terminated``. A failed environment or model call ends that episode with an ``error_type`` and
return 0 and never stops the others.

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

Tool use has two protocols (``rollout.tool_protocol``). ``user_messages``: the reply goes to ``step``, which
runs its first ``<tool_call>``, and the observation comes back as a user message. ``native`` (the authors',
``orchestrator.py:786-1031``): a reply with ``<answer>``, or without a call, goes to ``step``; otherwise every
call of the reply runs in order through the jail's ``call_tool`` (counting no turn of the environment's),
each result comes back as a ``tool`` message, and the turn's reward is 0. A malformed call (``<tool_call>``
written, nothing parsed) goes to ``step`` and, with ``rollout.mask_malformed_tool_calls``, its reply's tokens
get mask 0.

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

With ``rollout.reuse_kv_cache`` each episode's requests name it by a :class:`CacheSlot` (a fresh key per
episode, bounded by ``rollout.max_context_tokens``), so a backend that keeps KV caches prefills only what
the last turn added; the engine releases an episode's slot as soon as the episode is over. The tokens,
and so the loss masks, are the same either way.
"""

from __future__ import annotations

import dataclasses
import hashlib
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from sandbox.jail import CallResult
from sandbox.outcome import ErrorType, episode_return, is_env_error
from sandbox.policy import JailLimits
from sandbox.runtime.spade_env import is_malformed_call, parse_answer, parse_native_calls
from sandbox.session import EnvSession, run_parallel
from spade_core.config import RolloutConfig, SpadeConfig
from spade_core.envs.validate import limits_from_config
from spade_core.llm.base import (
    CacheSlot,
    Completion,
    GenerationRequest,
    Generator,
    KVCacheOwner,
    ModelError,
    SamplingParams,
)
from spade_core.llm.chat_tokens import ChatTokens, TemplateError, ensure_template, template_kwargs
from spade_core.play.actions import game_action
from spade_core.play.agent_prompts import first_observation, system_prompt

CONDITIONS = ("no_hint", "hint")
# A step ending with one of these was the environment's own code (it raised or broke the return contract),
# not its jail: with ``rollout.step_error_return`` set it scores that reward instead of being retried.
STEP_FAULTS: frozenset[ErrorType] = frozenset({"exception", "contract_error"})
MAX_STEP_WORKERS = 32
NAN = float("nan")
# What the authors append to the observation after a masked malformed tool call (orchestrator.py:937-945).
MALFORMED_CALL_FEEDBACK = (
    '[FORMAT] Your previous <tool_call> could not be parsed. Emit exactly: <tool_call>{"name": "<tool_name>", '
    '"arguments": {<args>}}</tool_call>'
)


@dataclass(frozen=True)
class EpisodeSpec:
    """One episode to play: an environment, a seed and a condition (with its hint)."""

    env_id: str
    code: str
    seed: int
    condition: str = "no_hint"
    hint: str | None = None
    play: int = 0  # index among the plays of the same (env, seed, condition)

    @property
    def episode_id(self) -> str:
        key = f"{self.env_id}:{self.condition}:{self.seed}:{self.play}"
        return hashlib.sha256(key.encode()).hexdigest()[:16]


@dataclass
class _Episode:
    spec: EpisodeSpec
    session: EnvSession
    messages: list[dict[str, str]] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    # the behaviour policy's log-prob of each agent token (0 on environment tokens, NaN when unknown)
    logprobs: list[float] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    terminated: bool = False
    done: bool = False
    error_type: str | None = None
    error: str | None = None
    generated_tokens: int = 0
    cache_key: str | None = None  # the slot its KV cache is kept under, until released
    attempt: int = 0  # 0 = the first play; k = the k-th retry after the environment broke it
    model_attempt: int = 0  # k = the k-th retry after a model call failed (rollout.model_retries)
    reply_start: int = 0  # where the last reply's tokens begin in token_ids
    env_steps: int = 0  # replies that went to the environment's step (tool-call turns do not)
    # rollout.hinted_play_rules=authors on a hinted play: a failure scores 0 (kept), and no episode rule cuts a game
    authors_hinted: bool = False
    started: float = field(default_factory=time.monotonic)  # when this attempt began (rollout.play_deadline_s)

    def fail(self, error_type: str, message: str | None) -> None:
        if self.authors_hinted:  # the authors' hinted arm: a failed play is a 0 (orchestrator.py:1783-1917)
            self.messages.append({"role": "user", "content": f"[play failed: {error_type}] {message or ''}".strip()})
            self.error, self.terminated, self.done = message, False, True
            return
        self.error_type, self.error, self.done = error_type, message, True

    @property
    def free_of_rules(self) -> bool:
        """A hinted game play under the authors' rules: no end-of-turn or context-margin rule cuts it. Their
        tool-use hinted plays go through the no-hint tool path and keep both (``orchestrator.py:1839-1850``)."""
        return self.authors_hinted and self.session.kind != "tool"

    @property
    def episode_return(self) -> float:
        """clamp(last reward, -1, 1) if the episode terminated cleanly, else 0 (:func:`episode_return`)."""
        return episode_return(self.rewards, self.terminated) if self.error_type is None else 0.0


@dataclass(frozen=True)
class _Turn:
    """An agent reply to play: the action for ``step``, or the tool calls to run outside it."""

    episode: _Episode
    action: str
    calls: list[tuple[str, dict[str, Any]]]
    eos: bool  # the reply ended with the end-of-turn token
    malformed: bool = False  # a <tool_call> was written and none parsed (native protocol)


@dataclass
class RolloutStats:
    episodes: int = 0
    turns: int = 0
    generate_calls: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0  # summed over every request: what a full prefill of each turn would feed
    cached_tokens: int = 0  # of those, served from a kept KV cache instead of prefilled
    errors: dict[str, int] = field(default_factory=dict)  # error_type -> rows that kept it (after retries)
    messages: dict[str, str] = field(default_factory=dict)  # error_type -> the first such row's message
    retries: int = 0  # plays started again because the environment broke them
    model_retries: int = 0  # plays started again because a model call failed


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

    # -- episode lifecycle ---------------------------------------------------------------------------
    def _open(self, spec: EpisodeSpec, attempt: int = 0, model_attempt: int = 0) -> _Episode:
        episode = _Episode(
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
        chat = self._chat(episode)
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
            episode.done = margin_rule and self._context_spent(episode)
        return episode

    def _open_safely(self, spec: EpisodeSpec, attempt: int = 0, model_attempt: int = 0) -> _Episode:
        """:meth:`_open`, with anything unexpected recorded on the episode instead of raised."""
        try:
            return self._open(spec, attempt, model_attempt)
        except TemplateError as exc:  # the model's template, not this episode: no play could be assembled
            raise ModelError(str(exc)) from None
        except Exception as exc:  # e.g. a tokenizer refusing text: data about this episode only
            hinted = self.cfg.hinted_play_rules == "authors" and spec.condition == "hint"
            episode = _Episode(spec, EnvSession(spec.code), attempt=attempt, authors_hinted=hinted)
            episode.model_attempt = model_attempt
            episode.fail("jail_error", f"{type(exc).__name__}: {exc}")
            return episode

    def _reopen(self, episode: _Episode) -> _Episode:
        """A fresh play of a failed episode's spec (a new jail, the same seed), counted as the retry it is: of
        a model call (``model_attempt``) or of the environment (``attempt``). The caller closes the old jail."""
        model = episode.error_type == "model_error"
        with self._counting:
            if model:
                self.stats.model_retries += 1
            else:
                self.stats.retries += 1
        return self._open_safely(episode.spec, episode.attempt + (not model), episode.model_attempt + model)

    def _retry_broken(self, episodes: list[_Episode]) -> None:
        """Replace, in place, every episode the environment broke that has retries left by a fresh play of
        the same spec (a new jail, the same seed); the broken one's jail is closed first."""
        redo = [i for i, e in enumerate(episodes) if self._retries_left(e)]
        if not redo:
            return
        self._release([episodes[i] for i in redo])
        run_parallel(lambda i: episodes[i].session.close(), redo, self.jail_workers)
        fresh = run_parallel(lambda i: self._reopen(episodes[i]), redo, self.jail_workers)
        for i, episode in zip(redo, fresh, strict=True):
            episodes[i] = episode

    def _retries_left(self, episode: _Episode) -> bool:
        """Whether the play failed in a way that is played again and has retries left: a failed model call
        (``rollout.model_retries``) or the environment broke it (``rollout.env_retries``); a play past its
        deadline is not (the authors retry no timed-out play)."""
        if episode.error_type == "model_error":
            return episode.model_attempt < self.cfg.model_retries
        retriable = is_env_error(episode.error_type) and episode.error_type != "deadline"
        return retriable and episode.attempt < self.cfg.env_retries

    def _check_deadline(self, episode: _Episode) -> None:
        """End a play that has run past ``rollout.play_deadline_s`` (counted from its attempt's start): it is
        dropped, ``error_type`` deadline, also when it ended in the turn that overran, as the authors cancel a
        play at its limit (``orchestrator.py:1521-1541``); a hinted play under the authors' rules scores 0."""
        limit = self.cfg.play_deadline_s
        if limit is None or episode.error_type is not None or time.monotonic() - episode.started <= limit:
            return
        if episode.authors_hinted and episode.done and episode.error is not None:
            return  # already failed (scored 0)
        episode.fail("deadline", f"the play ran past rollout.play_deadline_s ({limit:g} s)")

    def _chat(self, episode: _Episode) -> ChatTokens | None:
        if self.tokenizer is None:
            return None
        tools = episode.session.tools if episode.session.kind == "tool" else None
        return ChatTokens(self.tokenizer, tools, template_kwargs(self.enable_thinking))

    def _request(self, episode: _Episode) -> GenerationRequest:
        token_prompt = self.generator.supports_token_prompts and self.tokenizer is not None
        chat = self._chat(episode)
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

    def _cache_slot(self, episode: _Episode) -> CacheSlot | None:
        """The episode's KV-cache slot: a key of its own (never its episode id, which repeats across runs
        and duplicate specs), bounded by the context limit that ends the episode anyway."""
        if not self.cfg.reuse_kv_cache:
            return None
        if episode.cache_key is None:
            episode.cache_key = uuid.uuid4().hex
        return CacheSlot(episode.cache_key, self.cfg.max_context_tokens)

    def _release(self, episodes: Sequence[_Episode]) -> None:
        """Free the kept KV caches of episodes that are over (once per episode)."""
        keys = [e.cache_key for e in episodes if e.cache_key is not None]
        for e in episodes:
            e.cache_key = None
        if keys and isinstance(self.generator, KVCacheOwner):
            self.generator.release(keys)

    def _context_spent(self, episode: _Episode) -> bool:
        """Whether the conversation has no room for another reply (then the episode ends, truncated)."""
        if self.tokenizer is None:
            return False
        left = self.cfg.max_context_tokens - len(episode.token_ids)
        if episode.free_of_rules:  # the authors check no context on a hinted game play: only a full one stops it
            return left <= 0
        margin = self.cfg.context_margin_tokens
        return left <= margin if margin is not None else left < self.cfg.max_tokens_per_turn

    def _record_reply(self, episode: _Episode, completion: Completion) -> tuple[bool, bool, str]:
        """Append the agent's reply (tokens with mask 1). Returns whether its tokens end with the end-of-turn
        token, whether it was cut (at the token limit, or by ``rollout.context_margin_tokens``, which cuts
        its tokens to leave that room) and its text (as cut)."""
        chat = self._chat(episode)
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

    def _action(self, episode: _Episode, reply: str) -> str:
        """What the environment's ``step`` receives for ``reply`` (``rollout.action``; tool use: the reply)."""
        return reply if episode.session.kind == "tool" else game_action(reply, self.cfg.action)

    def _native_calls(self, episode: _Episode, reply: str) -> tuple[list[tuple[str, dict[str, Any]]], bool]:
        """The tool calls to run outside ``step`` for ``reply``: with the native protocol, every call of a
        tool-use reply without an ``<answer>`` (the authors' orchestrator.py:891-997); otherwise none, and the
        reply goes to ``step``. A malformed reply (``<tool_call>`` but no call) goes to ``step`` too, which
        scores its format error; with ``rollout.mask_malformed_tool_calls`` its tokens leave the loss. Also
        returns whether the reply was such a masked malformed call."""
        if self.cfg.tool_protocol != "native" or episode.session.kind != "tool" or parse_answer(reply) is not None:
            return [], False
        calls = parse_native_calls(reply)
        masked = self.cfg.mask_malformed_tool_calls and is_malformed_call(reply, calls)
        if masked:
            start = episode.reply_start
            episode.loss_mask[start:] = [0] * (len(episode.loss_mask) - start)
        return calls, masked

    def _play(self, turn: _Turn) -> list[CallResult]:
        """Run one turn in the episode's jail: every call in order (stopping at a failed one), or one step."""
        if not turn.calls:
            return [turn.episode.session.step(turn.action)]
        results = []
        for name, arguments in turn.calls:
            results.append(turn.episode.session.call_tool(name, arguments))
            if not results[-1].ok:
                break
        return results

    def _record_tools(
        self, episode: _Episode, calls: list[tuple[str, dict[str, Any]]], results: list[CallResult], eos: bool
    ) -> None:
        """A turn of tool calls: reward 0, no termination; each result comes back as a ``tool`` message."""
        failed = next((r for r in results if not r.ok), None)
        if failed is not None:  # as a failed step: rollout.step_error_return, or a fault of the environment
            self._record_step(episode, failed, eos)
            return
        episode.rewards.append(0.0)  # the authors' orchestrator.py:1000: a tool turn's reward is 0
        if len(episode.rewards) >= self._turn_limit(episode):
            episode.done = True  # out of turns: truncated, return 0
            return
        # str(): the reply comes from the jail, which the environment's code shares
        self._append_observations(
            episode, [{"role": "tool", "content": str(r.data.get("output"))} for r in results], eos
        )

    def _turn_limit(self, episode: _Episode) -> int:
        """Agent turns the episode may take: the environment's limit, or with ``rollout.tool_turns: free``
        ``rollout.max_turns`` (tool-call turns then count toward the environment's limit not at all)."""
        return self.cfg.max_turns if self.cfg.tool_turns == "free" else episode.session.max_turns

    def _record_step(
        self, episode: _Episode, result: CallResult, ended_with_eos: bool, malformed: bool = False
    ) -> None:
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
        out_of_turns = episode.env_steps >= episode.session.max_turns or len(episode.rewards) >= self._turn_limit(
            episode
        )
        if episode.terminated or data["truncated"] or out_of_turns:
            episode.done = True
            return
        observation = data["obs"]
        if malformed and self.cfg.malformed_call_feedback:  # the authors' orchestrator.py:937-945
            observation = f"{observation}\n\n{MALFORMED_CALL_FEEDBACK}"
        self._append_observations(episode, [{"role": "user", "content": observation}], ended_with_eos)

    def _append_observations(self, episode: _Episode, following: list[dict[str, str]], ended_with_eos: bool) -> None:
        """Close the agent's turn and add what the environment answered (messages and tokens, mask 0)."""
        chat = self._chat(episode)
        if chat is not None:
            history, reply = episode.messages[:-1], episode.messages[-1]["content"]
            env_ids = chat.after_assistant(history, reply, ended_with_eos, following)
            episode.token_ids += env_ids
            episode.loss_mask += [0] * len(env_ids)
            episode.logprobs += [0.0] * len(env_ids)
        episode.messages.extend(following)
        episode.done = self._context_spent(episode)  # context budget spent: truncated, return 0

    # -- the loop ------------------------------------------------------------------------------------
    def run(
        self, specs: Sequence[EpisodeSpec], on_turn: Callable[[int, int], None] | None = None
    ) -> list[dict[str, Any]]:
        """Play every spec to the end; returns one ``episodes`` row per spec, in order.

        A generator that serves requests concurrently (``streams``: the server backends) gets a stream:
        every episode advances on its own (:meth:`_run_stream`); an in-process one gets one batched call
        per turn (:meth:`_run_lockstep`). The rows are the same either way."""
        if getattr(self.generator, "streams", False):
            episodes = self._run_stream(specs, on_turn)
        else:
            episodes = self._run_lockstep(specs, on_turn)
        rows = [self._row(e) for e in episodes]
        self.stats.episodes += len(rows)
        self.stats.generated_tokens += sum(e.generated_tokens for e in episodes)
        for e in episodes:
            if e.error_type:
                self.stats.errors[e.error_type] = self.stats.errors.get(e.error_type, 0) + 1
                self.stats.messages.setdefault(e.error_type, e.error or "")
        return rows

    def _run_lockstep(self, specs: Sequence[EpisodeSpec], on_turn: Callable[[int, int], None] | None) -> list[_Episode]:
        """Each turn, every live episode's prompt in ONE batched call; then every environment steps."""
        episodes: list[_Episode] = []
        try:
            episodes = run_parallel(self._open_safely, specs, self.jail_workers)
            while True:
                self._retry_broken(episodes)
                live = [e for e in episodes if not e.done]
                if not live:
                    break
                completions = self.generator.generate([self._request(e) for e in live], self.sampling)
                self.stats.generate_calls += 1
                stepping = [t for e, c in zip(live, completions, strict=True) if (t := self._take_reply(e, c))]
                results = run_parallel(self._play, stepping, min(MAX_STEP_WORKERS, max(1, len(stepping))))
                for turn, result in zip(stepping, results, strict=True):
                    self._record_turn(turn, result)
                for episode in live:
                    self._check_deadline(episode)
                self._release([e for e in live if e.done])
                self._count_prompts(completions)
                self.stats.turns += 1
                if on_turn is not None:
                    on_turn(sum(e.done for e in episodes), len(episodes))
        finally:
            self._release(episodes)
            run_parallel(lambda e: e.session.close(), episodes, self.jail_workers)
        return episodes

    def _run_stream(self, specs: Sequence[EpisodeSpec], on_turn: Callable[[int, int], None] | None) -> list[_Episode]:
        """Every episode on its own worker, up to ``rollout.max_in_flight`` at once: a reply goes to its jail
        and the episode's next request goes out while the others are still decoding (no batch barrier; the
        server batches whatever is in flight). Jails open ``jail_workers`` at a time."""
        episodes: list[_Episode | None] = [None] * len(specs)
        opening = threading.Semaphore(self.jail_workers)
        lock = threading.Lock()
        finished = [0]

        def open_(spec: EpisodeSpec, attempt: int) -> _Episode:
            with opening:
                return self._open_safely(spec, attempt)

        def play(index: int) -> None:
            episode = episodes[index] = open_(specs[index], 0)
            try:
                while True:
                    if self._retries_left(episode):
                        episode.session.close()
                        with opening:
                            episode = episodes[index] = self._reopen(episode)
                        continue
                    if episode.done:
                        break
                    completion = self.generator.generate([self._request(episode)], self.sampling)[0]
                    turn = self._take_reply(episode, completion)
                    if turn is not None:
                        self._record_turn(turn, self._play(turn))
                    self._check_deadline(episode)
                    with lock:
                        self.stats.generate_calls += 1
                        self._count_prompts([completion])
            finally:
                episode.session.close()
            with lock:
                finished[0] += 1
                if on_turn is not None:
                    on_turn(finished[0], len(specs))

        workers = max(1, min(self.cfg.max_in_flight, len(specs)))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            list(pool.map(play, range(len(specs))))
        self.stats.turns += max((len(e.rewards) for e in episodes if e is not None), default=0)
        return [e for e in episodes if e is not None]

    def _take_reply(self, episode: _Episode, completion: Completion) -> _Turn | None:
        """Record the agent's reply; the turn to play in the jail, or None when the episode ends here."""
        if completion.error is not None:
            episode.fail("model_error", completion.error)
            return None
        eos, cut, reply = self._record_reply(episode, completion)
        if self.cfg.end_without_eos and cut and not episode.free_of_rules:
            episode.done = True  # cut at the token limit: truncated, unplayed, return 0
            return None
        calls, malformed = self._native_calls(episode, reply)
        return _Turn(episode, self._action(episode, reply), calls, eos, malformed)

    def _record_turn(self, turn: _Turn, results: list[CallResult]) -> None:
        if turn.calls:
            self._record_tools(turn.episode, turn.calls, results, turn.eos)
        else:
            self._record_step(turn.episode, results[0], turn.eos, turn.malformed)

    def _count_prompts(self, completions: Sequence[Completion]) -> None:
        self.stats.prompt_tokens += sum(c.prompt_tokens for c in completions)
        self.stats.cached_tokens += sum(c.cached_tokens for c in completions)

    def _row(self, episode: _Episode) -> dict[str, Any]:
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
