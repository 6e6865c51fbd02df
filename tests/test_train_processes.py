"""Training on several processes: one GRPO step of a stored batch on two CPU processes (gloo, through
``accelerate launch`` with ``data/accelerate/cpu-ddp2.yaml``) makes the update one process makes — the same
weights, loss and ``train_metrics`` — for both roles, for the presets' loss aggregations (``grpo``, Slime's, and
TRL's ``dapo``), with the KL term on and truncated importance weights off 1, on a batch of 5 samples that two
processes of micro-batch 2 cannot split evenly. And every accelerate file under ``data/accelerate/`` loads in
accelerate's own config loader and agrees with the preset that names it."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from safetensors.torch import load_file
from test_train import GEN, RUN, S0, _far_checkpoint, _frames, _store_generation

from spade_core.config import ConfigError, load_config
from spade_core.llm.hf import TransformersGenerator
from spade_core.pipeline.run_config import bind_run_config
from spade_core.resources import data_dir
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import model_path_for_checkpoint
from spade_core.train.launch import (
    TrainSummary,
    accelerate_command,
    accelerate_env,
    accelerate_settings,
    direct_launch,
    launch_training,
)

CPU_DDP = "cpu-ddp2.yaml"
LOSSES = ("grpo", "dapo")  # the paper presets' (Slime's sample mean) and the default (TRL's token mean)
# The KL term against the base model, from a checkpoint far from it (so the term is not ~0); the stored
# behaviour log-probs moved off the trainer's, with a low TIS cap, so weights are off 1 and some are clamped.
SETTINGS = ("training.beta=0.005", "training.drop_zero_advantage=false", "training.tis_high=1.2")
SETTINGS += ("training.per_device_batch_size=2", "training.learning_rate=1e-4")
# Columns that differ by design: the wall time, and the process count itself.
NOT_COMPARED = {"step_seconds", "processes"}


def _moved(logprobs: Any) -> Any:
    """Behaviour log-probs shifted by +0.4 / -0.3 / 0 in turn (None stays None: those tokens weigh 1)."""
    if logprobs is None:
        return None
    return [float(x) + (0.4, -0.3, 0.0)[i % 3] for i, x in enumerate(logprobs)]


@pytest.fixture(scope="module")
def frames(micro_model_dir: str) -> dict[str, pd.DataFrame]:
    """A generation's tables with the micro model's plays, their behaviour log-probs moved (:func:`_moved`)."""
    generator = TransformersGenerator(micro_model_dir, device="cpu", dtype="float32", batch_size=16)
    try:
        out = _frames(generator)
    finally:
        generator.close()
    episodes = out["episodes"]
    return {**out, "episodes": episodes.assign(logprobs=[_moved(x) for x in episodes["logprobs"]])}


class Update:
    """One launched step: its summary, ``train_metrics`` rows and the weights of the checkpoint it wrote."""

    def __init__(self, summary: TrainSummary, metrics: pd.DataFrame, weights: dict[str, torch.Tensor]) -> None:
        self.summary, self.metrics, self.weights = summary, metrics, weights


def _update(
    root: Path,
    frames: dict[str, pd.DataFrame],
    model: str,
    loss: str,
    accelerate: str | None,
    extra: tuple[str, ...] | list[str] = (),
) -> Update:
    store = Store(str(root))
    _store_generation(store, frames)
    _far_checkpoint(store, model, root / "far-model")
    overrides = [f"store.root={root}", f"model.name_or_path={model}", f"training.loss_type={loss}", *SETTINGS, *extra]
    overrides += [f"training.accelerate_config={accelerate}"] if accelerate else []
    cfg = load_config("tiny", None, overrides)
    lines: list[str] = []
    summary = launch_training(cfg, store, RUN, GEN, 0, echo=lines.append)
    assert summary.kind == "full", "\n".join(lines[-30:])
    weights = load_file(str(Path(model_path_for_checkpoint(cfg, store, RUN, S0 + 1)) / "model.safetensors"))
    metrics = store.read_table("train_metrics", run_id=RUN, gen=GEN).sort_values("role", ignore_index=True)
    return Update(summary, metrics, weights)


@pytest.fixture(scope="module")
def updates(
    frames: dict[str, pd.DataFrame], micro_model_dir: str, tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, int], Update]:
    """The step of each loss aggregation on one process (the default launch) and on two (``cpu-ddp2.yaml``)."""
    out = {}
    for loss in LOSSES:
        for processes, accelerate in ((1, None), (2, CPU_DDP)):
            root = tmp_path_factory.mktemp(f"{loss}-p{processes}")
            out[(loss, processes)] = _update(root, frames, micro_model_dir, loss, accelerate)
    return out


def max_relative_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    """The largest, over the tensors, of max |a - b| / max |a| (the tensors' own scale)."""
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max() / a[k].abs().max().clamp(min=1e-30)) for k in a)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("loss", LOSSES)
def test_two_gloo_processes_make_the_update_of_one(updates: dict[tuple[str, int], Update], loss: str) -> None:
    one, two = updates[(loss, 1)], updates[(loss, 2)]
    assert (one.summary.processes, two.summary.processes) == (1, 2)
    assert set(one.metrics["processes"]) == {1} and set(two.metrics["processes"]) == {2}
    # The batch of 5 does not split evenly: padded with zero-mask rows to 6 (1 x 2 x 3) and 8 (2 x 2 x 2),
    # every sample trained once in both.
    assert (one.summary.padded_samples, two.summary.padded_samples) == (1, 3)
    assert (one.summary.agent_samples, one.summary.designer_samples) == (two.summary.agent_samples, 1) == (4, 1)
    moved = max_relative_difference(one.weights, two.weights)
    assert moved <= 1e-5, moved
    assert one.summary.loss_mean == pytest.approx(two.summary.loss_mean, rel=1e-5, abs=1e-7)
    assert one.summary.grad_norm == pytest.approx(two.summary.grad_norm, rel=1e-5)
    # The conditions the equivalence is claimed under: KL on and > 0, TIS weights off 1, some clamped.
    assert list(one.metrics["role"]) == ["agent", "designer"]
    assert (one.metrics["kl"] > 1e-3).all(), one.metrics["kl"]
    assert (one.metrics["tis_weight_min"] < 0.9).all() and (one.metrics["tis_clipped_fraction"] > 0).all()
    compared = [c for c in one.metrics.columns if c not in NOT_COMPARED]
    for column in compared:
        left, right = one.metrics[column].tolist(), two.metrics[column].tolist()
        if pd.api.types.is_float_dtype(one.metrics[column]):
            assert all(_close(x, y) for x, y in zip(left, right, strict=True)), (column, left, right)
        else:
            assert left == right, (column, left, right)


