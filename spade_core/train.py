"""One GRPO update of both roles per generation, with TRL's ``GRPOTrainer`` (docs/DESIGN.md §7 step 9).

Run as ``accelerate launch -m spade_core.train --run-id R --gen G --config FILE`` (the pipeline does this
through :func:`spade_core.train_launch.launch_training`); every process builds the same batch from the
store, the main process writes the checkpoint and the ``train_metrics`` table.

TRL is used through its documented seams only, never subclassed:

- ``rollout_func`` returns the *stored* samples of the generation (``spade_core.train_data``): the
  prompt ids, the completion ids and ``env_mask`` (1 on the agent's own tokens), so multi-turn episodes
  train only on what the agent wrote. The dataset has one row per group; TRL repeats each row
  ``num_generations`` times consecutively, and the i-th repeat of a group is its i-th sample.
- the reward function returns each sample's stored reward and logs per-role reward statistics;
- a ``TrainerCallback`` times each optimizer step and collects the logged metrics.

Simplifications, stated: the samples are the rollouts of the current checkpoint and TRL's old log-probs
are the current ones (``logprobs=None``), so the importance ratio is 1 on the first epoch (REINFORCE
with group-normalised advantages; the clip range acts from the second epoch on). The loss TRL logs is
the joint loss of the step (one update over both roles); reward statistics are per role.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd

from spade_core.checkpoints import model_for_generation, newest_checkpoint_below, write_checkpoint
from spade_core.config import SpadeConfig, load_config
from spade_core.pipeline.verdicts import final_designs
from spade_core.store import Store
from spade_core.train_data import AGENT, DESIGNER, Batch, agent_samples, designer_samples, make_batch, mix_roles
from spade_core.train_launch import TrainSummary

METRIC_STAGE = "train"


def build_batch(cfg: SpadeConfig, store: Store, run_id: str, gen: int, tokenizer: Any) -> Batch:
    """The generation's GRPO batch from the store: no-hint episodes and (unless frozen) designs."""
    episodes = store.read_table("episodes", run_id=run_id, gen=gen, stages=["rollout"])
    agent, skipped = agent_samples(episodes)
    designer = []
    if cfg.designer.train and not cfg.designer.fixed_pool:
        designs = final_designs(store, run_id, gen)  # the latest attempt of each design (repairs included)
        scores = store.read_table("env_scores", run_id=run_id, gen=gen, stages=["score"])
        designer = designer_samples(designs, scores, tokenizer, cfg.scoring.invalid_reward)
    mixed = mix_roles(agent, designer, cfg.training.designer_fraction, seed=cfg.seed * 7919 + gen)
    return make_batch(mixed, skipped_episodes=skipped)


class StoredRollouts:
    """TRL ``rollout_func``: hands out the stored samples of each group instead of generating."""

    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        self.blocks = {f"b{i}": block for i, block in enumerate(batch.blocks)}

    def dataset(self) -> Any:
        from datasets import Dataset

        # The block id rides on the prompt message: TRL shuffles the rows and passes the prompts through.
        rows = [{"prompt": [{"role": "user", "content": key, "block": key}]} for key in self.blocks]
        return Dataset.from_list(rows)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        seen: dict[str, int] = {}
        out: dict[str, list[Any]] = {k: [] for k in ("prompt_ids", "completion_ids", "env_mask", "reward", "role")}
        for prompt in prompts:
            key = prompt[0]["block"]
            block = self.blocks[key]
            sample = block[seen.get(key, 0) % len(block)]
            seen[key] = seen.get(key, 0) + 1
            out["prompt_ids"].append(sample.prompt_ids)
            out["completion_ids"].append(sample.completion_ids)
            out["env_mask"].append(sample.env_mask)
            out["reward"].append(sample.reward)
            out["role"].append(sample.role)
        return {**out, "logprobs": None}  # type: ignore[dict-item]


