"""SPADE configuration: one pydantic model tree, loaded from YAML presets with dotted overrides.

Every field has a docstring-like ``description``; unknown keys and bad values fail at load time with one
line naming the key, the bad value and what is allowed (docs/DESIGN.md §3). The resolved config is hashed
(``config_hash``); the *artifact hash* (the config without the store location and the execution-only
settings, ``spade_core.store.markers.artifact_hash``) binds a run id and is part of every stage marker.

Field defaults follow the paper (arXiv 2608.19197, docs/DESIGN.md §7) where the project implements that
part of the method; docs/DESIGN.md §3 lists those that still differ. The ``tiny`` preset shrinks them for
the embedded CPU model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Literal, Self

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from spade_core.hashing import short_hash
from spade_core.resources import data_dir, parents_dir

PRESET_DIR = data_dir("configs")

GAME_SKILLS = (
    "mathematical_reasoning",
    "logical_deduction",
    "spatial_reasoning",
    "pattern_recognition",
    "optimization",
    "causal_inference",
)
TOOL_SKILLS = (
    "api_orchestration",
    "data_retrieval",
    "state_modification",
    "error_recovery",
    "tool_selection",
    "multi_step_workflows",
)


def skill_kind(skill: str) -> str:
    """'game' or 'tool' for a skill key; an unknown skill is an error naming it."""
    if skill in GAME_SKILLS:
        return "game"
    if skill in TOOL_SKILLS:
        return "tool"
    raise ValueError(f"unknown skill {skill!r}; skills: {', '.join(GAME_SKILLS + TOOL_SKILLS)}")


class ConfigError(ValueError):
    """A configuration problem, with a one-line message naming the key and the bad value."""


# Every number of the config has a range: those a field does not bound above (or below) are within ±NUMBER_LIMIT,
# floats are finite, token budgets within TOKEN_LIMIT (the model's own context is known only once it loads).
NUMBER_LIMIT = 1_000_000_000
TOKEN_LIMIT = 1_048_576
SEED_LIMIT = 2**32 - 1  # stages derive seeds from it (seed · 100003 + gen, + offsets) that torch takes as 64 bits


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @model_validator(mode="after")
    def _numbers_bounded(self) -> Self:
        for name, info in type(self).model_fields.items():
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            bounds = {type(m).__name__ for m in info.metadata}
            if (not bounds & {"Le", "Lt"} and value > NUMBER_LIMIT) or (
                not bounds & {"Ge", "Gt"} and value < -NUMBER_LIMIT
            ):
                raise ValueError(
                    f"config key {_key_of(type(self), name)!r} has bad value {value!r}: every number of the config "
                    f"is within ±{NUMBER_LIMIT:,}"
                )
        return self


def _key_of(section: type[BaseModel], name: str) -> str:
    """The dotted key of field ``name`` of a section (``training.learning_rate``), for messages."""
    for key, info in SpadeConfig.model_fields.items():
        if info.annotation is section:
            return f"{key}.{name}"
    return name


class StoreConfig(_Section):
    root: str = Field(
        "./spade-store", min_length=1, pattern=r"\S", description="Local path or s3://bucket/prefix of the store."
    )
    endpoint_url: str | None = Field(
        None, description="S3-compatible endpoint; falls back to the AWS_ENDPOINT_URL variable."
    )


class CorpusConfig(_Section):
    source: str = Field("embedded", description="'embedded' (Wikipedia leads) or a Parquet/JSONL path or URL.")
    max_words: int = Field(6000, gt=0, description="Document truncation for game designs [paper: 6000].")
    max_words_tool: int = Field(4000, gt=0, description="Document truncation for tool-use designs [4000].")
    enabled: bool = Field(True, description="False = the 'no corpus' ablation (designer gets no document).")


class ModelConfig(_Section):
    name_or_path: str = Field("embedded", description="'embedded' (SmolLM2-135M-Instruct), a local HF dir or hub id.")
    backend: Literal["transformers", "openai", "vllm"] = Field("transformers", description="Generation backend.")
    base_url: str | None = Field(None, description="OpenAI-compatible base URL (backend=openai).")
    api_key_env: str = Field("OPENAI_API_KEY", description="Variable holding the API key (never stored).")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="Device for the transformers backend.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="Weights dtype.")
    temperature: float = Field(0.6, ge=0.0, le=2.0, description="Sampling temperature [paper: 0.6].")
    top_p: float = Field(0.95, gt=0.0, le=1.0, description="Nucleus sampling [0.95].")
    top_k: int | None = Field(
        20,
        ge=1,
        description="Top-k sampling [20]; None = off. The openai backend sends it as vLLM/SGLang's extra "
        "`top_k` field: set None for a server that rejects it.",
    )
    max_new_tokens: int = Field(1024, gt=0, le=TOKEN_LIMIT, description="Tokens per generation call.")
    enable_thinking: bool | None = Field(
        None,
        description="Passed as enable_thinking to a chat template that reads it (Qwen3's), wherever this project "
        "renders a chat [None = not passed; false in the paper presets, as the authors' "
        "--apply-chat-template-kwargs '{\"enable_thinking\":false}'].",
    )
    batch_size: int = Field(32, gt=0, description="Max sequences per batched generate call.")
    threads: int | None = Field(
        None,
        ge=1,
        description="CPU threads for torch (transformers backend, trainer); None = the CPUs idle when the "
        "model loads (another busy process costs a core, not a spinning barrier).",
    )
    request_timeout_s: float = Field(120.0, gt=0, description="Per-request timeout (openai/vllm).")
    max_retries: int = Field(3, ge=0, description="Retries with backoff on transient model errors.")
    health_timeout_s: float = Field(
        30.0,
        gt=0,
        le=3600,
        description="backend=vllm: seconds the engine's health probe (a one-token request) may take before the "
        "engine counts as hung and is replaced; a request that times out asks for the probe first.",
    )
    server_command: list[str] | None = Field(
        None,
        description="backend=vllm: server launch template with {python} {model} {host} {port} {dtype} {seed} "
        "(None = vLLM's OpenAI server from the engine's environment, built by 'make vllm-env').",
    )
    engine_kv_cache_gib: int = Field(
        1,
        ge=1,
        le=1024,
        description="backend=vllm on a CPU: the engine's KV cache in whole GiB (VLLM_CPU_KVCACHE_SPACE); 1 GiB "
        "holds ~45k tokens of the 135M model in bf16.",
    )
    max_model_len: int | None = Field(
        None,
        gt=0,
        le=TOKEN_LIMIT,
        description="backend=vllm: the engine's context length (--max-model-len; None = the model's window).",
    )
    tensor_parallel_size: int = Field(
        1,
        ge=1,
        le=64,
        description="backend=vllm on GPUs: GPUs per engine replica (--tensor-parallel-size); a replica's share of "
        "orchestration.generation_devices must hold it.",
    )
    gpu_memory_utilization: float | None = Field(
        None,
        gt=0.0,
        le=1.0,
        description="backend=vllm on GPUs: the share of each GPU's memory the engine takes (None = vLLM's 0.9).",
    )
    reload_timeout_s: float = Field(
        600.0,
        gt=0,
        le=86400,
        description="backend=vllm: seconds a weight reload, a sleep or a wake may take (a large model's reload "
        "outlasts a request's timeout); one that fails restarts the engine on the checkpoint.",
    )
    engine_sleep: bool | None = Field(
        None,
        description="backend=vllm: at the trainer's turn on a shared device the engine sleeps (level 1: weights to "
        "host memory, KV cache freed; --enable-sleep-mode) and wakes after, instead of a restart; None = on a GPU "
        "only (vLLM's CPU build has no sleep mode: there the engine is stopped and started again).",
    )
    engine_eager: bool | None = Field(
        None,
        description="backend=vllm: run without CUDA graphs / torch.compile (--enforce-eager); None = on a CPU "
        "only, where the compile cache does not load and every start would recompile for minutes.",
    )


def sampling_cut(model: ModelConfig, top_p: float | None, top_k: int | None) -> dict[str, Any]:
    """``top_p`` and ``top_k`` of a request that may set its own: None keeps the model's, top_k 0 = no cut.

    >>> m = ModelConfig()
    >>> sampling_cut(m, None, None), sampling_cut(m, 0.9, 0)
    ({'top_p': 0.95, 'top_k': 20}, {'top_p': 0.9, 'top_k': None})
    """
    return {
        "top_p": model.top_p if top_p is None else top_p,
        "top_k": model.top_k if top_k is None else (top_k or None),
    }


class DesignerConfig(_Section):
    kind: Literal["game", "tool", "both"] = Field("both", description="Environment kinds to design.")
    skills_per_generation: int = Field(
        3, ge=1, le=6, description="Game skills per generation, round robin over the 6 [3]."
    )
    tool_skills_per_generation: int = Field(
        6, ge=1, le=6, description="Tool-use skills per generation, round robin over the 6 [6: all]."
    )
    documents_per_generation: int = Field(24, gt=0, description="Design prompts per generation [24].")
    group_size: int = Field(
        1, gt=0, description="Designs per prompt [1]; more than 1 is beyond the paper (each design is scored alone)."
    )
    difficulty: Literal["easy", "medium", "hard"] = Field("medium", description="Target difficulty.")
    memory_positive: int = Field(2, ge=0, description="Positive memory examples in the prompt [2].")
    memory_negative: int = Field(1, ge=0, description="Negative memory examples in the prompt [1].")
    mode: Literal["write", "mutate", "parameters"] = Field(
        "write",
        description="write: each design is written anew from the document and memory examples [the paper]; "
        "mutate: the designer rewrites one parent environment whole (in-band from the previous generation's "
        "memory, else the library) into a variant grounded in the document; parameters: the designer writes "
        "new values for a parent's parameters (its module-level literal constants) and the variant is the "
        "parent with them (POET's parameter mutation; spade_core/designer/parameters.py). The design row names its "
        "parent.",
    )
    multiturn: bool = Field(
        False,
        description="Tool use: design multi-turn instruction environments (spade_env.InstructionEnv: a script of "
        "3-5 user instructions, each with a criterion on the state, answered with 'done'; the multi-turn seeds of "
        "data/seed_envs/multiturn/ as the prompt's example) [off; on in paper-tool-use, as the authors' "
        "SPADE_MULTITURN_ENV_GEN].",
    )
    parents: str | None = Field(
        None,
        description="mutate/parameters: a folder of data/seed_envs (a name), or an absolute path to a folder, whose "
        "environments are the library parents of every mutation, each the parent of every skill of its kind "
        "(e.g. 'difficulty', the designer test bed's family); None = the starters, then the seed library. The "
        "memory's parents still come first.",
    )
    parent_max_similarity: float = Field(
        0.9,
        gt=0,
        le=1,
        description="mutate: a design whose lines match its parent's more than this (difflib ratio) is refused "
        "as not_novel: a copy of the parent earns nothing; parameters: the same for the share of the parent's "
        "parameters left unchanged [0.9].",
    )
    max_parameter_items: int = Field(
        1000,
        ge=1,
        le=100_000,
        description="parameters: items one container of a reply's value may hold; a larger value (or an integer "
        "of more than 1024 bits, or containers nested more than 8 deep) is refused as parameters_too_large "
        "before it is built.",
    )
    repair_rounds: int = Field(0, ge=0, description="Rounds that feed validation errors back.")
    max_attempts: int = Field(
        5,
        ge=1,
        description="Attempts per design prompt [5]: an invalid design is retried with a fresh document until one "
        "is valid or the attempts run out (repair rounds count as attempts). Failed attempts are never trained on.",
    )
    top_up_rounds: int = Field(
        0,
        ge=0,
        description="Rounds that design the environments missing when fewer than documents_per_generation came "
        "out valid: fresh prompts and documents, each with max_attempts [0: the pool is what validate left; "
        "K - 1 in the paper presets, where the authors top the pool up at each later step of it].",
    )
    top_up_at: Literal["pool", "steps"] = Field(
        "pool",
        description="When the top_up_rounds rounds run. 'pool': before the pool is formed (stage topup); the "
        "topped-up designs are played, hinted and rewarded like any. 'steps': round r at step r of the pool "
        "(stage refill-s{r}, r = 1 .. min(top_up_rounds, K - 1)) with that step's checkpoint, as the authors "
        "(orchestrator.py:2299-2301): the pool grows for that step and the later ones, the new designs get no "
        "hint and no hinted play, so their designer reward is 0 (env_rewards.py:197-205), and they are trained "
        "D steps after the step that designed them [pool; steps in the paper presets].",
    )
    user_prompt: Literal["ours", "authors"] = Field(
        "ours",
        description="The layout of a design's user prompt (designer.mode write): 'ours' = document, spec, the "
        "contract with its example module, robustness rules, target, memory examples, reply format last; "
        "'authors' = their layout (corpus_template.py:101-127, tool_use_template.py:104-340, orchestrator.py:"
        "1204-1228), in our words: the document in <REFERENCE_DOCUMENT>, the spec with an interface skeleton, "
        "the skill with its description, 'Generate the complete Python code in a ```python block.', then the "
        "positives in <REFERENCE_ENVIRONMENTS> and the negatives under 'Avoid generating environments like:' "
        "[ours; authors in the paper presets].",
    )
    attempt_deadline_s: float | None = Field(
        None,
        gt=0,
        description="Seconds one design attempt's model reply may take; a reply not back by then fails the "
        "attempt (validations.error_type 'deadline'), retried like any failed attempt [None: no deadline; 300 in "
        "the paper presets, as the authors' corpus_orchestrator.py:118-130].",
    )
    batch_deadline_s: float | None = Field(
        None,
        gt=0,
        description="Seconds one batch of design prompts may take, replies, validation and retries included (the "
        "design stage's and each validate shard's time; each top-up round is a batch of its own); a shard that "
        "runs past it fails every design of its own (error_type 'deadline'), as the authors lose the whole "
        "batch [None: no deadline; 900 in the paper presets, orchestrator.py:1459-1475].",
    )
    training_delay: int | None = Field(
        None,
        ge=1,
        description="D: a generation's designs are trained D global steps after its first step, first in that "
        "step's batch [D = K]. Must be >= K, so the reward window is complete. None = K.",
    )
    max_new_tokens: int = Field(2048, gt=0, le=TOKEN_LIMIT, description="Tokens per design.")
    system_prompt: Literal["ours", "authors"] = Field(
        "ours",
        description="The designer's system prompt: 'ours' for both kinds; 'authors' = their multi-turn game "
        "designer's for games (prompts/template.py:324-329) and none for tool use (orchestrator.py:270-272) "
        "[ours; authors in the paper presets]. The user prompt is ours either way.",
    )
    train: bool = Field(True, description="False = the 'no designer training' ablation.")
    fixed_pool: str | None = Field(
        None,
        pattern=r"^(seeds|starters|run:[A-Za-z0-9][A-Za-z0-9_.\-]*|rlve:[A-Za-z0-9_]+(,[A-Za-z0-9_]+)*|export:\S(.*\S)?)$",
        description="Fixed-environment baseline: no designer; the agent plays 'seeds' (the seed library), "
        "'starters' (the starter environments), 'run:RUN_ID' (the valid environments stored by that run), "
        "'export:DIR' (an export of `spade envs export`, local or s3://) or "
        "'rlve:official16' / 'rlve:all' / 'rlve:NAME,...' (RLVE's environments under its difficulty controller). "
        "None = SPADE.",
    )
    rlve_tau_acc: float = Field(
        0.9,
        gt=0,
        le=1,
        description="RLVE pools: the accuracy at the window's top difficulty that promotes it [0.9, the authors' "
        "sliding_window].",
    )
    rlve_tau_num: int = Field(
        128, ge=1, description="RLVE pools: plays at the top difficulty before the accuracy is judged [128]."
    )
    rlve_d_delta: int = Field(4, ge=1, description="RLVE pools: difficulty levels the window spans [4].")
    rlve_controller: Literal["spade", "rlve"] = Field(
        "spade",
        description="RLVE pools: whose difficulty controller. 'spade' = the SPADE authors' copy, which their "
        "baseline runs (difficulty_controller.py:138-159): a check after each play once rlve_tau_num plays at the "
        "top difficulty are counted, the difficulty capped at 20; 'rlve' = RLVE's own "
        "(slime/ray/rollout_data_source.py:35-56, 101-133 in RLVE's repository): every play of a generation counted "
        "first, then one check per generation, no cap [spade].",
    )

    @field_validator("parents")
    @classmethod
    def _parents_folder(cls, folder: str | None) -> str | None:
        if folder is not None and not any(parents_dir(folder).glob("*__*.py")):
            where = folder if Path(folder).is_absolute() else f"data/seed_envs/{folder}"
            raise ValueError(f"no seed environment (skill__name.py) in {where}")
        return folder


CodeRepair = Literal["fstring_braces", "stdlib_imports"]  # the registry of spade_core/designer/repairs.py


def _default_code_repairs() -> list[CodeRepair]:
    return ["fstring_braces", "stdlib_imports"]


# The names of the validator's 'full' checks, in the order they run (spade_core/envs/validate.py defines the
# checks and refuses to import if its list differs from this one).
VALIDATION_CHECKS: tuple[str, ...] = (
    "parses",
    "one_env_class",
    "reset_types",
    "step_accepts_any_string",
    "deterministic_reset",
    "ends_within_max_turns",
    "solution_reaches_goal",
    "not_trivial",
)


class ValidationConfig(_Section):
    max_turns: int = Field(25, gt=0, description="Turn budget an environment must end within [25].")
    garbage_actions: int = Field(8, ge=1, description="Arbitrary strings fed to step().")
    random_plays: int = Field(3, ge=0, description="Random-action plays that must not win.")
    call_timeout_s: float = Field(5.0, gt=0, description="Timeout of one reset/step call in the jail.")
    jail_time_limit_s: int = Field(120, gt=0, description="Wall-clock limit of one jail.")
    memory_mb: int = Field(512, ge=64, description="Address-space / cgroup memory limit per jail.")
    max_pids: int = Field(16, ge=1, description="Processes per jail (cgroup pids or RLIMIT_NPROC).")
    max_message_kb: int = Field(64, ge=1, description="Cap of one protocol message from the jail.")
    parallel_jails: int = Field(2, ge=1, description="Jails running at once in a pool.")
    contract: Literal["ours", "authors"] = Field(
        "ours",
        description="What the jail's loader holds every environment to, at validation and at play: 'ours' = a "
        "solution() method, reset returns (observation, info), terminated / truncated bools or 0/1, a reward "
        "that is no bool; 'authors' = their smoke test's types (synthetic_game_env.py:262-335): no solution() "
        "needed, reset may return the observation alone, terminated / truncated real bools, any int or float "
        "reward. Both refuse a reward that is not finite or beyond +-10; at play 'authors' instead converts each "
        "step's result as their game wrapper does (str / float / bool, synthetic_game_env.py:404-414), strict "
        "types being their load-time smoke test's only [ours; authors in the paper presets].",
    )
    mode: Literal["full", "smoke"] = Field(
        "full",
        description="'full' = the 8 jailed checks; 'smoke' = the authors' smoke test (load, reset(seed=42), 3 "
        "boxed test actions, rewards in [-10, 10], reset(seed=123)), still in the jail.",
    )
    reset_gate: bool = Field(
        False,
        description="The authors' reset gate (SPADE_RESET_GATE): after the checks, reset seeds 0, 1, 2 and evaluate "
        "each instruction criterion there; a criterion that raises at every seed rejects the design "
        "(contract_error). From the second generation on, as theirs [off; on in paper-tool-use].",
    )
    llm_validator: bool = Field(
        False,
        description="The authors' LLM validator (--spade-use-env-validator): the training model judges each tool-use "
        "design that passed the checks for solvability; a \\boxed{no} rejects it (unsolvable). Verdict and "
        "reasoning are stored in validations.llm_verdict / llm_reason [off; on in paper-tool-use].",
    )
    llm_validator_temperature: float = Field(
        0.3, ge=0.0, le=2.0, description="Sampling temperature of the LLM validator [0.3, as the authors]."
    )
    llm_validator_max_new_tokens: int = Field(
        16384, gt=0, le=TOKEN_LIMIT, description="Token budget of one LLM-validator judgement [16384, as the authors]."
    )
    llm_validator_top_p: float | None = Field(
        None, gt=0.0, le=1.0, description="Nucleus sampling of the LLM validator [None = model.top_p; 0.9 as theirs]."
    )
    llm_validator_top_k: int | None = Field(
        None, ge=0, description="Top-k of the LLM validator [None = model.top_k; 0 = none, as theirs]."
    )
    llm_validator_deadline_s: float | None = Field(
        None,
        gt=0,
        description="Seconds one LLM-validator judgement may take; a judgement not back by then rejects the "
        "design (error_type 'deadline', retried like any failed attempt) [None: no deadline; 120 in the paper "
        "presets, as the authors' corpus_orchestrator.py:166-169].",
    )
    disabled_checks: list[str] = Field(
        default_factory=list, description="Checks of 'full' mode to skip, by name (VALIDATION_CHECKS)."
    )
    code_repairs: list[CodeRepair] = Field(
        default_factory=_default_code_repairs,
        description="Repairs applied to a design's code before validation, as the authors' "
        "(spade_core/designer/repairs.py): 'fstring_braces' escapes f-string braces that hold no expression, "
        "'stdlib_imports' imports the standard-library names a design uses without importing. Each design "
        "row records the repairs applied to it. [] = validate the code as the model wrote it.",
    )

    @field_validator("disabled_checks")
    @classmethod
    def _known_checks(cls, names: list[str]) -> list[str]:
        unknown = [n for n in names if n not in VALIDATION_CHECKS]
        if unknown:
            raise ValueError(f"unknown check(s) {unknown}; checks: {', '.join(VALIDATION_CHECKS)}")
        return names


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


class TrainingConfig(_Section):
    enabled: bool = Field(True, description="Run the GRPO update at every step.")
    steps_per_generation: int = Field(
        4,
        ge=1,
        description="K: on-policy steps per environment pool; each plays the pool afresh and makes one optimizer "
        "step [4 games, 8 tool use].",
    )
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = Field("dapo", description="TRL loss type.")
    epsilon: float = Field(0.2, gt=0, description="Lower clip range [0.2].")
    epsilon_high: float = Field(0.28, gt=0, description="Upper clip range [0.28].")
    beta: float = Field(
        0.0,
        ge=0,
        description="KL coefficient against the base model (checkpoint 0, model.name_or_path), Slime's low_var_kl: "
        "k3 clamped to ±10 per token (0 = no reference model is loaded) [0 games, 0.005 tool use].",
    )
    learning_rate: float = Field(1e-6, gt=0, le=1, description="AdamW learning rate [1e-6].")
    lr_schedule: Literal["constant", "constant_with_warmup"] = Field(
        "constant", description="Learning-rate schedule over the run's global steps [constant]."
    )
    warmup_steps: int = Field(0, ge=0, description="Warmup steps (lr_schedule=constant_with_warmup).")
    weight_decay: float = Field(0.1, ge=0, description="AdamW weight decay [0.1].")
    adam_beta1: float = Field(0.9, gt=0, lt=1, description="AdamW beta1 [0.9].")
    adam_beta2: float = Field(0.98, gt=0, lt=1, description="AdamW beta2 [0.98].")
    tis_low: float = Field(0.0, ge=0, description="Truncated importance sampling: lower clamp of the weight [0].")
    tis_high: float = Field(2.0, gt=0, description="Truncated importance sampling: upper clamp of the weight [2.0].")
    logprob_temperature: float = Field(
        1.0,
        gt=0.0,
        le=2.0,
        description="Temperature of the trainer's log-probs (the loss and the TIS numerator) [1.0; the authors' "
        "--rollout-temperature 1.0, Slime loss.py:78-79].",
    )
    behaviour_logprob_temperature: float = Field(
        1.0,
        gt=0.0,
        le=2.0,
        description="Temperature the behaviour log-probs of TIS are taken at [1.0 = the raw distribution both "
        "backends return, so on-policy weights are ~1; 0.6 in the paper presets: the authors' SGLang returns "
        "log-probs at the sampling temperature, so every token is weighted clamp(p_T1 / p_T0.6, 0, 2)].",
    )
    global_batch_size: int | None = Field(
        None,
        ge=1,
        description="Samples per optimizer step, as the authors' --global-batch-size [None = every sample of the "
        "step; 192 in the paper presets]: the designer's samples first, then the agent's, trimmed to this many (a "
        "short batch is padded with inert copies, which count in the loss's mean only when beta > 0, as in "
        "Slime); every environment is played ceil(G / pool size) times per step instead of rollout.plays_no_hint.",
    )
    batch_fill: Literal["pad", "duplicate", "random"] = Field(
        "pad",
        description="How a step with too few samples for global_batch_size is filled: 'pad' = inert rows only; "
        "'duplicate' = the agent's real plays are first repeated in turn up to G minus the step's new designs "
        "(at a generation's first step), after every real play and so cut first, then inert rows, as the "
        "authors' orchestrator.py:2607-2620; 'random' = the agent's real plays copied, each copy drawn at random "
        "with replacement, up to G, as their fixed-environment baseline (fixed_env_rollout.py:448-462) [pad; "
        "duplicate in paper-games and paper-tool-use, random in paper-fixed-rlve].",
    )
    total_steps: int | None = Field(
        None,
        ge=1,
        description="The run's length in global steps (the authors' --num-rollout): designs whose train step lies "
        "beyond the last step of the generation that holds step total_steps - 1 (the last generations' designs, "
        "late top-ups) are trained at that step, as the authors flush their buffer at the final rollout "
        "(spade_rollout.py:557-561) [None: such designs are never trained; 400 in the paper presets].",
    )
    delayed_designs: Literal["ours", "authors"] = Field(
        "ours",
        description="When the delayed designs are trained: 'ours' = every kept design at its due step (first "
        "step + D, a top-up's step + D, or the flush at total_steps); 'authors' = only at a step that made "
        "designs of its own (a generation's first step, or a step whose top-up added one), as the authors' loop "
        "fetches them, and runs its final flush, only then (spade_rollout.py:548-563): in their 400-step runs the "
        "last generation's designs are never trained, a top-up's only when step r + D also tops up [ours; "
        "authors in the paper presets].",
    )
    per_device_batch_size: int = Field(4, ge=1, description="Samples per device per micro-batch.")
    designer_fraction: float = Field(
        0.5, ge=0, le=1, description="Cap on the designer's share of the batch (0 = agent only, 1 = designer only)."
    )
    roles: Literal["both", "designer"] = Field(
        "both",
        description="Which role's samples are trained: 'both', or 'designer' alone with the agent frozen: every "
        "stage but the design stages (plays, hints, validator judgements, evals) keeps the base weights "
        "(checkpoint 0), since one model's weights serve both roles and the designer's updates move them.",
    )
    lora: bool = Field(False, description="Train a LoRA adapter instead of all weights.")
    lora_r: int = Field(8, ge=1, description="LoRA rank.")
    accelerate_config: str | None = Field(None, description="File under data/accelerate/ (None = single process).")
    gradient_checkpointing: bool = Field(False, description="Trade compute for memory (GPU presets).")
    bf16: bool = Field(False, description="bf16 mixed precision (GPU presets).")
    drop_zero_advantage: bool = Field(
        False,
        description="Leave samples whose advantage is 0 out of the update (needs beta 0: they then carry no "
        "gradient, only compute) [off: the authors keep them].",
    )
    step_on_zero_signal: bool = Field(
        False,
        description="A step whose every group has zero reward variance still runs the optimizer (AdamW's weight "
        "decay and momentum move the weights) [off: the checkpoint is kept unchanged; on in the paper presets, "
        "as the authors].",
    )

    @model_validator(mode="after")
    def _tis_bounds(self) -> TrainingConfig:
        if self.tis_low > self.tis_high:
            raise ValueError(f"training.tis_low {self.tis_low} must be <= training.tis_high {self.tis_high}")
        if self.batch_fill != "pad" and self.global_batch_size is None:
            raise ValueError(
                f"training.batch_fill {self.batch_fill} needs training.global_batch_size: the size to fill"
            )
        if self.drop_zero_advantage and self.beta > 0:
            raise ValueError(
                f"training.drop_zero_advantage needs training.beta 0, got {self.beta}: with a KL term a sample "
                "whose advantage is 0 still has a gradient"
            )
        return self


SuiteName = Literal[
    "reasoning_gym", "reasoning_gym_hard", "humaneval", "bfcl", "bfcl_multi_turn", "bfcl_full", "tau2"
]  # the registry of spade_core/eval/


def _default_suites() -> list[SuiteName]:
    return ["reasoning_gym"]


class EvaluationConfig(_Section):
    every: int = Field(0, ge=0, description="Evaluate every k generations (0 = never).")
    suites: list[SuiteName] = Field(default_factory=_default_suites, description="Suites to run (spade_core/eval/).")
    limit: int = Field(50, ge=1, description="Items per suite.")
    suite_limits: dict[SuiteName, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict,
        description="Items per suite for the suites named, in place of limit (bfcl_full: 4441 = every entry "
        "once, the paper's count).",
    )
    seed: int = Field(1234, ge=0, le=SEED_LIMIT, description="Held-out item selection seed.")
    max_new_tokens: int | None = Field(
        None,
        gt=0,
        le=TOKEN_LIMIT,
        description="Tokens per eval reply (None = each suite's default: 512, 512, 256 for bfcl).",
    )


class OrchestrationConfig(_Section):
    task_runner: Literal["threads", "processes", "dask"] = Field("threads", description="Prefect task runner.")
    dask_address: str | None = Field(None, description="Dask scheduler address (None = local cluster).")
    shard_size: int = Field(16, ge=1, description="Items per mapped task shard.")
    retries: int = Field(2, ge=0, description="Retries of I/O and model tasks.")
    retry_delay_s: float = Field(
        5.0, gt=0, description="Delay before the first retry of an I/O or model task; doubles on each retry."
    )
    async_generations: bool = Field(
        True,
        description="spade-run starts generation g+1's design chain (documents..hint) once generation g's memory "
        "is written, on the newest checkpoint at that moment, while g trains its steps.",
    )
    max_staleness: int = Field(
        0,
        ge=0,
        le=1,
        description="1: step k's plays may use checkpoint k-1 and overlap step k-1's update (off-policy by one "
        "step, corrected by TIS); 0: every play is on-policy.",
    )
    generation_devices: list[int] | None = Field(
        None, description="CUDA devices of the generation server (None = all visible; shared with training)."
    )
    training_devices: list[int] | None = Field(
        None, description="CUDA devices of the trainer (None = all visible; shared with generation)."
    )
    engine_replicas: int = Field(
        1,
        ge=1,
        le=64,
        description="backend=vllm: data-parallel engine replicas of the run's engine service; generation_devices "
        "are split evenly among them (on a CPU each replica is bound to its own core). A request goes to the "
        "least-loaded replica, an episode's turns to the one that served its first.",
    )
    engine_address: str | None = Field(
        None,
        description="backend=vllm: host:port the run's engine service listens on, for workers on other machines "
        "(its API key from $SPADE_ENGINE_KEY, set alike on the run's machine and the workers); None = loopback "
        "on a free port, found by the run's local worker processes.",
    )
    generator_during_update: Literal["auto", "kept", "released"] = Field(
        "auto",
        description="What the generator does while the trainer (or the evaluator) runs: 'released' = closed, "
        "and loaded again on the new checkpoint after (the two take turns for the memory they share), 'kept' = "
        "it stays (a vLLM server then takes the new weights in place), 'auto' = released on a GPU that "
        "generation and training share, else kept.",
    )

    @model_validator(mode="after")
    def _devices_split_or_shared(self) -> OrchestrationConfig:
        gen, train = self.generation_devices, self.training_devices
        if gen is not None and train is not None and set(gen) & set(train) and set(gen) != set(train):
            raise ValueError(
                f"orchestration.generation_devices {gen} and training_devices {train} must be disjoint (separate "
                "devices) or equal (shared: they take turns)"
            )
        for key, devices in (("generation_devices", gen), ("training_devices", train)):
            if devices is not None and (not devices or len(set(devices)) != len(devices) or min(devices) < 0):
                raise ValueError(f"orchestration.{key} {devices} must list distinct device indices >= 0")
        return self

    def devices_shared(self) -> bool:
        """Whether generation and training use the same devices (then a model is released before training)."""
        gen, train = self.generation_devices, self.training_devices
        return gen is None or train is None or set(gen) == set(train)

    def takes_turns(self, device: str) -> bool:
        """Whether the generator is released while the trainer runs (``generator_during_update``; auto: on a
        GPU (``device``) that generation and training share).

        >>> OrchestrationConfig().takes_turns("cpu"), OrchestrationConfig().takes_turns("cuda")
        (False, True)
        >>> OrchestrationConfig(generator_during_update="released").takes_turns("cpu")
        True
        >>> OrchestrationConfig(generation_devices=[0], training_devices=[1]).takes_turns("cuda")
        False
        """
        if self.generator_during_update != "auto":
            return self.generator_during_update == "released"
        return device != "cpu" and self.devices_shared()


class SpadeConfig(_Section):
    """The resolved configuration of one SPADE run."""

    seed: int = Field(0, ge=0, le=SEED_LIMIT, description="Global seed: document sampling, skills, rollout seeds.")
    store: StoreConfig = Field(default_factory=StoreConfig)
    corpus: CorpusConfig = Field(default_factory=CorpusConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    designer: DesignerConfig = Field(default_factory=DesignerConfig)
    validation: ValidationConfig = Field(default_factory=ValidationConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    scoring: ScoringConfig = Field(default_factory=ScoringConfig)
    memory: MemoryConfig = Field(default_factory=MemoryConfig)
    training: TrainingConfig = Field(default_factory=TrainingConfig)
    evaluation: EvaluationConfig = Field(default_factory=EvaluationConfig)
    orchestration: OrchestrationConfig = Field(default_factory=OrchestrationConfig)

    @model_validator(mode="after")
    def _delay_covers_the_window(self) -> SpadeConfig:
        delay, k = self.designer.training_delay, self.training.steps_per_generation
        if delay is not None and delay < k:
            raise ValueError(
                f"designer.training_delay {delay} must be >= training.steps_per_generation {k}: a design's "
                "reward is measured over its generation's whole window of K steps"
            )
        return self

    @model_validator(mode="after")
    def _copies_have_parents(self) -> SpadeConfig:
        if self.scoring.parent_copy_raw is not None and self.designer.mode not in ("mutate", "parameters"):
            raise ValueError(
                f"scoring.parent_copy_raw {self.scoring.parent_copy_raw} needs designer.mode mutate or parameters "
                f"(got {self.designer.mode!r}): only a mutation has a parent to copy"
            )
        return self

    @model_validator(mode="after")
    def _replicas_fit_the_devices(self) -> SpadeConfig:
        devices, replicas = self.orchestration.generation_devices, self.orchestration.engine_replicas
        tp = self.model.tensor_parallel_size
        if devices is not None and (len(devices) % replicas or len(devices) // replicas < tp):
            raise ValueError(
                f"orchestration.generation_devices {devices} cannot be split into engine_replicas {replicas} of "
                f"model.tensor_parallel_size {tp} GPUs each: list replicas x tensor_parallel_size devices"
            )
        address = self.orchestration.engine_address
        if address is not None and (":" not in address or not address.rsplit(":", 1)[1].isdigit()):
            raise ValueError(f"orchestration.engine_address {address!r} must be host:port (e.g. 10.0.0.5:8765)")
        return self

    def config_hash(self) -> str:
        """Stable 16-hex hash of the resolved config (key order and formatting independent)."""
        blob = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return short_hash(blob)

    def to_yaml(self) -> str:
        return yaml.safe_dump(self.model_dump(mode="json"), sort_keys=False)


def available_presets() -> list[str]:
    return sorted(p.stem for p in PRESET_DIR.glob("*.yaml"))


class _NoAliasLoader(yaml.SafeLoader):
    """YAML's safe loader without aliases: a config never needs ``*name``, and nested aliases expand a few
    bytes into gigabytes (the "billion laughs")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.YAMLError(
                f"alias *{event.anchor} at line {event.start_mark.line + 1}: aliases are not allowed in a config"
            )
        return super().compose_node(parent, index)