def _close(x: float, y: float) -> bool:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return y is None or (isinstance(y, float) and math.isnan(y))
    return math.isclose(x, y, rel_tol=1e-5, abs_tol=1e-7)


def test_the_two_process_cpu_config_launches_through_accelerates_torchrun(tmp_path: Path) -> None:
    cfg = load_config("tiny", None, [f"store.root={tmp_path}", f"training.accelerate_config={CPU_DDP}"])
    cmd = accelerate_command(cfg, "c.yaml", RUN, 1, 0)
    assert cmd[cmd.index("--config_file") + 1].endswith(f"data/accelerate/{CPU_DDP}") and "--multi_gpu" in cmd
    assert accelerate_env(cfg) == {"ACCELERATE_USE_CPU": "true"}
    default = load_config("tiny", None, [f"store.root={tmp_path}"])
    assert "--multi_gpu" not in accelerate_command(default, "c.yaml", RUN, 1, 0) and accelerate_env(default) == {}


def test_a_one_process_update_starts_the_trainer_without_accelerates_launcher_process(tmp_path: Path) -> None:
    default = load_config("tiny", None, [f"store.root={tmp_path}"])
    direct = direct_launch(default, "c.yaml", RUN, 1, 0)
    assert direct is not None
    cmd, env, _ = direct
    assert cmd[:3] == [sys.executable, "-m", "spade_core.train.step"] and "accelerate" not in " ".join(cmd)
    assert cmd[cmd.index("--config") + 1] == "c.yaml" and cmd[cmd.index("--gen") + 1] == "1"
    assert env["ACCELERATE_USE_CPU"] == "True" and env["ACCELERATE_MIXED_PRECISION"] == "no"
    ddp = load_config("tiny", None, [f"store.root={tmp_path}", f"training.accelerate_config={CPU_DDP}"])
    assert direct_launch(ddp, "c.yaml", RUN, 1, 0) is None  # two processes: accelerate's torchrun starts them


# What each file under data/accelerate/ is: distributed type, processes, mixed precision, sharding, device.
EXPECTED = {
    "cpu-ddp2.yaml": ("MULTI_CPU", 2, "no", None, True),
    "single-gpu.yaml": ("NO", 1, "bf16", None, False),
    "ddp-8gpu.yaml": ("MULTI_GPU", 8, "bf16", None, False),
    "fsdp-8gpu.yaml": ("FSDP", 8, "bf16", "fsdp 2", False),
    "deepspeed-zero3-8gpu.yaml": ("DEEPSPEED", 8, "bf16", "zero 3", False),
}


def _sharding(settings: Any) -> str | None:
    if settings.fsdp_config:
        return f"fsdp {settings.fsdp_config.get('fsdp_version', 1)}"
    if settings.deepspeed_config:
        return f"zero {settings.deepspeed_config.get('zero_stage')}"
    return None


