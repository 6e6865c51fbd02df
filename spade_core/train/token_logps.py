"""Per-token log-probability math of the update (docs/DESIGN.md §7.2): the behaviour log-probs at the loss's
temperature, the trainer's own log-probs at several temperatures without the full logits, Slime's clamped
``low_var_kl``, and the spread of the importance weights. Torch is imported inside each function; the trainer
subclass (:mod:`spade_core.train.trainer`) and the seams into TRL (:mod:`spade_core.train.grpo`) both use these.
"""

from __future__ import annotations

from typing import Any


def behaviour_at_temperature(stored: Any, trainer_at_one: Any, trainer_at_t: Any, temperature: float) -> Any:
    """The behaviour log-probs at ``temperature``, from the raw (temperature 1) ones the backend stored.

    A token's log-prob at temperature T is ``l_x / T - logsumexp(l / T)``; at 1, ``l_x - logsumexp(l)``. The
    stored log-prob gives the engine's ``l_x - logsumexp(l)`` only, so the normaliser at T comes from the
    trainer's own logits: ``behaviour_T = trainer_T + (stored - trainer_1) / T`` — exact when the engine and
    the trainer agree, and their disagreement (what TIS corrects) carried over as the engine's logits scaled
    by 1/T would carry it. A token with no stored log-prob (NaN) is taken as agreeing.

    >>> import torch
    >>> logits = torch.tensor([2.0, 0.5, -1.0])
    >>> at = lambda t: torch.log_softmax(logits / t, -1)[1:2]  # the token with logit 0.5
    >>> torch.allclose(behaviour_at_temperature(at(1.0), at(1.0), at(0.6), 0.6), at(0.6))
    True
    """
    import torch

    mismatch = torch.nan_to_num(stored - trainer_at_one, nan=0.0)
    return trainer_at_t + mismatch / temperature


def weight_spread(values: Any) -> dict[str, float]:
    """Summary of the TIS weights of the trained tokens (``values``, 1-D): min, 10th / 50th / 90th percentile,
    max.

    >>> import torch
    >>> weight_spread(torch.tensor([0.5, 1.0, 2.0, 1.0, 1.0]))
    {'weight_min': 0.5, 'weight_p10': 0.7, 'weight_p50': 1.0, 'weight_p90': 1.6, 'weight_max': 2.0}
    """
    import torch

    values = values.float()
    if values.numel() == 0:
        return {}
    q = torch.quantile(values, torch.tensor([0.1, 0.5, 0.9], dtype=values.dtype, device=values.device)).tolist()
    return {
        "weight_min": round(float(values.min()), 6),
        "weight_p10": round(q[0], 6),
        "weight_p50": round(q[1], 6),
        "weight_p90": round(q[2], 6),
        "weight_max": round(float(values.max()), 6),
    }


# Output-head settings whose logits the plain projection of :func:`logps_at_temperatures` would not reproduce.
_HEAD_SCALINGS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


def logps_at_temperatures(
    model: Any, ids: Any, attention: Any, completion_len: int, temperatures: list[float], rows: int, chunk: int = 512
) -> dict[float, Any]:
    """Per-token log-probs of the last ``completion_len`` tokens of ``ids`` at each temperature (no gradient).

    ``rows`` sequences at a time through the backbone, then the output head over ``chunk`` positions at a
    time in float32, so the full (positions x vocabulary) logits never exist at once. A model whose head
    scales or soft-caps its logits is refused (the projection here would not match its log-probs).
    """
    import torch

    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    text = base.config.get_text_config()
    scaled = [k for k in _HEAD_SCALINGS if getattr(text, k, None) not in (None, 1.0)]
    if scaled:
        raise ValueError(
            f"training.behaviour_logprob_temperature != 1 needs a plain output head; this model sets {scaled}"
        )
    head = base.get_output_embeddings()
    out: dict[float, list[Any]] = {t: [] for t in temperatures}
    with torch.no_grad():
        for start in range(0, ids.size(0), rows):
            batch_ids, batch_attention = ids[start : start + rows], attention[start : start + rows]
            hidden = base.base_model(input_ids=batch_ids, attention_mask=batch_attention).last_hidden_state
            hidden = hidden[:, -completion_len - 1 : -1].to(head.weight.device)
            labels = batch_ids[:, -completion_len:].to(head.weight.device)
            per_t: dict[float, list[Any]] = {t: [] for t in temperatures}
            for pos in range(0, completion_len, chunk):
                logits = head(hidden[:, pos : pos + chunk]).float()
                token = labels[:, pos : pos + chunk].unsqueeze(-1)
                for t in temperatures:
                    per_t[t].append(torch.log_softmax(logits / t, dim=-1).gather(-1, token).squeeze(-1))
            for t in temperatures:
                out[t].append(torch.cat(per_t[t], dim=1))
    return {t: torch.cat(v, dim=0) for t, v in out.items()}


KL_CLAMP = 10.0  # Slime clamps low_var_kl to [-10, 10] per token


def low_var_kl(logps: Any, ref_logps: Any) -> Any:
    """Slime's ``low_var_kl`` per token: the k3 estimator of KL(policy || reference), clamped to ±10.

    With ``d = ref_logp - logp``: ``kl = exp(d) - d - 1`` (>= 0, zero when the two agree), then
    ``clamp(kl, -10, 10)`` (Slime ``slime/utils/ppo_utils.py:12-51``, the clamp at 47-49; added to the loss
    as ``kl_coef * sum_of_sample_mean(kl)``, ``slime/backends/megatron_utils/loss.py:972-986``). A clamped
    token has no gradient.

    >>> import torch
    >>> kl = low_var_kl(torch.tensor([-1.0, -1.0, -20.0]), torch.tensor([-1.0, -2.0, -1.0]))
    >>> [round(x, 4) for x in kl.tolist()]  # equal; exp(-1) - (-1) - 1; exp(19) - 20 clamped
    [0.0, 0.3679, 10.0]
    """
    import torch

    d = ref_logps.float() - logps.float()
    return torch.clamp(torch.exp(d) - d - 1.0, min=-KL_CLAMP, max=KL_CLAMP)