def _yaml_load(text: str) -> Any:
    return yaml.load(text, Loader=_NoAliasLoader)  # a SafeLoader, with aliases refused


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start})"
        ) from None
    return _parse_yaml(text, f"config file {path}")


def _parse_yaml(text: str, label: str) -> dict[str, Any]:
    """The mapping in YAML ``text``; errors start with ``label`` (e.g. ``config file x.yaml``).

    >>> _parse_yaml("a: &x [1]\\nb: *x", "c.yaml")
    Traceback (most recent call last):
    ...
    spade_core.config.ConfigError: c.yaml is not valid YAML: alias *x at line 2: aliases are not allowed in a config
    """
    try:
        data = _yaml_load(text) or {}
    except (yaml.YAMLError, ValueError) as exc:  # ValueError: an integer of more than 4300 digits
        raise ConfigError(f"{label} is not valid YAML: {exc}".splitlines()[0]) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{label} must hold a mapping, got {type(data).__name__}")
    return data


def _parse_override(item: str) -> tuple[list[str], Any]:
    if "=" not in item:
        raise ConfigError(f"override {item!r} must look like key.path=value")
    key, raw = item.split("=", 1)
    parts = [p for p in key.strip().split(".") if p]
    if not parts:
        raise ConfigError(f"override {item!r} has an empty key")
    # YAML scalars: 8 -> int, true -> bool, [a, b] -> list, null -> None, anything else -> str.
    try:
        value = _yaml_load(raw) if raw.strip() else ""
    except (yaml.YAMLError, ValueError):  # ValueError: an integer of more than 4300 digits
        value = raw
    return parts, value


