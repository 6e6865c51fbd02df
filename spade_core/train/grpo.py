"""SPADE's seams into TRL's ``GRPOTrainer`` (docs/DESIGN.md §7.2): stored samples in, one optimizer step out.

- ``rollout_func`` (:class:`StoredRollouts`) hands out the *stored* samples of the step: prompt ids,
  completion ids, ``env_mask`` (1 on the model's own tokens, so multi-turn episodes train only on what the
  agent wrote), the behaviour log-probs, and the advantage SPADE computed.
- :func:`spade_trainer_class` binds the settings of the one minimal subclass,
  :class:`spade_core.train.trainer.SpadeGRPOTrainer`, whose docstring says what TRL forces and what each
  override does: it replaces TRL's advantages with the stored ones and multiplies each token's advantage
  by its truncated importance weight ``clamp(exp(logp_train - logp_behaviour), low, high)``. Tokens
  without a behaviour log-prob keep weight 1. Which temperature each side's log-probs are taken at is a setting
  (:func:`~spade_core.train.token_logps.behaviour_at_temperature`): the trainer's at
  ``training.logprob_temperature`` (also the loss's;
  the authors' ``--rollout-temperature 1.0``), the behaviour's at ``training.behaviour_logprob_temperature``
  (1 = the raw log-probs both backends store; the authors' SGLang returns them at the sampling
  temperature 0.6, so their every token is weighted clamp(p_T1 / p_T0.6, 0, 2)). The weights' spread over
  the trained tokens is logged (``tis/weight_*``). It also scales the loss by :func:`sample_mean_scale`, so that a
  per-sample loss averages over the step's samples and not over the padding rows that fill the last
  micro-batch.
- With ``training.beta`` > 0 the subclass adds the KL term itself, against the *base model* (checkpoint 0,
  as the authors' ``--ref-load``), with Slime's ``low_var_kl`` clamp
  (:func:`~spade_core.train.token_logps.low_var_kl`). TRL's own term
  would take the step's starting checkpoint as its reference (the policy before this one update, so the
  term is ~0) and cannot clamp; so TRL runs with ``beta=0`` and loads no reference of its own.
- :class:`OptimizerState` loads the run's one AdamW state (and its scheduler) when training begins, so the
  optimizer carries from step to step across processes (docs/DESIGN.md §7: one optimizer for the run).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from spade_core.train.data import AGENT, DESIGNER, Batch, Sample

MICRO_GROUP = 2  # TRL's num_generations: rows handed out per dataset row (advantages are SPADE's own)


class StoredRollouts:
    """TRL ``rollout_func``: hands out the stored samples instead of generating.

    The dataset has one row per pair of samples; TRL repeats each row ``num_generations`` (2) times
    consecutively and the i-th repeat gets the pair's i-th sample. The batch is padded to ``total`` samples
    with copies whose ``env_mask`` is all zero (no loss, no gradient), so one optimizer step covers it.
    """

    def __init__(self, batch: Batch, total: int) -> None:
        samples = batch.samples()
        pad = [_padding(samples[i % len(samples)]) for i in range(total - len(samples))] if samples else []
        rows = samples + pad
        self.padded = len(pad)
        self.pairs = {f"b{i}": rows[i : i + MICRO_GROUP] for i in range(0, len(rows), MICRO_GROUP)}
        self.handed_out = 0

    def dataset(self) -> Any:
        from datasets import Dataset

        # The pair id rides on the prompt message: TRL shuffles the rows and passes the prompts through.
        return Dataset.from_list([{"prompt": [{"role": "user", "content": k, "block": k}]} for k in self.pairs])

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        seen: dict[str, int] = {}
        keys = ("prompt_ids", "completion_ids", "env_mask", "reward", "advantage", "role", "logprobs")
        out: dict[str, list[Any]] = {k: [] for k in keys}
        for prompt in prompts:
            key = prompt[0]["block"]
            sample = self.pairs[key][seen.get(key, 0) % len(self.pairs[key])]
            seen[key] = seen.get(key, 0) + 1
            out["prompt_ids"].append(sample.prompt_ids)
            out["completion_ids"].append(sample.completion_ids)
            out["env_mask"].append(sample.env_mask)
            out["reward"].append(sample.reward)
            out["advantage"].append(sample.advantage)
            out["role"].append(sample.role)
            out["logprobs"].append(sample.logprobs or [math.nan] * len(sample.completion_ids))
        self.handed_out += len(prompts)
        if all(all(math.isnan(x) for x in lp) for lp in out["logprobs"]):
            return {**out, "logprobs": None}  # type: ignore[dict-item]
        return out


def _padding(sample: Sample) -> Sample:

    return replace(sample, env_mask=[0] * len(sample.completion_ids), advantage=0.0, source_id="")


def stored_reward(completions: list[Any], reward: list[float], role: list[str], **kwargs: Any) -> list[float | None]:
    """The stored reward of each sample (TRL logs it; the advantage is SPADE's); per-role reward stats.

    >>> stored_reward(["a", "b"], reward=[0.0, 1.0], role=["agent", "agent"])
    [0.0, 1.0]
    """
    log_metric = kwargs.get("log_metric")
    if log_metric is not None:
        for name in (AGENT, DESIGNER):
            values = [r for r, ro in zip(reward, role, strict=True) if ro == name]
            if values:
                mean = sum(values) / len(values)
                log_metric(f"{name}/reward_mean", mean)
                log_metric(f"{name}/reward_std", math.sqrt(sum((v - mean) ** 2 for v in values) / len(values)))
    return [float(r) for r in reward]


# TRL loss types that average over rows (padding rows included), not over the tokens of the batch.
PER_ROW_LOSSES = frozenset({"grpo", "dr_grpo"})


def sample_mean_scale(loss_type: str, rows: int, samples: int) -> float:
    """The factor on TRL's loss that makes a per-row loss a mean over the step's ``samples``, not its ``rows``.

    The aggregations (per-token loss ``l_it``, loss mask ``m_it``, N samples, R rows handed to TRL: the
    samples plus zero-mask padding rows that fill the last micro-batch, less the samples
    ``training.drop_zero_advantage`` left out, which carry no loss but count in N)::

        TRL grpo     (1 / R) * sum_i [ sum_t m_it l_it / max(1, sum_t m_it) ]   (row mean per micro-batch,
                                                                                 / gradient accumulation)
        Slime        (1 / N) * sum_i [ sum_t m_it l_it / max(1, sum_t m_it) ]   (the authors' aggregation)
        TRL dapo     sum_i sum_t m_it l_it / sum_i sum_t m_it                   (token mean over the batch)

    Slime's ``get_sum_of_sample_mean`` sums each sample's token mean and ``loss_function`` divides by the
    step's global batch size (``slime/backends/megatron_utils/cp_utils.py``, ``loss.py``); the authors fill
    a short batch with inert zero-mask copies and scale the real samples' rewards by ``192 / n_real``
    (``spade/slime/spade_rollout.py``), so their mean is over the real samples. A real sample whose mask
    is all zero (a truncated tool-use play) still counts in N, as in theirs. ``grpo`` (and ``dr_grpo``,
    whose denominator also counts rows) needs ``R / N``; a token mean (``dapo``, ``bnpo``) ignores padding.

    >>> sample_mean_scale("grpo", rows=8, samples=6)
    1.3333333333333333
    >>> sample_mean_scale("grpo", rows=6, samples=6), sample_mean_scale("dapo", rows=8, samples=6)
    (1.0, 1.0)
    """
    if samples < 1 or rows < 1:
        raise ValueError(f"need rows >= 1 and samples >= 1, got rows={rows}, samples={samples}")
    return rows / samples if loss_type in PER_ROW_LOSSES else 1.0


def spade_trainer_class(
    tis_low: float,
    tis_high: float,
    loss_scale: float = 1.0,
    kl_coef: float = 0.0,
    reference: str | None = None,
    behaviour_temperature: float | None = None,
) -> Any:
    """:class:`spade_core.train.trainer.SpadeGRPOTrainer` bound to these settings: truncated importance
    weights in [``tis_low``, ``tis_high``] with the behaviour log-probs at ``behaviour_temperature`` (None:
    the args' ``behaviour_logprob_temperature``, :func:`grpo_args`), the loss scaled by ``loss_scale``
    (:func:`sample_mean_scale`) and, when ``kl_coef`` > 0, ``kl_coef`` times the
    :func:`~spade_core.train.token_logps.low_var_kl` term against the model at ``reference`` (the base model)."""
    from spade_core.train.trainer import LossSettings, SpadeGRPOTrainer  # torch and TRL load only here

    if kl_coef > 0 and not reference:
        raise ValueError(f"a KL coefficient {kl_coef} needs a reference model path")
    settings = LossSettings(tis_low, tis_high, loss_scale, kl_coef, reference, behaviour_temperature)
    return type(
        "SpadeGRPOTrainer", (SpadeGRPOTrainer,), {"settings": settings, "__module__": SpadeGRPOTrainer.__module__}
    )


class OptimizerState:
    """Loads and saves the run's one optimizer (AdamW) and its scheduler across optimizer steps."""

    FILES = ("optimizer.pt", "scheduler.pt")

    def __init__(self, source: Path | None) -> None:
        self.source = source  # a checkpoint directory holding optimizer.pt / scheduler.pt, or None (fresh)

    def callback(self) -> Any:
        from transformers import TrainerCallback

        carried = self

        class LoadOptimizer(TrainerCallback):  # type: ignore[misc]
            """At train begin (the optimizer exists and is prepared), load the carried state."""

            def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                carried.load(kwargs["optimizer"], kwargs["lr_scheduler"])

        return LoadOptimizer()

    def load(self, optimizer: Any, scheduler: Any) -> None:
        import torch

        if self.source is None:
            return
        optimizer.load_state_dict(torch.load(self.source / "optimizer.pt", map_location="cpu", weights_only=True))
        scheduler.load_state_dict(torch.load(self.source / "scheduler.pt", map_location="cpu", weights_only=True))

    @staticmethod
    def save(trainer: Any, out: Path) -> None:
        import torch

        os.makedirs(out, exist_ok=True)
        torch.save(trainer.optimizer.state_dict(), out / "optimizer.pt")
        torch.save(trainer.lr_scheduler.state_dict(), out / "scheduler.pt")


@functools.cache
def _config_class() -> Any:
    """``SpadeGRPOConfig``: TRL's ``GRPOConfig`` plus ``behaviour_logprob_temperature``, the temperature of
    the stored behaviour log-probs, which the trainer reads for TIS. Built once, on first use (TRL is imported
    lazily), and found by name as this module's attribute (:func:`__getattr__`), so the args the Trainer saves
    with a checkpoint pickle by name and load anywhere."""
    from trl import GRPOConfig

    @dataclasses.dataclass
    class SpadeGRPOConfig(GRPOConfig):  # type: ignore[misc]
        behaviour_logprob_temperature: float = 1.0

    SpadeGRPOConfig.__module__ = __name__
    SpadeGRPOConfig.__qualname__ = "SpadeGRPOConfig"
    return SpadeGRPOConfig


def __getattr__(name: str) -> Any:
    """``SpadeGRPOConfig`` on demand (unpickling a saved ``training_args.bin`` looks it up by name)."""
    if name == "SpadeGRPOConfig":
        return _config_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def trains_on_cpu(cfg: Any) -> bool:
    """Whether the update runs on the CPU: ``model.device`` is ``cpu``, no GPU is present, or the launch's
    accelerate config says ``use_cpu`` (``ACCELERATE_USE_CPU``, :func:`spade_core.train.launch.accelerate_env`).
    Every process of a launch must agree, and build its ``PartialState(cpu=...)`` from this before TRL's
    ``Accelerator(cpu=...)``: a state built without ``cpu=True`` under torchrun is not distributed on a CPU."""
    import torch

    if os.environ.get("ACCELERATE_USE_CPU", "").lower() in ("1", "true", "yes"):
        return True
    return cfg.model.device == "cpu" or not torch.cuda.is_available()


def grpo_args(cfg: Any, batch: Batch, output_dir: str, num_processes: int) -> tuple[Any, int]:
    """``GRPOConfig`` for exactly one optimizer step over the whole batch, and the padded sample count.

    Micro-batches of ``training.per_device_batch_size`` (rounded up to even) per process, with as many
    gradient-accumulation steps as the batch needs. With P processes a batch of N samples is padded with
    zero-mask rows to ``micro * P * accumulation`` rows (:class:`StoredRollouts`): no sample is dropped or
    repeated whatever P is, and :func:`sample_mean_scale` keeps a per-row loss a mean over the N samples.
    AdamW with the run's settings; TRL's own advantage scaling off (``scale_rewards="none"``; the subclass
    replaces its advantages anyway).
    """
    t = cfg.training
    micro = math.ceil(t.per_device_batch_size / MICRO_GROUP) * MICRO_GROUP
    per_step = micro * num_processes
    accumulation = max(1, math.ceil(len(batch.samples()) / per_step))
    on_gpu = not trains_on_cpu(cfg)
    args = _config_class()(
        behaviour_logprob_temperature=t.behaviour_logprob_temperature,
        output_dir=output_dir,
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=accumulation,
        num_generations=MICRO_GROUP,
        max_steps=1,
        learning_rate=t.learning_rate,
        lr_scheduler_type=t.lr_schedule,
        warmup_steps=t.warmup_steps,
        weight_decay=t.weight_decay,
        adam_beta1=t.adam_beta1,
        adam_beta2=t.adam_beta2,
        optim="adamw_torch",
        scale_rewards="none",
        loss_type=t.loss_type,
        epsilon=t.epsilon,
        epsilon_high=t.epsilon_high,
        beta=0.0,  # the KL term against the base model is the subclass's own (spade_trainer_class)
        temperature=t.logprob_temperature,  # the trainer's log-probs (loss, TIS), as Slime's --rollout-temperature
        bf16=bool(on_gpu and t.bf16),
        use_cpu=not on_gpu,
        gradient_checkpointing=bool(t.gradient_checkpointing),
        logging_steps=1,
        save_strategy="no",
        report_to=["tensorboard"],
        seed=cfg.seed,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    return args, per_step * accumulation