def test_every_accelerate_file_loads_in_accelerate_and_agrees_with_the_presets_naming_it() -> None:
    files = {p.name: p for p in data_dir("accelerate").glob("*.yaml")}
    assert set(files) == set(EXPECTED), "a new file under data/accelerate/ needs its row in EXPECTED"
    for name, path in files.items():
        settings = accelerate_settings(path)  # accelerate's own loader: an unknown key or type fails here
        seen = (str(settings.distributed_type).split(".")[-1], settings.num_processes, settings.mixed_precision)
        assert (*seen, _sharding(settings), bool(settings.use_cpu)) == EXPECTED[name], name
    named = 0
    for preset in data_dir("configs").glob("*.yaml"):
        cfg = load_config(preset.stem, None, [])
        if not cfg.training.accelerate_config:
            continue
        named += 1
        kind, processes, precision, _, on_cpu = EXPECTED[cfg.training.accelerate_config]
        devices = cfg.orchestration.training_devices
        cmd = accelerate_command(cfg, "c.yaml", RUN, 1, 0)
        # The launch runs one process per training device where the preset splits them, else the file's count.
        launched = int(cmd[cmd.index("--num_processes") + 1]) if "--num_processes" in cmd else processes
        assert launched == (len(devices) if devices is not None else processes), preset.name
        assert (precision == "bf16") == bool(cfg.training.bf16), preset.name
        assert on_cpu == (cfg.model.device == "cpu"), preset.name
        assert (kind != "NO") == (launched > 1), preset.name
    assert named >= 1  # gpu-8x names ddp-8gpu.yaml


@pytest.mark.slow
@pytest.mark.timeout(1500)
@pytest.mark.usefixtures("jail_processes_checked")
def test_a_tiny_generation_trains_on_two_processes_and_plays_the_checkpoint_they_wrote(
    micro_model_dir: str, tmp_path: Path
) -> None:
    """``spade run --preset tiny --set training.accelerate_config=cpu-ddp2.yaml`` (the cheapest generation of
    tests/test_resume.py, on the micro model, trained even without reward variance): both steps train on two
    processes, and step 1 is played by the checkpoint step 0 wrote."""
    import subprocess

    from test_resume import OVERRIDES, REPO, spade_command, spade_env

    from spade_core.store.checkpoints import read_marker

    overrides = [o for o in OVERRIDES if not o.startswith("training.")] + [
        f"model.name_or_path={micro_model_dir}",
        "training.enabled=true",
        "training.steps_per_generation=2",
        "training.step_on_zero_signal=true",
        f"training.accelerate_config={CPU_DDP}",
    ]
    root = tmp_path / "store"
    args = ["run", "--run-id", "ddp", "--store", str(root), *[x for o in overrides for x in ("--set", o)]]
    done = subprocess.run(
        spade_command(*args), cwd=REPO, env=spade_env(tmp_path), capture_output=True, text=True, timeout=1400
    )
    assert done.returncode == 0, f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    store = Store(str(root))
    for step in (1, 2):
        summary = read_marker(store, "ddp", step)["summary"]
        assert summary["kind"] == "full" and summary["processes"] == 2, summary
    metrics = store.read_table("train_metrics", run_id="ddp", gen=1)
    assert set(metrics["step"]) == {0, 1}
    assert set(metrics["processes"]) == {2}
    played = store.read_table("episodes", run_id="ddp", gen=1)
    assert set(played["policy_step"]) == {0, 1}  # step 1 played by checkpoint 1, the two processes' update


def test_sharded_configs_are_refused_on_a_cpu(tmp_path: Path) -> None:
    """FSDP 2 itself runs on a CPU over gloo (torch's ``fully_shard`` on a "cpu" device mesh), but accelerate
    1.16 enables its FSDP plugin only for multi-accelerator types: on a CPU the step would run unsharded."""
    store = Store(str(tmp_path))
    for name in ("fsdp-8gpu.yaml", "deepspeed-zero3-8gpu.yaml"):
        cfg = load_config("tiny", None, [f"store.root={tmp_path}", f"training.accelerate_config={name}"])
        refused = rf"^training.accelerate_config {name}: sharded training .* needs GPUs"
        with pytest.raises(ValueError, match=refused):
            accelerate_command(cfg, "c.yaml", RUN, 1, 0)
        with pytest.raises(ConfigError, match=refused):  # at the run's start, before it writes anything
            bind_run_config(store, "sharded", cfg)
        assert not store.fs.exists(store.config_path("sharded"))


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="FSDP through accelerate needs 2 GPUs (refused on a CPU)")
def test_fsdp_on_two_gpus_makes_the_update_of_one_process(
    frames: dict[str, pd.DataFrame], micro_model_dir: str, tmp_path: Path
) -> None:
    """The check of the CPU equivalence, for sharded training: ``fsdp-8gpu.yaml`` on 2 GPUs in fp32 against
    one unsharded process on one GPU."""
    config = (data_dir("accelerate") / "fsdp-8gpu.yaml").read_text()
    fsdp = tmp_path / "fsdp-2gpu.yaml"
    fsdp.write_text(
        config.replace("num_processes: 8", "num_processes: 2").replace("mixed_precision: bf16", "mixed_precision: 'no'")
    )
    updates = {}
    for processes, accelerate in ((1, None), (2, str(fsdp))):
        root = tmp_path / f"p{processes}"
        updates[processes] = _update(root, frames, micro_model_dir, "grpo", accelerate, ["model.device=cuda"])
    one, two = updates[1], updates[2]
    assert two.summary.processes == 2
    assert max_relative_difference(one.weights, two.weights) <= 1e-5
    assert one.summary.loss_mean == pytest.approx(two.summary.loss_mean, rel=1e-5, abs=1e-7)