def _apply_override(data: dict[str, Any], parts: list[str], value: Any) -> None:
    node: Any = data
    model: type[BaseModel] | None = SpadeConfig
    for depth, part in enumerate(parts):
        fields = model.model_fields if model else {}
        if model is not None and part not in fields:
            where = ".".join(parts[:depth]) or "top level"
            raise ConfigError(
                f"unknown config key {'.'.join(parts[: depth + 1])!r}; allowed at {where}: {', '.join(sorted(fields))}"
            )
        if depth == len(parts) - 1:
            node[part] = value
            return
        annotation = fields[part].annotation if model else None
        model = annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None
        if model is None:
            raise ConfigError(f"config key {'.'.join(parts[: depth + 1])!r} is a value, not a section")
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            raise ConfigError(f"config key {'.'.join(parts[: depth + 1])!r} must be a mapping")


def _format_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    if not err["loc"] or isinstance(err.get("input"), dict):  # a check across keys: its message names them
        return str(err["msg"]).removeprefix("Value error, ")
    key = ".".join(str(p) for p in err["loc"])
    value = _shown(err.get("input"))
    if err["type"] == "extra_forbidden":
        return f"unknown config key {key!r}"
    if err["type"] == "literal_error":
        allowed = err.get("ctx", {}).get("expected", "")
        return f"config key {key!r} has bad value {value}; allowed: {allowed}"
    return f"config key {key!r} has bad value {value}: {err['msg']}"


