"""The ``training`` section (the GRPO update) and the ``evaluation`` section (the held-out suites)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from spade_core.config.base import SEED_LIMIT, TOKEN_LIMIT, _Section


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
