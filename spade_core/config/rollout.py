"""The ``rollout`` section (how environments are played and hinted), the ``scoring`` section (the designer
reward) and the ``memory`` section (the designer's memory of environments)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from spade_core.config.base import TOKEN_LIMIT, _Section


class RolloutConfig(_Section):
    plays_no_hint: int = Field(
        8, ge=1, description="No-hint plays per environment at every step, each from a fresh seed [8]."
    )
    plays_hint: int = Field(16, ge=0, description="Hinted plays per environment at a pool's first step [16].")
    max_turns: int = Field(25, gt=0, description="Turn limit per episode [25].")
    game_max_turns: bool = Field(
        False,
        description="Each environment keeps its own max_turns (its constructor's default), capped at max_turns "
        "[off: every environment is built with max_turns; on in the paper presets, as the authors].",
    )
    max_tokens_per_turn: int = Field(512, gt=0, le=TOKEN_LIMIT, description="Agent tokens per turn.")
    max_in_flight: int = Field(
        64,
        ge=1,
        le=4096,
        description="Server backends (vllm, openai): episodes whose next request may be in flight at once; each "
        "sends its next turn as soon as its jail answers (no batch barrier).",
    )
    max_context_tokens: int = Field(4096, gt=0, le=TOKEN_LIMIT, description="Conversation token limit.")
    context_margin_tokens: int | None = Field(
        None,
        ge=0,
        description="An episode stops (truncated) once at most this many context tokens are left, and a reply is "
        "cut to leave them [None: stop when another max_tokens_per_turn no longer fits; 64 in the paper "
        "presets, as the authors].",
    )
    action: Literal["reply", "boxed"] = Field(
        "reply",
        description="What a game's step receives: the whole reply, or \\boxed{X} of its first \\boxed{X} "
        "(the reply when it has none; tool-use environments always get the reply) [reply; boxed in the paper "
        "presets, as the authors].",
    )
    end_without_eos: bool = Field(
        False,
        description="A reply cut at max_tokens_per_turn (or by context_margin_tokens), so without its end of turn, "
        "ends the episode as truncated, return 0, without a step [off: the cut reply is played; on in the paper "
        "presets, as the authors].",
    )
    step_error_return: float | None = Field(
        None,
        ge=-1.0,
        le=1.0,
        description="A step that raises (or returns a broken tuple) ends the play, terminated, with this reward, "
        "hinted plays included; sandbox faults (timeout, memory, jail) are still retried [None: the play is "
        "retried, then left out, like any fault of the environment (a 0 in the authors' hinted arm); -1 in the "
        "paper presets, as the authors' game wrapper, synthetic_game_env.py:429-434].",
    )
    reset_failure: Literal["error", "placeholder"] = Field(
        "error",
        description="A play whose reset raises: 'error' = an error row (retried, then left out, as any fault of "
        "the environment); 'placeholder' = the play goes on from the authors' placeholder observation 'Error "
        "during reset. Starting new game.' (their game wrapper, synthetic_game_env.py:336-359) [error; "
        "placeholder in paper-games and paper-tool-use].",
    )
    tool_protocol: Literal["user_messages", "native"] = Field(
        "user_messages",
        description="How a tool-use agent calls tools. user_messages: the whole reply goes to the environment's "
        "step, which runs its first <tool_call>, and the result comes back as a user message; native: every call "
        "of a reply (the chat template's JSON or XML tool-call format) runs, outside step and counting no turn "
        "of the environment's, and each result comes back as a tool message; a reply with <answer>, or with no "
        "call, goes to step [user_messages; native in paper-tool-use, as the authors].",
    )
    mask_malformed_tool_calls: bool = Field(
        False,
        description="native protocol: a reply that writes <tool_call> but yields no parsable call is left out of "
        "the loss (mask 0), the play goes on with the environment's format error [off; on in paper-tool-use, as "
        "the authors' SPADE_MASK_MALFORMED_TOOLCALL].",
    )
    reuse_kv_cache: bool = Field(
        True,
        description="transformers backend: keep each live episode's KV cache between turns and prefill only "
        "the new tokens (exact under greedy decoding); False = re-prefill the whole conversation every turn.",
    )
    agent_prompt: Literal["ours", "authors", "authors_rlve"] = Field(
        "ours",
        description="The game agent's prompt (spade_core/play/agent_prompts.py): 'ours' = a system prompt naming "
        "the box the engine plays (first under action=boxed, last under reply) and the observation as it is; "
        "'authors' = no system prompt, the first observation wrapped in their one-message template "
        "(orchestrator.py:256-265); 'authors_rlve' = their fixed-environment RLVE prompt, no system prompt, the "
        "observation then 'Please reason step by step, and put your final answer within \\boxed{{}}.' with its "
        "doubled braces (fixed_env_orchestrator.py:59-63) [ours; authors in paper-games and paper-tool-use, "
        "authors_rlve in paper-fixed-rlve].",
    )
    tool_turns: Literal["count", "free"] = Field(
        "count",
        description="native tool protocol: 'count' = every agent turn, tool calls included, counts toward the "
        "environment's turn limit (min(its max_turns, max_turns)); 'free' = a turn of tool calls counts only "
        "toward max_turns agent turns, the environment's max_turns counts its own steps (answers, malformed "
        "calls), as the authors' orchestrator.py:835-1003 [count; free in paper-tool-use].",
    )
    malformed_call_feedback: bool = Field(
        False,
        description="native protocol with mask_malformed_tool_calls: a masked malformed call also appends the "
        "authors' '[FORMAT] Your previous <tool_call> could not be parsed...' line to the next observation "
        "(orchestrator.py:937-945) [off; on in paper-tool-use].",
    )
    hinted_play_rules: Literal["same", "authors"] = Field(
        "same",
        description="'same' = hinted plays follow the no-hint episode rules; 'authors' = a hinted game play always "
        "gets max_tokens_per_turn tokens and skips end_without_eos and context_margin_tokens (a hinted tool-use "
        "play keeps them: theirs takes the no-hint tool path, orchestrator.py:1839-1850); no hinted play is "
        "retried; a step that raises scores step_error_return (their game wrapper, synthetic_game_env.py:431-434) "
        "and any other failure (load, reset, timeout, model) scores 0 instead of being left out "
        "(orchestrator.py:1783-1917) [same; authors in the paper presets].",
    )
    hint_prompt: Literal["ours", "authors"] = Field(
        "ours",
        description="How hints are asked for (spade_core/play/hints.py): 'ours' = a one-line system prompt, the "
        "rules in the user message, the reply cut to hint_max_words; 'authors' = their long system prompt with a "
        "good and a bad example (hint_generator.py:23-74), the code alone in the user message, no cut [ours; "
        "authors in the paper presets].",
    )
    hint_top_p: float | None = Field(
        None, gt=0.0, le=1.0, description="Nucleus sampling of hints [None = model.top_p; 0.9 in the paper presets]."
    )
    hint_top_k: int | None = Field(
        None,
        ge=0,
        description="Top-k of hints [None = model.top_k; 0 = no top-k cut, as the authors' hint calls].",
    )
    hint_max_words: int = Field(100, gt=0, description="Hint length limit [100 words].")
    hint_temperature: float = Field(0.3, ge=0.0, le=2.0, description="Sampling temperature of hints [0.3].")
    hint_max_new_tokens: int | None = Field(
        None,
        gt=0,
        le=TOKEN_LIMIT,
        description="Token budget of a hint [4096 games, 2048 tool use]; None = 2 x hint_max_words.",
    )
    replay_envs: int = Field(0, ge=0, description="Memory envs replayed per generation (PLR-style; 0 = paper).")
    hint_rewrites: int = Field(
        1, ge=0, description="Rewrites of a hint that leaks the solution; still leaking = no regret term [1]."
    )
    env_retries: int = Field(
        1, ge=0, description="Retries of a play that failed because the environment broke (not the agent) [1]."
    )
    starter_envs: int = Field(
        0,
        ge=0,
        description="Starter environments (data/starter_envs/, ones a small model wins sometimes) added to every "
        "pool, first N by file name; 0 = paper. They give a tiny model's groups reward variance from step 0.",
    )
    jail_time_limit_s: int = Field(
        3600, gt=0, description="Wall-clock limit of one episode's jail (it idles while the model generates)."
    )
    model_retries: int = Field(
        1,
        ge=0,
        description="Retries of a play whose model call failed (error_type 'model_error'), from the start on the "
        "engine as it is then (restarted when it had died or hung); a play that still fails is kept as a row but "
        "left out of win rates, regret and training, as the authors drop a failed sample [1; ours].",
    )
    max_model_error_share: float = Field(
        0.25,
        ge=0.0,
        le=1.0,
        description="The share of a rollout's plays that may end in 'model_error' (after model_retries); past it "
        "the generation stops with one line instead of training on what is left [0.25; ours; 1 = never stop].",
    )
    play_deadline_s: float | None = Field(
        None,
        gt=0,
        description="Seconds one play may take, its model calls and steps included; a play that runs past it is "
        "dropped (error_type 'deadline': no retry, left out of win rates and training), as the authors' "
        "orchestrator.py:1521-1541 [None: no deadline; 300 in the paper presets].",
    )

    @model_validator(mode="after")
    def _turn_fits_the_context(self) -> RolloutConfig:
        if self.max_tokens_per_turn > self.max_context_tokens:
            raise ValueError(
                f"rollout.max_tokens_per_turn {self.max_tokens_per_turn} must be <= rollout.max_context_tokens "
                f"{self.max_context_tokens}: one reply has to fit the conversation"
            )
        return self


# The designer reward variants (spade_core/method/designer_reward.py computes each; written here once).
DesignerRewardVariant = Literal["blend", "regret", "solve_rate", "learnability", "learning_potential"]


class ScoringConfig(_Section):
    designer_reward: DesignerRewardVariant = Field("blend", description="Designer reward variant [blend].")
    lp_gamma_fast: float = Field(0.98, gt=0, lt=1, description="learning_potential: fast EMA factor [0.98].")
    lp_gamma_slow: float = Field(0.85, gt=0, lt=1, description="learning_potential: slow EMA factor [0.85].")
    reward_scale_cap: float = Field(
        50.0, gt=0, description="Designer reward scale min(n_agent / n_designer * K, cap) [50]."
    )
    regret_weight: float = Field(0.4, ge=0, description="Weight of the regret term in blend [0.4].")
    plateau_weight: float = Field(
        0.6,
        ge=0,
        description="Weight of the plateau term in blend [0.6]; independent of regret_weight, as the authors' "
        "(their characterization tests use 1.0 and 1.0).",
    )
    zero_leaked_regret: bool = Field(
        True,
        description="An environment whose hint still leaks the solution after rollout.hint_rewrites gets regret 0 "
        "(its hinted plays measure the leak, not the environment) [on; off in the paper presets: the authors "
        "check no leak].",
    )
    parent_copy_raw: float | None = Field(
        None,
        ge=0,
        le=1,
        description="A design the novelty stage refused as a copy of its parent (designer.mode mutate or "
        "parameters): null = never trained on [null, as the authors]; a number = rewarded with this raw value, "
        "centred among its skill's designs and trained like them, so that a copy costs the designer what the "
        "designs it crowds out earn (ours, opt-in: the authors train no refused design).",
    )
    regret_scale: float = Field(0.15, gt=0, description="Regret normaliser in blend [0.15].")
    plateau_low: float = Field(0.4, ge=0, le=1, description="Win-rate plateau start [0.4].")
    plateau_high: float = Field(0.6, ge=0, le=1, description="Win-rate plateau end [0.6].")
    plateau_falloff: float = Field(0.25, gt=0, description="Linear fall-off width outside the plateau [0.25].")


class MemoryConfig(_Section):
    capacity: int = Field(200, gt=0, description="FIFO capacity [200].")
    positive_win_rate: tuple[float, float] = Field((0.15, 0.85), description="In-band win rate [0.15, 0.85].")
    negative_high: float = Field(0.9, description="Negative example: win rate above this [0.9].")
    negative_low: float = Field(0.1, description="Negative example: win rate below this [0.1].")
    enabled: bool = Field(True, description="False = the 'no memory' ablation.")
    novelty_threshold: float | None = Field(
        None, description="Reject a valid design whose MiniLM cosine similarity to a memory env exceeds this."
    )
    report_diversity: bool = Field(True, description="Vendi score of each generation's pool (MiniLM embeddings).")
    seed_with_library: bool = Field(
        False, description="Start the memory with the seed library [off: the paper's memory starts empty]."
    )
    code_chars: int = Field(
        2000,
        gt=0,
        description="A positive example's code in the design prompt: cut to this length [2000], or with "
        "example_code 'whole' the longest module shown.",
    )
    negative_name: Literal["class", "file_stem"] = Field(
        "class",
        description="How a negative example is named in the design prompt: 'class' = its environment class "
        "(MazeEnv: says what it was); 'file_stem' = the authors' file stem (env_memory.py:150, game_files.py:33), "
        "game_{step:05d}_{index:03d}_{skill}: the step that designed it, its place among its generation's "
        "entries and its skill, nothing of what it was [class; file_stem in the paper presets].",
    )
    example_code: Literal["cut", "whole"] = Field(
        "cut",
        description="How a positive example's code enters the design prompt: 'cut' to code_chars characters [the "
        "authors'], 'whole' = the whole module, and an example longer than code_chars is not shown at all.",
    )