def _shown(value: Any, limit: int = 80) -> str:
    """A value's repr for a one-line message, cut to ``limit`` characters.

    >>> _shown("x" * 200)
    "'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx… (202 characters)"
    """
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


def load_config(
    preset: str | None = "tiny",
    config_file: str | Path | None = None,
    overrides: list[str] | tuple[str, ...] = (),
) -> SpadeConfig:
    """Resolve a config: preset YAML, then a config file on top, then ``key=value`` overrides.

    Raises:
        ConfigError: one line naming the bad preset, file, key or value.
    """
    data: dict[str, Any] = {}
    if preset:
        path = PRESET_DIR / f"{preset}.yaml"
        if not path.is_file():
            raise ConfigError(f"unknown preset {preset!r}; available: {', '.join(available_presets())}")
        data = _read_yaml(path)
    if config_file is not None:
        path = Path(config_file)
        if not path.is_file():
            raise ConfigError(f"config file {str(config_file)!r} does not exist")
        data = _deep_merge(data, _read_yaml(path))
    return _resolve(data, overrides)


# Keys a stored run config may still hold that no longer mean anything; reading a stored config drops them
# (a config file a user writes with one is refused like any unknown key). ``scoring.invalid_reward``: an
# invalid design gets no designer_rewards row and no designer sample, whatever the value.
RETIRED_KEYS: tuple[tuple[str, str], ...] = (("scoring", "invalid_reward"),)


