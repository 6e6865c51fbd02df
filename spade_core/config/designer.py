"""The ``designer`` section (how environments are designed) and the ``validation`` section (how a design
is checked: the jail's limits, the checks, the code repairs)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from spade_core.config.base import TOKEN_LIMIT, _Section
from spade_core.resources import parents_dir


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