def stored_reward(completions: list[Any], reward: list[float], role: list[str], **kwargs: Any) -> list[float | None]:
    """The stored reward of each sample; logs the per-role reward mean and std of the step.

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
    return [float(r) for r in reward]  # (None would mean "no reward" to TRL; every sample has one)


def _recorder() -> Any:
    from transformers import TrainerCallback

    class StepRecorder(TrainerCallback):  # type: ignore[misc]
        """Times optimizer steps and keeps every logged metrics dict with its step."""

        def __init__(self) -> None:
            self.logs: list[dict[str, Any]] = []
            self.step_seconds: dict[int, float] = {}
            self._t0 = 0.0

        def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self._t0 = time.perf_counter()

        def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
            self.step_seconds[state.global_step] = time.perf_counter() - self._t0

        def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kw: Any) -> None:
            if logs and "loss" in logs:
                self.logs.append({**logs, "step": state.global_step})

    return StepRecorder()


def grpo_args(cfg: SpadeConfig, batch: Batch, output_dir: str, num_processes: int) -> Any:
    """``GRPOConfig`` from the training config. The per-device batch is rounded up to a multiple of the
    block size so every process holds whole groups (TRL normalises over consecutive rows)."""
    import torch
    from trl import GRPOConfig

    t = cfg.training
    g = batch.block_size
    per_device = math.ceil(t.per_device_batch_size / g) * g
    on_gpu = cfg.model.device != "cpu" and torch.cuda.is_available()
    return GRPOConfig(
        output_dir=output_dir,
        per_device_train_batch_size=per_device,
        gradient_accumulation_steps=1,
        num_generations=g,
        num_train_epochs=t.epochs,
        learning_rate=t.learning_rate,
        loss_type=t.loss_type,
        epsilon=t.epsilon,
        epsilon_high=t.epsilon_high,
        beta=t.beta,
        bf16=bool(on_gpu and t.bf16),
        use_cpu=not on_gpu,
        gradient_checkpointing=bool(t.gradient_checkpointing),
        logging_steps=1,
        save_strategy="no",
        report_to=["tensorboard"],
        seed=cfg.seed,
        dataloader_num_workers=0,
        disable_tqdm=False,
    )


def _metrics_frame(recorder: Any, batch: Batch) -> pd.DataFrame:
    """``train_metrics`` rows: per optimizer step, one row per role in the batch (the loss is the joint one)."""
    rows = []
    tokens_before = 0.0
    for log in recorder.logs:
        step = int(log["step"])
        tokens_now = float(log.get("num_tokens", tokens_before))
        for role in (AGENT, DESIGNER):
            if f"{role}/reward_mean" not in log:
                continue
            clip = log.get("clip_ratio/region_mean")
            rows.append(
                {
                    "role": role,
                    "step": step,
                    "loss": float(log["loss"]),
                    "grad_norm": None if log.get("grad_norm") is None else float(log["grad_norm"]),
                    "reward_mean": float(log[f"{role}/reward_mean"]),
                    "reward_std": float(log[f"{role}/reward_std"]),
                    "kl": None if log.get("kl") is None else float(log["kl"]),
                    "clip_fraction": None if clip is None else float(clip),
                    "tokens": int(tokens_now - tokens_before),
                    "step_seconds": recorder.step_seconds.get(step),
                }
            )
        tokens_before = tokens_now
    return pd.DataFrame(rows)


def _upload_dir(store: Store, local: Path, target: str) -> None:
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        store.write_bytes(f"{target}/{path.relative_to(local).as_posix()}", path.read_bytes())


def train_generation(cfg: SpadeConfig, store: Store, run_id: str, gen: int) -> TrainSummary:
    """The GRPO update of generation ``gen``: train from the generation's model, write checkpoint ``gen``.

    With no usable samples, or when every group has zero reward variance, no update happens and an
    ``unchanged`` checkpoint (the marker alone, pointing at the parent) records why.
    """
    from spade_core.llm.hf import load_tokenizer

    started = time.perf_counter()
    parent_gen = newest_checkpoint_below(store, run_id, gen)
    model_path = model_for_generation(cfg, store, run_id, gen)
    tokenizer = load_tokenizer(model_path)
    tokenizer.padding_side = "left"
    batch = build_batch(cfg, store, run_id, gen, tokenizer)
    summary = TrainSummary(
        run_id,
        gen,
        store.checkpoint_dir(run_id, gen),
        block_size=batch.block_size,
        agent_samples=len(batch.samples(AGENT)),
        designer_samples=len(batch.samples(DESIGNER)),
        zero_variance_groups=batch.zero_variance_blocks(),
        dropped_samples=batch.dropped_samples,
        skipped_episodes=batch.skipped_episodes,
        tokens_trained=sum(s.trained_tokens for s in batch.samples()),
    )
    meta: dict[str, Any] = {"parent_gen": parent_gen, "base_model": cfg.model.name_or_path}
    if not batch.blocks:
        summary.skipped_reason = "no trainable samples (no valid no-hint episodes and no designs)"
    elif summary.zero_variance_groups == len(batch.blocks):
        summary.skipped_reason = f"all {len(batch.blocks)} groups have zero reward variance (no learning signal)"
    if summary.skipped_reason is not None:
        summary.kind, summary.tokens_trained = "unchanged", 0
        summary.seconds = time.perf_counter() - started
        with tempfile.TemporaryDirectory() as empty:
            write_checkpoint(store, empty, run_id, gen, {**meta, "kind": "unchanged", "summary": summary.to_dict()})
        return summary
    return _run_trainer(cfg, store, run_id, gen, model_path, tokenizer, batch, summary, meta, started)


def _run_trainer(
    cfg: SpadeConfig,
    store: Store,
    run_id: str,
    gen: int,
    model_path: str,
    tokenizer: Any,
    batch: Batch,
    summary: TrainSummary,
    meta: dict[str, Any],
    started: float,
) -> TrainSummary:
    from accelerate import PartialState
    from trl import GRPOTrainer

    state = PartialState()
    rollouts = StoredRollouts(batch)
    peft_config = None
    if cfg.training.lora:
        from peft import LoraConfig

        r = cfg.training.lora_r
        peft_config = LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear", task_type="CAUSAL_LM")
    with tempfile.TemporaryDirectory(prefix="spade-grpo-") as tmp:
        args = grpo_args(cfg, batch, tmp, state.num_processes)
        recorder = _recorder()
        trainer = GRPOTrainer(
            model=model_path,
            reward_funcs=stored_reward,
            args=args,
            train_dataset=rollouts.dataset(),
            processing_class=tokenizer,
            peft_config=peft_config,
            rollout_func=rollouts,
            callbacks=[recorder],
        )
        trainer.train()
        out = Path(tmp) / "checkpoint"
        trainer.save_model(str(out))
        if state.is_main_process:
            tokenizer.save_pretrained(str(out))
            metrics = _metrics_frame(recorder, batch)
            losses = [float(log["loss"]) for log in recorder.logs]
            summary.steps = int(trainer.state.global_step)
            summary.loss_mean = sum(losses) / len(losses) if losses else None
            summary.kind = "lora" if cfg.training.lora else "full"
            summary.seconds = time.perf_counter() - started
            if not metrics.empty:
                store.write_table("train_metrics", metrics, run_id=run_id, gen=gen, stage=METRIC_STAGE)
            runs = Path(tmp) / "runs"
            if runs.is_dir():  # TensorBoard event files written by TRL's logging
                _upload_dir(store, runs, f"{store.run_dir(run_id)}/tensorboard/gen={gen}")
            write_checkpoint(store, out, run_id, gen, {**meta, "kind": summary.kind, "summary": summary.to_dict()})
        state.wait_for_everyone()
    return summary


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``accelerate launch -m spade_core.train``."""
    parser = argparse.ArgumentParser(
        prog="spade_core.train", description="One GRPO update of a stored SPADE generation (run under accelerate)."
    )
    parser.add_argument("--run-id", required=True, help="Run whose generation to train.")
    parser.add_argument("--gen", required=True, type=int, help="Generation to train (writes checkpoint GEN).")
    parser.add_argument("--config", required=True, help="Resolved config YAML (written by the launcher).")
    ns = parser.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    cfg = load_config(None, ns.config, [])
    store = Store.from_config(cfg.store)
    summary = train_generation(cfg, store, ns.run_id, ns.gen)
    print(summary.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