def load_config_text(
    text: str, overrides: list[str] | tuple[str, ...] = (), *, label: str = "config text"
) -> SpadeConfig:
    """Resolve a config from YAML text (a run's stored ``config.yaml``), then ``key=value`` overrides.

    The text is the whole config (no preset underneath), as ``load_config(None, file, overrides)`` reads a
    file with that text.

    Args:
        text: The YAML text.
        overrides: ``key.path=value`` items applied on top.
        label: What the text is, for error messages (e.g. ``"config file s3://b/runs/demo/config.yaml"``).

    Raises:
        ConfigError: one line naming the bad YAML, key or value.

    >>> cfg = load_config_text("{seed: 3, rollout: {max_turns: 4}}", ["seed=5"])
    >>> cfg.seed, cfg.rollout.max_turns
    (5, 4)
    >>> load_config_text("- a list", label="config file runs/r/config.yaml")
    Traceback (most recent call last):
    ...
    spade_core.config.ConfigError: config file runs/r/config.yaml must hold a mapping, got list
    """
    data = _parse_yaml(text, label)
    for section, key in RETIRED_KEYS:  # a run stored before the key was retired still loads
        if isinstance(data.get(section), dict):
            data[section].pop(key, None)
    return _resolve(data, overrides)


def _resolve(data: dict[str, Any], overrides: list[str] | tuple[str, ...]) -> SpadeConfig:
    for item in overrides:
        parts, value = _parse_override(item)
        _apply_override(data, parts, value)
    try:
        return SpadeConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(exc)) from None


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out
