"""The loss TRL computes through SPADE's seam aggregates as configured: ``grpo`` as the authors' Slime (each
sample's token mean, then the mean over the step's samples, padding rows left out), ``dapo`` as one token
mean over the batch. Hand-computed numbers on the micro model: on-policy, with no behaviour log-probs, every
token's loss is -advantage, so the loss is a weighted mean of the advantages."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

from spade_core.config import load_config
from spade_core.train.data import AGENT, Batch, Sample
from spade_core.train.grpo import StoredRollouts, grpo_args, sample_mean_scale, spade_trainer_class, stored_reward

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

# (advantage, completion tokens): three samples, so one zero-mask padding row fills the micro-batch of 4.
SAMPLES = [(1.0, 1), (-0.5, 2), (2.0, 3)]
PER_SAMPLE_MEAN = -(1.0 - 0.5 + 2.0) / 3  # Slime: sum of per-sample token means / 3 samples = -0.8333
TOKEN_MEAN = -(1.0 * 1 - 0.5 * 2 + 2.0 * 3) / 6  # TRL dapo: sum over tokens / 6 tokens = -1.0
PADDED_ROW_MEAN = -(1.0 - 0.5 + 2.0) / 4  # what TRL's grpo alone gives: the padding row counts


def _logged_loss(model_dir: str, loss_type: str) -> tuple[float, int]:
    from transformers import AutoTokenizer, TrainerCallback

    batch = Batch(
        [
            Sample(AGENT, f"g{i}", [1, 2, 3], [5] * n, [1] * n, reward=a, advantage=a, source_id=f"s{i}")
            for i, (a, n) in enumerate(SAMPLES)
        ]
    )
    overrides = [f"training.loss_type={loss_type}", "training.per_device_batch_size=4", "model.device=cpu"]
    cfg = load_config("tiny", overrides=overrides)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    losses: list[float] = []

    class Losses(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    with tempfile.TemporaryDirectory() as tmp:
        args, total = grpo_args(cfg, batch, tmp, num_processes=1)
        args.report_to = []
        rollouts = StoredRollouts(batch, total)
        trainer_class = spade_trainer_class(0.0, 2.0, sample_mean_scale(loss_type, total, len(SAMPLES)))
        trainer = trainer_class(
            model=model_dir,
            reward_funcs=stored_reward,
            args=args,
            train_dataset=rollouts.dataset(),
            processing_class=tokenizer,
            rollout_func=rollouts,
            callbacks=[Losses()],
        )
        trainer.train()
    return losses[0], rollouts.padded


def test_grpo_averages_token_means_over_the_samples_as_slime(micro_model_dir: str) -> None:
    loss, padded = _logged_loss(micro_model_dir, "grpo")
    assert padded == 1
    assert loss == pytest.approx(PER_SAMPLE_MEAN, abs=1e-6)
    assert loss != pytest.approx(PADDED_ROW_MEAN, abs=1e-3)


def test_dapo_is_one_token_mean_over_the_batch(micro_model_dir: str) -> None:
    loss, _ = _logged_loss(micro_model_dir, "dapo")
    assert loss == pytest.approx(TOKEN_MEAN, abs=1e-6)
