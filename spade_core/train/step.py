# Over 400 lines: the trainer subprocess's one job in order, from the batch read to the checkpoint.
"""One optimizer step of both roles with TRL's ``GRPOTrainer`` (docs/DESIGN.md §7).

Run as ``accelerate launch -m spade_core.train.step --run-id R --gen G --step K --config FILE`` (the pipeline
does this through :func:`spade_core.train.launch.launch_training`; a one-process update is started with the
command and environment accelerate would give it, without its launcher process). Step ``K`` of generation
``G`` is the global step ``s = (G-1)·K_total + K``: it trains checkpoint ``s`` on the samples that checkpoint played
(the pool's no-hint plays of that step) and on the designs due at ``s`` (those of the generation whose
first step is ``s - D``, rewarded over that generation's whole window), and writes
checkpoint ``s + 1`` with the optimizer and scheduler state, so the run has ONE AdamW optimizer whose
state carries from step to step, whatever process or machine runs the next one. Every process builds the
same batch from the store; the main process writes the checkpoint and the ``train_metrics`` and
``train_samples`` tables. It reads the store by stage name (:mod:`spade_core.stage_names`) and imports no
module of :mod:`spade_core.pipeline`, so the subprocess loads none of the orchestration.

TRL is used through its seams (``spade_core.train.grpo``): ``rollout_func`` hands out the stored samples
and a minimal subclass puts SPADE's advantages and truncated importance weights in place of TRL's. The
loss TRL logs is the joint loss of the step; reward statistics are per role.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

import pandas as pd
from safetensors import safe_open

from spade_core.config import SpadeConfig, load_config
from spade_core.llm.hf import load_tokenizer, pick_device
from spade_core.stage_names import instance_name
from spade_core.steps import due_generations, first_step, generation_of, top_up_steps
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import (
    model_for_step,
    model_path_for_checkpoint,
    newest_checkpoint_at_or_below,
    optimizer_state_dir,
    write_checkpoint,
)
from spade_core.store.markers import read_listed
from spade_core.store.schemas import TIS_QUANTILES
from spade_core.store.verdicts import final_designs
from spade_core.threads import auto_threads, use_threads
from spade_core.train.data import (
    AGENT,
    DESIGNER,
    Batch,
    agent_samples,
    designer_samples,
    fill_at_random,
    fill_with_duplicates,
    make_batch,
    mix_roles,
)
from spade_core.train.grpo import (
    OptimizerState,
    StoredRollouts,
    grpo_args,
    sample_mean_scale,
    spade_trainer_class,
    stored_reward,
    trains_on_cpu,
)
from spade_core.train.launch import TrainSummary


def refill_stages(cfg: SpadeConfig, upto: int | None = None) -> list[str]:
    """The per-step top-up stages of a generation (``designer.top_up_at: steps``), ``refill-s{k}``, up to step
    ``upto`` (None: all)."""
    return [instance_name("refill", k) for k in top_up_steps(cfg) if upto is None or k <= upto]


def due_designs(cfg: SpadeConfig, store: Store, run_id: str, global_step: int) -> pd.DataFrame:
    """The rewarded, kept designs trained at ``global_step`` (among them the refused parent copies that
    ``scoring.parent_copy_raw`` rewards): final design rows joined with their ``designer_rewards`` row whose
    ``train_step`` is this step (empty when none are due, the designer is frozen or the pool is fixed). Those
    of the generation whose designs are due now, and at the run's last step those due after it
    (:func:`spade_core.steps.due_generations`). With ``training.delayed_designs: authors`` none at a step that
    made no design of its own (:func:`makes_designs`), as the authors' loop fetches its delayed designs, and runs
    its final flush, only then (``spade_rollout.py:548-563``)."""
    if not cfg.designer.train or cfg.designer.fixed_pool:
        return pd.DataFrame()
    if cfg.training.delayed_designs == "authors" and not makes_designs(cfg, store, run_id, global_step):
        return pd.DataFrame()
    frames = []
    for gen in due_generations(cfg, global_step):
        rewards = read_listed(store, run_id, gen, ["reward"], "designer_rewards")
        if rewards.empty:
            continue
        due = rewards[~rewards["dropped"].astype(bool) & (rewards["train_step"].astype(int) == global_step)]
        if due.empty:
            continue
        designs = final_designs(store, run_id, gen, steps=refill_stages(cfg))
        # a reward row names a valid design, or a refused parent copy with scoring.parent_copy_raw set
        frames.append(designs.merge(due[["design_id", "raw", "reward"]], on="design_id", how="inner"))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def makes_designs(cfg: SpadeConfig, store: Store, run_id: str, global_step: int) -> bool:
    """Whether global step ``global_step`` made designs of its own: valid designs joined the pool there (its
    generation's ``pool`` at the first step, the ``refill-s{k}`` top-up at a later step k). The authors' loop
    buffers a step's designs and fetches those of ``step - D``, and flushes the rest at the final rollout, only
    under ``if delay > 0 and env_samples`` (``spade_rollout.py:548-563``): at a step with no new designs of its
    own, nothing delayed is trained."""
    k = int(cfg.training.steps_per_generation)
    gen, step = generation_of(k, global_step), global_step % k
    if step and step not in top_up_steps(cfg):
        return False
    stage = instance_name("refill", step) if step else "pool"
    pool = read_listed(store, run_id, gen, [stage], "pool", ["source"])
    return bool(not pool.empty and (pool["source"] == "design").any())


def new_designs(cfg: SpadeConfig, pool: pd.DataFrame, step: int) -> int:
    """The designs a step makes, as the authors count them when they fill the batch (``num_env``,
    ``orchestrator.py:2607-2612``): the pool's designed environments at a generation's first step while the
    designer trains, else 0 (a later step's top-ups count none)."""
    if step or not cfg.designer.train or cfg.designer.fixed_pool or "source" not in pool.columns:
        return 0
    return int((pool["source"] == "design").sum())


def build_batch(cfg: SpadeConfig, store: Store, run_id: str, gen: int, step: int, tokenizer: Any) -> Batch:
    """The batch of step ``step`` (0..K-1) of generation ``gen``: the no-hint plays of that step and the
    designs that are due at this global step (:func:`due_designs`), the designer's first; with
    ``training.batch_fill: duplicate`` the agent's plays are repeated up to ``global_batch_size`` minus the
    step's new designs (:func:`spade_core.train.data.fill_with_duplicates`), with ``random`` copied at random up
    to ``global_batch_size`` (:func:`spade_core.train.data.fill_at_random`)."""
    played = instance_name("rollout", step)
    episodes = read_listed(store, run_id, gen, [played], "episodes")
    columns = ["env_id", "skill", "kind", "source"]
    stages = ["pool", *refill_stages(cfg, upto=step)]  # the pool as this step played it
    pool = read_listed(store, run_id, gen, stages, "pool", columns) if not episodes.empty else None
    pool = pool[columns] if pool is not None else pd.DataFrame(columns=columns)
    # A tool-use play that did not terminate keeps its place in its group but is masked out of the loss.
    agent, skipped = agent_samples(episodes, kinds=dict(zip(pool["env_id"], pool["kind"], strict=True)))
    due = due_designs(cfg, store, run_id, first_step(cfg, gen) + step)
    designer = designer_samples(due, tokenizer, enable_thinking=cfg.model.enable_thinking)
    skill_of = dict(zip(pool["env_id"], pool["skill"], strict=True))
    agent = [_with_skill(s, skill_of.get(s.env_id or "")) for s in agent]
    if cfg.training.roles == "designer":  # the agent frozen: its plays score designs, never train
        agent, skipped = [], 0
    mixed = mix_roles(agent, designer, cfg.training.designer_fraction, seed=cfg.seed * 7919 + gen * 131 + step)
    size = cfg.training.global_batch_size
    fill = cfg.training.batch_fill
    if size is not None and fill != "pad":
        plays = [s for s in mixed if s.role == AGENT]
        others = [s for s in mixed if s.role != AGENT]
        if fill == "duplicate":
            plays = fill_with_duplicates(plays, size - new_designs(cfg, pool, step))
        else:  # the fixed-environment baseline's fill: the designer has no samples there
            plays = fill_at_random(plays, size - len(others), seed=cfg.seed * 7919 + gen * 131 + step)
        mixed = others + plays
    return make_batch(mixed, skipped_episodes=skipped, size=size)


def loss_denominator(cfg: SpadeConfig, batch: Batch, dropped: int) -> int:
    """The samples a per-sample loss averages over: the batch's, and those ``drop_zero_advantage`` left out
    (no gradient, but counted, so dropping them changes no update), never the padding rows — except that
    with ``training.global_batch_size`` G and a KL term, the mean is over G, inert pads included.

    Slime divides by the global batch size; the authors rescale the real samples' rewards by G / n_real
    to undo their inert pads only when the KL coefficient is 0 (``spade/slime/spade_rollout.py:844-860``),
    so with a KL term a short batch's loss is the real samples' sum over G (docs/DESIGN.md §7).

    >>> from spade_core.config import load_config
    >>> from spade_core.train.data import Sample
    >>> b = Batch([Sample("agent", "g", [], [1], [1], 0.0)] * 100)
    >>> fixed = ["training.global_batch_size=192"]
    >>> no_kl, kl = load_config(None, overrides=fixed), load_config(None, overrides=[*fixed, "training.beta=0.005"])
    >>> loss_denominator(no_kl, b, 0), loss_denominator(kl, b, 0), loss_denominator(load_config(None), b, 3)
    (100, 192, 103)
    """
    samples = len(batch.samples()) + dropped
    size = cfg.training.global_batch_size
    return max(samples, size) if size is not None and cfg.training.beta > 0 else samples


def kl_reference(cfg: SpadeConfig, store: Store, run_id: str) -> str | None:
    """The model the KL term is taken against: the base model (checkpoint 0, ``model.name_or_path``), as the
    authors' ``--ref-load`` (their ``cmd/tool_use/_train_spade_blend.sh:140``); None when ``training.beta``
    is 0, so no reference is loaded (docs/DESIGN.md §7)."""
    return model_path_for_checkpoint(cfg, store, run_id, 0) if cfg.training.beta > 0 else None


def _with_skill(sample: Any, skill: str | None) -> Any:

    return replace(sample, skill=skill)


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


def _metrics_frame(recorder: Any, batch: Batch, step: int, processes: int) -> pd.DataFrame:
    """``train_metrics`` rows of the optimizer step: one row per role in the batch (the loss is the joint one),
    with the number of training processes."""
    rows = []
    for log in recorder.logs:
        for role in (AGENT, DESIGNER):
            # The role's reward statistics come from the batch, not from TRL's logged values: TRL averages
            # per-process means unweighted across processes (GRPOTrainer._calculate_rewards) and would count
            # the zero-mask padding rows, so two processes would log other values than one.
            rewards = [s.reward for s in batch.samples(role)]
            if not rewards:
                continue
            clip = log.get("clip_ratio/region_mean")
            rows.append(
                {
                    "role": role,
                    "step": step,
                    "loss": float(log["loss"]),
                    "grad_norm": _maybe(log.get("grad_norm")),
                    "reward_mean": statistics.fmean(rewards),
                    "reward_std": statistics.pstdev(rewards),
                    "kl": _maybe(log.get("kl")),
                    "clip_fraction": _maybe(clip),
                    "tokens": sum(s.trained_tokens for s in batch.samples(role)),
                    "step_seconds": recorder.step_seconds.get(int(log["step"])),
                    "learning_rate": _maybe(log.get("learning_rate")),
                    "tis_weight_mean": _maybe(log.get("tis/weight_mean")),
                    "tis_clipped_fraction": _maybe(log.get("tis/clipped_fraction")),
                    **{f"tis_weight_{k}": _maybe(log.get(f"tis/weight_{k}")) for k in TIS_QUANTILES},
                    "processes": processes,
                }
            )
    return pd.DataFrame(rows)


def _maybe(value: Any) -> float | None:
    return None if value is None else float(value)


def samples_frame(batch: Batch, step: int) -> pd.DataFrame:
    """``train_samples`` rows: every sample the step trained on, with its reward, advantage and lineage."""
    rows = [
        {
            "step": step,
            "role": s.role,
            "group_id": s.group,
            "source_id": s.source_id,
            "env_id": s.env_id,
            "skill": s.skill,
            "reward": s.reward,
            "advantage": s.advantage,
            "behaviour_step": s.behaviour_step,
            "tokens": s.trained_tokens,
        }
        for s in batch.samples()
    ]
    return pd.DataFrame(rows)


def _count(summary: TrainSummary, batch: Batch) -> None:
    """The summary's sample and token counts: those of ``batch``, the samples the update is given."""
    summary.agent_samples, summary.designer_samples = len(batch.samples(AGENT)), len(batch.samples(DESIGNER))
    summary.tokens_trained = sum(x.trained_tokens for x in batch.samples())


def train_step(cfg: SpadeConfig, store: Store, run_id: str, gen: int, step: int) -> TrainSummary:
    """Step ``step`` (0..K-1) of generation ``gen``: train checkpoint ``s`` on the step's samples and write
    checkpoint ``s + 1`` (``s`` the global step).

    With no usable samples, or when no group carries a learning signal (every advantage zero) and
    ``training.step_on_zero_signal`` is off, no update happens and an ``unchanged`` checkpoint (the marker
    alone, pointing at the parent) records why; the optimizer state then carries over from the parent. With
    it on, a signal-free batch is trained whole (``drop_zero_advantage`` would leave nothing): the gradient
    is zero, but AdamW's weight decay and momentum still move the weights, as the authors' optimizer does.
    """

    started = time.perf_counter()
    s = first_step(cfg, gen) + step
    parent = newest_checkpoint_at_or_below(store, run_id, s)
    model_path = model_for_step(cfg, store, run_id, s)
    tokenizer = load_tokenizer(model_path)
    tokenizer.padding_side = "left"
    batch = build_batch(cfg, store, run_id, gen, step, tokenizer)
    summary = TrainSummary(
        run_id,
        gen,
        store.checkpoint_dir(run_id, s + 1),
        step=s,
        zero_variance_groups=batch.zero_signal_groups(),
        skipped_episodes=batch.skipped_episodes,
        trimmed_samples=batch.trimmed,
        duplicated_samples=batch.duplicated,
    )
    _count(summary, batch)
    meta: dict[str, Any] = {"parent_step": parent, "base_model": cfg.model.name_or_path}
    if not batch.samples():
        summary.skipped_reason = "no trainable samples (no valid no-hint episodes and no designs)"
    elif summary.zero_variance_groups == len(batch.groups()) and not cfg.training.step_on_zero_signal:
        summary.skipped_reason = f"all {len(batch.groups())} groups have zero reward variance (no learning signal)"
    if summary.skipped_reason is not None:
        summary.kind, summary.tokens_trained = "unchanged", 0
        summary.seconds = time.perf_counter() - started
        with tempfile.TemporaryDirectory() as empty:
            write_checkpoint(store, empty, run_id, s + 1, {**meta, "kind": "unchanged", "summary": summary.to_dict()})
        return summary
    signal = summary.zero_variance_groups < len(batch.groups())
    if cfg.training.drop_zero_advantage and signal:  # no KL term (checked at load): compute, no gradient
        batch, summary.dropped_samples = batch.without_zero_advantage()
        _count(summary, batch)
    state = OptimizerState(optimizer_state_dir(store, run_id, parent))
    return _run_trainer(cfg, store, model_path, tokenizer, batch, summary, meta, state, started)


def _run_trainer(
    cfg: SpadeConfig,
    store: Store,
    model_path: str,
    tokenizer: Any,
    batch: Batch,
    summary: TrainSummary,
    meta: dict[str, Any],
    optimizer: OptimizerState,
    started: float,
) -> TrainSummary:
    from accelerate import PartialState

    state = PartialState(cpu=trains_on_cpu(cfg))  # before TRL's Accelerator: decides MULTI_CPU under torchrun
    run_id, gen, s = summary.run_id, summary.gen, summary.step
    peft_config = None
    if cfg.training.lora:
        from peft import LoraConfig

        r = cfg.training.lora_r
        peft_config = LoraConfig(r=r, lora_alpha=2 * r, target_modules="all-linear", task_type="CAUSAL_LM")
    with tempfile.TemporaryDirectory(prefix="spade-grpo-") as tmp:
        args, total = grpo_args(cfg, batch, tmp, state.num_processes)
        rollouts = StoredRollouts(batch, total)
        recorder = _recorder()
        scale = sample_mean_scale(cfg.training.loss_type, total, loss_denominator(cfg, batch, summary.dropped_samples))
        reference = kl_reference(cfg, store, run_id)
        trainer_class = spade_trainer_class(
            cfg.training.tis_low, cfg.training.tis_high, scale, kl_coef=cfg.training.beta, reference=reference
        )
        trainer = trainer_class(
            model=model_path,
            reward_funcs=stored_reward,
            args=args,
            train_dataset=rollouts.dataset(),
            processing_class=tokenizer,
            peft_config=peft_config,
            rollout_func=rollouts,
            callbacks=[recorder, optimizer.callback()],
        )
        # Every process of a data-parallel update holds the whole model; a sharded one (FSDP, DeepSpeed) does not.
        sharded = bool(trainer.is_fsdp_enabled or trainer.is_deepspeed_enabled)
        before = _weights_before(trainer.model, model_path) if state.is_main_process and not sharded else None
        trainer.train()
        if before is not None:
            summary.weight_delta, summary.weight_delta_relative = _weight_delta(trainer.model, before)
        out = Path(tmp) / "checkpoint"
        trainer.save_model(str(out))
        if state.is_main_process:
            tokenizer.save_pretrained(str(out))
            OptimizerState.save(trainer, out)
            losses = [float(log["loss"]) for log in recorder.logs]
            summary.steps = int(trainer.state.global_step)
            summary.padded_samples = rollouts.padded
            summary.loss_mean = sum(losses) / len(losses) if losses else None
            norms = [float(log["grad_norm"]) for log in recorder.logs if log.get("grad_norm") is not None]
            summary.grad_norm = norms[-1] if norms else None
            summary.kind = "lora" if cfg.training.lora else "full"
            summary.processes = state.num_processes
            summary.seconds = time.perf_counter() - started
            stage = instance_name("train", s - first_step(cfg, gen))
            metrics = _metrics_frame(recorder, batch, s, state.num_processes)
            tables = [] if metrics.empty else [("train_metrics", metrics)]
            tables.append(("train_samples", samples_frame(batch, s)))
            written = [store.write_table(t, f, run_id=run_id, gen=gen, stage=stage) for t, f in tables]
            runs = Path(tmp) / "runs"
            if runs.is_dir():  # TensorBoard event files written by TRL's logging
                names = [p.relative_to(runs).as_posix() for p in sorted(runs.rglob("*")) if p.is_file()]
                store.upload_files(runs, store.tensorboard_dir(run_id, s), names)
            # The tables written here go into the checkpoint's marker, so the train stage lists them in its own.
            done = {**meta, "kind": summary.kind, "summary": summary.to_dict(), "written": [asdict(w) for w in written]}
            write_checkpoint(store, out, run_id, s + 1, done)
        state.wait_for_everyone()
    return summary


# Above this many trained parameters a before-copy would cost too much memory: no weight delta is reported.
SNAPSHOT_LIMIT = 1_000_000_000


class CheckpointTensors(Mapping[str, Any]):
    """The tensors of a checkpoint directory's safetensors files by name, each read from its file when it is
    asked for (memory-mapped): the weights an update started from, without a copy of the model held through
    the update (a copy cost the 135M model's trainer 0.5 GB at its peak)."""

    def __init__(self, directory: str) -> None:
        self._files: dict[str, Path] = {}
        for file in sorted(Path(directory).glob("*.safetensors")):
            with safe_open(str(file), framework="pt") as handle:
                self._files.update(dict.fromkeys(handle.keys(), file))

    def __getitem__(self, name: str) -> Any:
        with safe_open(str(self._files[name]), framework="pt") as handle:
            return handle.get_tensor(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._files)

    def __len__(self) -> int:
        return len(self._files)


def _weights_before(model: Any, model_path: str) -> Mapping[str, Any] | None:
    """The trained parameters as the update found them: read back from the checkpoint the model was loaded
    from when its files hold every trained parameter under its name (full fine-tuning; :func:`_weight_delta`
    casts them as loading did), else a CPU copy of them (a LoRA adapter's), or None when a copy would be too
    large."""
    trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    stored = CheckpointTensors(model_path) if Path(model_path).is_dir() else None
    if stored is not None and all(n in stored for n, _ in trained):
        return stored
    if sum(p.numel() for _, p in trained) > SNAPSHOT_LIMIT:
        return None
    return {n: p.detach().to("cpu", copy=True) for n, p in trained}


def _weight_delta(model: Any, before: Mapping[str, Any]) -> tuple[float, float]:
    """(L2 norm of the update, that norm / L2 norm of the parameters before) over ``before``'s parameters."""
    import torch

    moved, size = 0.0, 0.0
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in before:
                old = before[name].to(param.dtype).float()  # a checkpoint's tensor, as loading cast it
                moved += float((param.detach().to("cpu").float() - old).pow(2).sum())
                size += float(old.pow(2).sum())
    return moved**0.5, (moved / size) ** 0.5 if size else 0.0


def threads_per_process(threads: int | None, local_processes: int) -> int | None:
    """Torch threads of one of ``local_processes`` training processes on this machine: ``model.threads``
    (None: the idle CPUs, :func:`spade_core.threads.auto_threads`) shared out, at least 1 each, so that two
    processes on two cores do not run four spinning threads. One process keeps ``threads`` unchanged.

    >>> threads_per_process(None, 1), threads_per_process(4, 2), threads_per_process(None, 2) >= 1
    (None, 2, True)
    """
    if local_processes <= 1:
        return threads
    total = threads if threads is not None else auto_threads()
    return max(1, total // local_processes)


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``accelerate launch -m spade_core.train.step``."""
    parser = argparse.ArgumentParser(
        prog="spade_core.train.step",
        description="One optimizer step of a stored SPADE generation (run under accelerate).",
    )
    parser.add_argument("--run-id", required=True, help="Run whose step to train.")
    parser.add_argument("--gen", required=True, type=int, help="Generation of the step.")
    parser.add_argument("--step", default=0, type=int, help="Step within the generation (0..K-1).")
    parser.add_argument("--config", required=True, help="Resolved config YAML (written by the launcher).")
    ns = parser.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    cfg = load_config(None, ns.config, [])
    if pick_device(cfg.model.device) == "cpu":
        use_threads(threads_per_process(cfg.model.threads, int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))
    store = Store.from_config(cfg.store)
    summary = train_step(cfg, store, ns.run_id, ns.gen, ns.step)
    print(summary.line(), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
