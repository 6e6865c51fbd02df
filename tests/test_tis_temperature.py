"""Truncated importance sampling with each side's log-probs at its own temperature
(``training.logprob_temperature``, ``training.behaviour_logprob_temperature``): on-policy samples of a
sharpened micro model (its output head scaled up, so its distributions are far from uniform), behaviour
log-probs stored raw (temperature 1) as the backends store them. Ours (both at 1): every
weight is 1. The authors' (trainer at 1, behaviour at the sampling temperature 0.6): each token is weighted
clamp(p_T1 / p_T0.6, 0, 2), checked against the model's full logits, and the spread lands in the logs."""

from __future__ import annotations

import tempfile
from typing import Any

import pytest

from spade_core.config import load_config
from spade_core.train.data import AGENT, Batch, Sample
from spade_core.train.grpo import (
    StoredRollouts,
    grpo_args,
    sample_mean_scale,
    spade_trainer_class,
    stored_reward,
)
from spade_core.train.token_logps import logps_at_temperatures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPLY = "Let me count: one, two, three. \\boxed{3}"


def _full_logps(model: Any, prompt: list[int], completion: list[int], temperature: float) -> Any:
    import torch

    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits / temperature, -1).gather(-1, torch.tensor(completion).unsqueeze(-1)).squeeze(-1)


@pytest.fixture(scope="module")
def sharp_model_dir(micro_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The micro model with its (tied) output head scaled by 6: randomly initialised logits are nearly flat,
    so p_T1 and p_T0.6 would hardly differ."""
    import shutil
    from pathlib import Path

    import torch
    from transformers import AutoModelForCausalLM

    out = tmp_path_factory.mktemp("sharp-model")
    model = AutoModelForCausalLM.from_pretrained(micro_model_dir)
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(6.0)
    model.save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        if (Path(micro_model_dir) / name).is_file():
            shutil.copy(Path(micro_model_dir) / name, out / name)
    return str(out)


@pytest.fixture(scope="module")
def on_policy(sharp_model_dir: str) -> tuple[Batch, list[Any], list[Any]]:
    """Two samples with their raw behaviour log-probs, and each token's log-prob at 1 and at 0.6."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(sharp_model_dir)
    model = AutoModelForCausalLM.from_pretrained(sharp_model_dir).eval()
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Pick a number."}], add_generation_prompt=True)
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    samples, at_one, at_low = [], [], []
    import torch

    with torch.no_grad():  # the model's own greedy reply (likely tokens) and a written one (unlikely tokens)
        greedy = model.generate(torch.tensor([prompt]), max_new_tokens=12, do_sample=False)[0, len(prompt) :]
    completions = [greedy.tolist(), tokenizer(REPLY, add_special_tokens=False)["input_ids"]]
    for i, completion in enumerate(completions):
        one, low = _full_logps(model, prompt, completion, 1.0), _full_logps(model, prompt, completion, 0.6)
        at_one.append(one)
        at_low.append(low)
        mask = [1] * len(completion)
        samples.append(Sample(AGENT, f"g{i}", prompt, completion, mask, 1.0, (-1.0) ** i, one.tolist(), f"s{i}"))
    return Batch(samples), at_one, at_low


def _step_logs(model_dir: str, batch: Batch, behaviour_temperature: float) -> dict[str, float]:
    from transformers import AutoTokenizer, TrainerCallback

    cfg = load_config(
        "tiny",
        overrides=[
            "training.per_device_batch_size=2",
            "model.device=cpu",
            f"training.behaviour_logprob_temperature={behaviour_temperature}",
        ],
    )
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    logs: dict[str, float] = {}

    class Logs(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs_: dict[str, Any] | None = None, **kw: Any) -> None:
            logs.update(kw.get("logs") or logs_ or {})

    with tempfile.TemporaryDirectory() as tmp:
        args, total = grpo_args(cfg, batch, tmp, num_processes=1)
        args.report_to = []
        assert args.temperature == cfg.training.logprob_temperature == 1.0
        assert args.behaviour_logprob_temperature == behaviour_temperature
        rollouts = StoredRollouts(batch, total)
        # as spade_core/train/step.py builds it: the behaviour temperature rides on the args
        trainer_class = spade_trainer_class(0.0, 2.0, sample_mean_scale("dapo", total, len(batch.samples())))
        trainer = trainer_class(
            model=model_dir,
            reward_funcs=stored_reward,
            args=args,
            train_dataset=rollouts.dataset(),
            processing_class=tokenizer,
            rollout_func=rollouts,
            callbacks=[Logs()],
        )
        trainer.train()
    return logs


def test_log_probs_at_several_temperatures_match_the_full_logits(sharp_model_dir: str, on_policy) -> None:  # type: ignore[no-untyped-def]
    import torch
    from transformers import AutoModelForCausalLM

    batch, at_one, at_low = on_policy
    model = AutoModelForCausalLM.from_pretrained(sharp_model_dir).eval()
    sample = batch.samples()[0]
    ids = torch.tensor([sample.prompt_ids + sample.completion_ids])
    got = logps_at_temperatures(
        model, ids, torch.ones_like(ids), len(sample.completion_ids), [1.0, 0.6], rows=1, chunk=3
    )
    assert torch.allclose(got[1.0][0], at_one[0], atol=1e-4) and torch.allclose(got[0.6][0], at_low[0], atol=1e-4)


def test_ours_weighs_on_policy_tokens_1_and_the_authors_by_p_t1_over_p_t06(sharp_model_dir: str, on_policy) -> None:  # type: ignore[no-untyped-def]
    import torch

    batch, at_one, at_low = on_policy
    ours = _step_logs(sharp_model_dir, batch, 1.0)
    assert ours["tis/weight_mean"] == pytest.approx(1.0, abs=2e-3)
    assert ours["tis/weight_min"] == pytest.approx(1.0, abs=5e-3) and ours["tis/weight_max"] == pytest.approx(
        1.0, abs=5e-3
    )
    theirs = _step_logs(sharp_model_dir, batch, 0.6)
    expected = torch.clamp(torch.exp(torch.cat(at_one) - torch.cat(at_low)), 0.0, 2.0)
    # TRL logs the mean over the step's micro-batches (one here: both samples)
    assert theirs["tis/weight_mean"] == pytest.approx(float(expected.mean()), abs=2e-3)
    assert theirs["tis/weight_min"] == pytest.approx(float(expected.min()), abs=2e-3)
    assert theirs["tis/weight_max"] == pytest.approx(float(expected.max()), abs=2e-3)
    assert theirs["tis/weight_min"] < 0.9  # a greedy token: p_T1 < p_T0.6
    assert 0.0 < theirs["tis/clipped_fraction"] < 1.0  # the written reply's unlikely tokens: p_T1 >> p_T0.6
    assert theirs["tis/clipped_fraction"] == pytest.approx(float((expected == 2.0).float().mean()), abs=1e-6)
    print({k: round(v, 4) for k, v in theirs.items() if k.startswith("tis/")})
