"""The one subclass of TRL's ``GRPOTrainer`` (docs/DESIGN.md §7.2), in the trainer subprocess only: this
module imports torch and TRL, so nothing else imports it at module level.

What TRL forces, and what each override does about it, top to bottom:

1. **The batch** (``_generate_and_score_completions``). TRL centres the rewards itself over
   ``num_generations`` consecutive rows and corrects for the sampler only when it drives vLLM itself.
   SPADE's advantages are computed before the step (:mod:`spade_core.method.advantages`) and arrive with
   the stored samples, so this override puts them in place of TRL's, times each token's truncated
   importance weight (TRL accepts advantages of shape (B, T) from a subclass, and for every
   clipped-surrogate loss a non-negative per-token factor on the advantage equals one on the per-token
   loss). With a KL term it also takes the reference model's log-probs here.
2. **The TIS weights** (``_tis_weights``): ``clamp(exp(logp_train - logp_behaviour), low, high)``
   (:func:`spade_core.method.advantages.tis_weight`) with the behaviour side at
   ``training.behaviour_logprob_temperature`` (:func:`~spade_core.train.token_logps.behaviour_at_temperature`);
   a token without a behaviour log-prob keeps weight 1. Their spread over the trained tokens is logged.
3. **The loss** (``compute_loss``, ``_compute_loss``). TRL's ``grpo`` loss averages over the rows it was
   handed, padding rows included: the loss is scaled to a mean over the step's samples
   (:func:`~spade_core.train.grpo.sample_mean_scale`). TRL's own KL term takes the step's starting
   checkpoint as its reference (a term of ~0) and cannot clamp, so TRL runs with ``beta=0`` and the KL term
   against the base model, with Slime's ``low_var_kl`` clamp, is added here and aggregated as TRL
   aggregates the policy term (``_aggregate``). ``_get_per_token_logps_and_entropies`` only keeps the
   loss's own forward pass for it.
4. **The reference model** (``_load_reference``), built and placed as TRL builds its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from trl import GRPOTrainer

from spade_core.method.advantages import tis_weight
from spade_core.train.token_logps import behaviour_at_temperature, logps_at_temperatures, low_var_kl, weight_spread


@dataclass(frozen=True)
class LossSettings:
    """What the subclass adds to TRL's loss (:func:`spade_core.train.grpo.spade_trainer_class` binds them).

    ``behaviour_temperature`` None: the args' ``behaviour_logprob_temperature``, else 1.
    """

    tis_low: float
    tis_high: float
    loss_scale: float = 1.0
    kl_coef: float = 0.0
    reference: str | None = None
    behaviour_temperature: float | None = None


class SpadeGRPOTrainer(GRPOTrainer):  # type: ignore[misc]
    """``GRPOTrainer`` with SPADE's advantages, TIS, the sample-mean loss scale and the KL term (module doc)."""

    settings: ClassVar[LossSettings] = LossSettings(0.0, 2.0)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.kl_reference = self._load_reference() if self.settings.kl_coef > 0 else None
        self._policy_logps: Any = None
        self._kl_totals: Any = None

    @property
    def behaviour_t(self) -> float:
        chosen = self.settings.behaviour_temperature
        return float(getattr(self.args, "behaviour_logprob_temperature", 1.0) if chosen is None else chosen)

    # -- 1. the batch -----------------------------------------------------------------------------------
    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        out = super()._generate_and_score_completions(inputs)
        device = out["completion_ids"].device
        advantages = torch.tensor([float(x["advantage"]) for x in inputs], dtype=torch.float32, device=device)
        loss_mask = out["completion_mask"] * out["tool_mask"] if "tool_mask" in out else out["completion_mask"]
        weights = self._tis_weights(out, loss_mask)
        out["advantages"] = advantages.unsqueeze(1) * weights
        if self.kl_reference is not None:
            out["reference_logps"] = self._logps(self.kl_reference, out)
        return out

    def _logps(self, model: Any, out: dict[str, Any]) -> Any:
        """Per-token log-probs of ``model`` on the completions (no gradient)."""
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        with torch.no_grad():
            logps, _, _ = self._get_per_token_logps_and_entropies(
                model, ids, attention, out["completion_ids"].size(1), batch_size=self.args.per_device_train_batch_size
            )
        return logps

    # -- 2. the TIS weights -------------------------------------------------------------------------------
    def _tis_weights(self, out: dict[str, Any], loss_mask: Any) -> Any:
        behaviour = out.get("sampling_per_token_logps")
        if behaviour is None:
            self._log_tis(torch.ones_like(loss_mask, dtype=torch.float32), loss_mask, clipped=None)
            return torch.ones_like(loss_mask, dtype=torch.float32)
        known = ~torch.isnan(behaviour)
        if self.behaviour_t == 1.0:
            train_logps = self._logps(self.model, out)
            log_ratio = torch.where(known, train_logps - torch.nan_to_num(behaviour), torch.zeros_like(behaviour))
        else:  # every token's ratio moves with the temperatures, known log-prob or not
            train_logps, log_ratio = self._tempered_log_ratio(out, behaviour)
            known = torch.ones_like(known)
        weights = tis_weight(log_ratio, self.settings.tis_low, self.settings.tis_high)
        self._log_tis(weights, loss_mask, clipped=(torch.exp(log_ratio) != weights) & known)
        return weights

    def _tempered_log_ratio(self, out: dict[str, Any], behaviour: Any) -> tuple[Any, Any]:
        """log(p_train / p_behaviour) per token with the behaviour side at ``behaviour_t`` and the trainer's
        at its own temperature (:func:`~spade_core.train.token_logps.behaviour_at_temperature`)."""
        ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
        attention = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
        temperatures = sorted({1.0, float(self.behaviour_t), float(self.temperature)})
        logps = logps_at_temperatures(
            self.model,
            ids,
            attention,
            out["completion_ids"].size(1),
            temperatures,
            self.args.per_device_train_batch_size,
        )
        behaviour_t = behaviour_at_temperature(
            behaviour.float(), logps[1.0], logps[float(self.behaviour_t)], float(self.behaviour_t)
        )
        train = logps[float(self.temperature)]
        return train, train - behaviour_t

    def _log_tis(self, weights: Any, loss_mask: Any, clipped: Any) -> None:
        """The weights' mean, clipped fraction and spread over the trained tokens of the whole step, all
        processes' together (each process holds its share of the generation batch)."""
        mask = loss_mask.bool()
        values = self._gathered(weights[mask].float())
        count = max(int(values.numel()), 1)
        self._metrics["train"]["tis/weight_mean"].append(float(values.sum().item()) / count)
        local = torch.zeros((), device=mask.device) if clipped is None else (clipped & mask).sum().float()
        fraction = float(self.accelerator.reduce(local, reduction="sum").item()) / count
        self._metrics["train"]["tis/clipped_fraction"].append(fraction)
        for name, value in weight_spread(values).items():
            self._metrics["train"][f"tis/{name}"].append(value)

    def _gathered(self, values: Any) -> Any:
        """The 1-D ``values`` of every process, concatenated (shares of different lengths padded with NaN for
        the gather, the padding dropped after)."""
        padded = self.accelerator.pad_across_processes(values, dim=0, pad_index=float("nan"))
        every = self.accelerator.gather(padded)
        return every[~torch.isnan(every)]

    # -- 3. the loss ------------------------------------------------------------------------------------
    def compute_loss(
        self, model: Any, inputs: Any, return_outputs: bool = False, num_items_in_batch: Any = None
    ) -> Any:
        loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        scale = self.settings.loss_scale
        return loss * scale if scale != 1.0 else loss

    def _get_per_token_logps_and_entropies(self, model: Any, *args: Any, **kwargs: Any) -> Any:
        out = super()._get_per_token_logps_and_entropies(model, *args, **kwargs)
        if kwargs.get("compute_entropy") and torch.is_grad_enabled():  # the loss's forward: keep for the KL
            self._policy_logps = out[0]
        return out

    def _compute_loss(self, model: Any, inputs: Any) -> Any:
        self._policy_logps = None
        loss = super()._compute_loss(model, inputs)
        if self.kl_reference is None:
            return loss
        if self._policy_logps is None:
            raise RuntimeError("TRL's loss computed no per-token log-probs to take the KL term from")
        mask = inputs["completion_mask"]
        mask = mask * inputs["tool_mask"] if "tool_mask" in inputs else mask
        kl = low_var_kl(self._policy_logps, inputs["reference_logps"])
        self._log_kl(kl.detach(), mask)
        return loss + self.settings.kl_coef * self._aggregate(kl, mask, inputs)

    def _aggregate(self, per_token: Any, mask: Any, inputs: Any) -> Any:
        """TRL's aggregation of a per-token loss for ``loss_type`` (its ``GRPOTrainer._compute_loss``), so
        the KL term is averaged as the policy term is: grpo = Slime's mean of per-sample token means."""
        accumulation = self.current_gradient_accumulation_steps
        masked = per_token * mask
        if self.loss_type == "grpo":
            return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean() / accumulation
        if self.loss_type == "bnpo":
            return masked.sum() / mask.sum().clamp(min=1.0) / accumulation
        if self.loss_type == "dr_grpo":
            return masked.sum() / (per_token.size(0) * self.max_completion_length) / accumulation
        if self.loss_type == "dapo":
            args: Any = self.args
            items = inputs["num_items_in_batch"].clamp(min=1.0) / self.accelerator.num_processes
            return masked.sum() / (items * accumulation / args.steps_per_generation)
        raise ValueError(f"training.loss_type {self.loss_type!r} has no KL aggregation")

    def _log_kl(self, kl: Any, mask: Any) -> None:
        """Adds this micro-batch's KL sum and token count, all processes' together, to the step's totals:
        the logged ``kl`` is their ratio (:meth:`log`), the token mean over the step whatever the micro-batches
        and processes (a mean of per-micro-batch means would depend on how the rows were split)."""
        totals = self.accelerator.reduce(torch.stack([(kl * mask).sum(), mask.sum().float()]), reduction="sum")
        self._kl_totals = totals.detach() if self._kl_totals is None else self._kl_totals + totals.detach()

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        """TRL's log, with ``kl`` the token mean over the step (:meth:`_log_kl`)."""
        if self._kl_totals is not None and self.model is not None and self.model.training:
            self._metrics["train"]["kl"] = [float((self._kl_totals[0] / self._kl_totals[1].clamp(min=1.0)).item())]
            self._kl_totals = None
        super().log(logs, start_time)

    # -- 4. the reference model -------------------------------------------------------------------------
    def _load_reference(self) -> Any:
        """The reference model, built and placed as TRL builds its own (frozen, dropout off, the fused head
        TRL's log-prob forward calls)."""
        from transformers import AutoModelForCausalLM
        from trl.models import prepare_deepspeed, prepare_fsdp
        from trl.trainer.utils import add_fused_lm_head, disable_dropout_in_model

        policy: Any = self.model
        args: Any = self.args
        dtype = next(policy.parameters()).dtype
        ref = AutoModelForCausalLM.from_pretrained(str(self.settings.reference), dtype=dtype)
        ref = ref.eval().requires_grad_(False)
        disable_dropout_in_model(ref)
        add_fused_lm_head(ref, temperature=self.temperature, cast_lm_head_to_fp32=args.cast_lm_head_to_fp32)
        if self.is_deepspeed_enabled:
            return prepare_deepspeed(ref, self.accelerator)
        if self.is_fsdp_enabled:
            return prepare_fsdp(ref, self.accelerator)
        return self.accelerator.prepare_model(ref, evaluation_mode=True)
