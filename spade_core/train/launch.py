"""Run one optimizer step as ``accelerate launch -m spade_core.train.step`` (docs/DESIGN.md §7, §10); a
one-process update starts the trainer directly, with the command and environment accelerate would give it
(:func:`direct_launch`).

Training is a subprocess of the pipeline so one setting, ``training.accelerate_config`` (a file under
``data/accelerate/``), moves it from the CPU to one GPU to several GPUs (DDP, FSDP, DeepSpeed) without
code changes. The child reads the step's samples from the store and writes checkpoint ``s + 1`` (weights,
optimizer and scheduler state, marker last) and the ``train_metrics`` and ``train_samples`` tables; the
parent reads the result back from the checkpoint's marker, so a step can also be redone or moved to
another machine with ``spade train --run-id R --gen G --step K``.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from spade_core.config import ConfigError
from spade_core.devices import training_env
from spade_core.faults import SaidFault
from spade_core.llm.embedded import cache_dir
from spade_core.resources import data_dir
from spade_core.steps import global_step
from spade_core.store.artifacts import Store
from spade_core.store.checkpoints import read_marker
from spade_core.train.grpo import trains_on_cpu

ACCELERATE_DIR = data_dir("accelerate")


class TrainingError(SaidFault):
    """The training subprocess failed: one line naming the step, the cause (:func:`failure_cause`) and the
    file that holds its whole output; raised from an ``OSError`` when the cause is one (a full disk is
    permanent: not retried)."""


_EXCEPTION_LINE = re.compile(r"^(?:[\w.]+\.)?(?P<name>\w*(?:Error|Exception|Exit|Interrupt))(?::\s*(?P<text>.*))?$")
_ERRNO = re.compile(r"^\[Errno (?P<errno>\d+)\] (?P<strerror>[^:]+)(?::\s*'(?P<filename>[^']*)')?")
_SIGNAL = re.compile(r"Signals\.(?P<name>SIG[A-Z]+)|signal (?P<num>\d+)|exitcode\s*:\s*-(?P<neg>\d+)")


def failure_cause(code: int, lines: list[str]) -> tuple[str, OSError | None]:
    """Why the trainer exited with ``code``, in one line, from its output's ``lines``: the signal that killed
    it, else the last exception line (never a warning's), else its last line; and the ``OSError`` the cause
    is, if it is one.

    >>> failure_cause(1, ["FutureWarning: x is deprecated", "OSError: [Errno 28] No space left on device: '/s/a'"])
    ("OSError: [Errno 28] No space left on device: '/s/a'", OSError(28, 'No space left on device'))
    >>> failure_cause(1, ["...", "ChildFailedError: died with <Signals.SIGKILL: 9>", "UserWarning: late"])[0]
    'the trainer was killed by SIGKILL'
    >>> failure_cause(-9, [])[0]
    'the trainer was killed by SIGKILL'
    """
    if code < 0:
        return f"the trainer was killed by {_signal_name(-code)}", None
    for line in reversed(lines):
        found = _SIGNAL.search(line)
        if found and ("died" in line or "signal" in line.lower()):
            name = found["name"] or _signal_name(int(found["num"] or found["neg"]))
            return f"the trainer was killed by {name}", None
    for line in reversed(lines):
        match = _EXCEPTION_LINE.match(line.strip())
        if match and "Warning" not in match["name"]:
            errno_match = _ERRNO.match(match["text"] or "")
            error = None
            if match["name"] in ("OSError", "IOError", "PermissionError") and errno_match:
                error = OSError(int(errno_match["errno"]), errno_match["strerror"].strip())
                error.filename = errno_match["filename"]
            return line.strip()[:300], error
    rest = [line.strip() for line in lines if line.strip() and "Warning" not in line]
    return (rest[-1][:300] if rest else f"exit code {code}"), None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def training_log(run_id: str, gen: int, step: int) -> Path:
    """Where the whole output of one update's trainer goes: ``<cache>/logs/<run_id>/train-g<gen>-s<step>.log``."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)
    return cache_dir() / "logs" / safe / f"train-g{gen}-s{step}.log"


@dataclass
class TrainSummary:
    """What one optimizer step did (also stored in the checkpoint's marker)."""

    run_id: str
    gen: int
    checkpoint: str | None
    step: int = 0  # the global step: trains checkpoint ``step``, writes checkpoint ``step + 1``
    kind: str | None = None  # full | lora | unchanged (see spade_core.store.checkpoints.KINDS)
    steps: int = 0  # optimizer steps taken (1, or 0 when nothing was trained)
    agent_samples: int = 0  # samples in the update: those left out (dropped_samples) are not counted
    designer_samples: int = 0
    zero_variance_groups: int = 0
    padded_samples: int = 0  # zero-mask copies that fill the last micro-batch
    trimmed_samples: int = 0  # agent samples cut to fit training.global_batch_size (the designer's come first)
    duplicated_samples: int = 0  # repeats of real plays that fill the batch (training.batch_fill: duplicate)
    dropped_samples: int = 0  # advantage 0, left out of the update (training.drop_zero_advantage)
    skipped_episodes: int = 0
    tokens_trained: int = 0
    loss_mean: float | None = None
    grad_norm: float | None = None  # the gradient norm of the optimizer step (before clipping)
    weight_delta: float | None = None  # L2 norm of the update over the trained parameters
    weight_delta_relative: float | None = None  # weight_delta / L2 norm of those parameters before the step
    seconds: float = 0.0
    skipped_reason: str | None = None
    processes: int = 1  # training processes of the update (accelerate's num_processes)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainSummary:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line for logs and the CLI."""
        if self.kind == "unchanged" or self.checkpoint is None:
            return f"gen {self.gen} step {self.step}: no update ({self.skipped_reason})"
        loss = "n/a" if self.loss_mean is None else f"{self.loss_mean:.4f}"
        moved = ""
        dropped = f"; {self.dropped_samples} samples with advantage 0 left out" if self.dropped_samples else ""
        if self.grad_norm is not None:
            moved += f", grad norm {self.grad_norm:.3g}"
        if self.weight_delta is not None and self.weight_delta_relative is not None:
            moved += f", weights moved {self.weight_delta:.3g} (L2, {self.weight_delta_relative:.2e} relative)"
        return (
            f"gen {self.gen} step {self.step}: {self.agent_samples} agent + {self.designer_samples} designer "
            f"samples ({self.zero_variance_groups} groups with zero reward variance{dropped}), "
            f"{self.tokens_trained} tokens, "
            f"loss {loss}{moved}, {self.seconds:.1f}s -> {self.checkpoint} ({self.kind})"
        )


def accelerate_config_path(name: str | None) -> Path | None:
    """The accelerate config file of ``training.accelerate_config`` (a name under data/accelerate/ or a path)."""
    if not name:
        return None
    candidates = [Path(name).expanduser(), ACCELERATE_DIR / name]
    for path in candidates:
        if path.is_file():
            return path
    available = ", ".join(sorted(p.name for p in ACCELERATE_DIR.glob("*.yaml")))
    raise FileNotFoundError(f"training.accelerate_config {name!r} not found; files in data/accelerate/: {available}")


def accelerate_settings(path: Path) -> Any:
    """The accelerate config file at ``path`` as accelerate itself reads it (its ``ClusterConfig``:
    ``distributed_type``, ``num_processes``, ``mixed_precision``, ``fsdp_config``, ``use_cpu``, ...)."""
    from accelerate.commands.config.config_args import load_config_from_file

    return load_config_from_file(str(path))


def needs_torchrun(distributed_type: str, num_processes: int, mpirun_hostfile: str | None) -> bool:
    """Whether ``accelerate launch`` must be told ``--multi_gpu`` to start ``num_processes`` processes.

    accelerate starts several processes through torchrun (its ``multi_gpu_launcher``) for every multi-device
    type but ``MULTI_CPU``, which it hands to its ``simple_launcher``: that one starts ``mpirun`` when the
    config names an ``mpirun_hostfile`` and otherwise ONE process (accelerate 1.16,
    ``accelerate/commands/launch.py:launch_command``, ``accelerate/utils/launch.py:
    prepare_simple_launcher_cmd_env``). ``--multi_gpu`` selects the torchrun launcher; on a CPU each process
    then joins a gloo group as ``MULTI_CPU`` because it builds its ``PartialState(cpu=True)``.

    >>> needs_torchrun("MULTI_CPU", 2, None), needs_torchrun("MULTI_CPU", 2, "hosts"), needs_torchrun("NO", 1, None)
    (True, False, False)
    """
    return str(distributed_type).split(".")[-1] == "MULTI_CPU" and num_processes > 1 and not mpirun_hostfile


def unsharded_on_cpu(distributed_type: str, on_gpu: bool) -> str | None:
    """Why a sharded config (FSDP, DeepSpeed) cannot train here, or None.

    accelerate 1.16 turns its FSDP plugin on only for the multi-accelerator types (``AcceleratorState.__init__``
    switches ``MULTI_GPU``, ``MULTI_XPU``, ``MULTI_NPU``, ... to ``FSDP``; ``MULTI_CPU`` is not among them), so
    an FSDP config on the CPU would train as plain data parallel without a word, and its DeepSpeed launcher
    needs GPUs: the launch is refused instead.

    >>> unsharded_on_cpu("FSDP", False)[:36], unsharded_on_cpu("FSDP", True), unsharded_on_cpu("NO", False)
    ('sharded training (FSDP) needs GPUs: ', None, None)
    """
    kind = str(distributed_type).split(".")[-1]
    if kind not in ("FSDP", "DEEPSPEED") or on_gpu:
        return None
    return (
        f"sharded training ({kind}) needs GPUs: accelerate enables it only for multi-accelerator types, "
        "on the CPU it would run unsharded (use cpu-ddp2.yaml for several CPU processes)"
    )


def launcher_args(cfg: Any) -> list[str]:
    """The options of ``accelerate launch`` for the run's ``training.accelerate_config`` (none: one process,
    on the CPU without mixed precision).

    Raises:
        FileNotFoundError: the named file does not exist.
        ValueError: it shards the model (FSDP, DeepSpeed) and the update would run on the CPU.
    """
    on_gpu = not trains_on_cpu(cfg)
    acc = accelerate_config_path(cfg.training.accelerate_config)
    if acc is None:
        args = ["--num_processes", "1", "--num_machines", "1", "--dynamo_backend", "no"]
        args += ["--mixed_precision", "bf16" if on_gpu and cfg.training.bf16 else "no"]
        return args if on_gpu else [*args, "--cpu"]
    args = ["--config_file", str(acc)]
    settings = accelerate_settings(acc)
    processes = settings.num_processes
    if cfg.orchestration.training_devices is not None:  # one process per training device
        processes = len(cfg.orchestration.training_devices)
        args += ["--num_processes", str(processes)]
    if needs_torchrun(settings.distributed_type, processes, getattr(settings, "mpirun_hostfile", None)):
        args += ["--multi_gpu"]
    reason = unsharded_on_cpu(settings.distributed_type, on_gpu and not settings.use_cpu)
    if reason is not None:
        raise ValueError(f"training.accelerate_config {acc.name}: {reason}")
    return args


def check_accelerate_config(cfg: Any) -> None:
    """At the start of a run that trains: the launch options of ``training.accelerate_config`` can be made
    (:func:`launcher_args`), so a missing file or a sharded config on a CPU stops the run before it writes,
    not at its first update.

    Raises:
        ConfigError: one line naming the setting.
    """
    if cfg.training.enabled and cfg.training.accelerate_config is not None:
        try:
            launcher_args(cfg)
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError(str(exc)) from None


def accelerate_command(cfg: Any, config_file: str, run_id: str, gen: int, step: int) -> list[str]:
    """The ``accelerate launch`` command line of one update (:func:`launcher_args`)."""
    launch = [sys.executable, "-m", "accelerate.commands.launch", *launcher_args(cfg)]
    return [*launch, *_step_script(config_file, run_id, gen, step)]


def _step_script(config_file: str, run_id: str, gen: int, step: int) -> list[str]:
    args = ["--run-id", run_id, "--gen", str(gen), "--step", str(step), "--config", config_file]
    return ["-m", "spade_core.train.step", *args]


def direct_launch(
    cfg: Any, config_file: str, run_id: str, gen: int, step: int
) -> tuple[list[str], dict[str, str], str] | None:
    """The trainer's own command and the environment ``accelerate launch`` would give it, for a launch that
    accelerate hands to its simple launcher (one process: no torchrun, DeepSpeed, FSDP, TPU or mpirun), so
    the trainer starts as the pipeline's child without accelerate's launcher process between them; None for
    every other launch, which goes through ``accelerate launch`` (:func:`accelerate_command`).

    The command and environment are accelerate's (its parser, its checks and its
    ``prepare_simple_launcher_cmd_env``), so the trainer starts as it would under ``accelerate launch``;
    the launcher process it saves cost 0.5 GB of RSS and its own import of torch at every update here.
    Returned: the command, the environment entries accelerate adds or changes, and what its checks printed
    (its notes on the defaults it took, which ``accelerate launch`` writes into the trainer's log).
    """
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser
    from accelerate.utils.launch import prepare_simple_launcher_cmd_env

    args = launch_command_parser().parse_args([*launcher_args(cfg), *_step_script(config_file, run_id, gen, step)])
    with contextlib.redirect_stdout(io.StringIO()) as said:  # its notes on defaults: the trainer's log keeps them
        args, _, _ = _validate_launch_command(args)
    routed = (args.use_deepspeed, args.use_fsdp, args.use_megatron_lm, args.multi_gpu, args.tpu)
    if any(routed) or args.mpirun_hostfile is not None or (args.num_processes or 1) > 1:
        return None
    cmd, env = prepare_simple_launcher_cmd_env(args)
    return cmd, {key: value for key, value in env.items() if os.environ.get(key) != value}, said.getvalue()


def accelerate_env(cfg: Any) -> dict[str, str]:
    """Environment entries the named accelerate config needs beyond what ``accelerate launch`` sets:
    ``ACCELERATE_USE_CPU=true`` for a CPU config, which the torchrun launcher does not pass on
    (:func:`needs_torchrun`); the trainer reads it to build its state on the CPU."""
    acc = accelerate_config_path(cfg.training.accelerate_config)
    if acc is None or not accelerate_settings(acc).use_cpu:
        return {}
    return {"ACCELERATE_USE_CPU": "true"}


def launch_training(
    cfg: Any, store: Store, run_id: str, gen: int, step: int = 0, echo: Callable[[str], None] | None = None
) -> TrainSummary:
    """Train step ``step`` (0..K-1) of generation ``gen`` in an ``accelerate launch`` subprocess and return
    its summary (the global step is ``(gen - 1) · K + step``).

    A no-op (``skipped_reason`` set, no checkpoint) when ``training.enabled`` is false.

    Raises:
        TrainingError: the subprocess exited non-zero: one line naming the step and the cause; its whole
            output is in :func:`training_log`.
    """
    if not cfg.training.enabled:
        return TrainSummary(run_id, gen, None, global_step(cfg, gen, step), skipped_reason="training.enabled is false")
    started = time.perf_counter()
    tail: deque[str] = deque(maxlen=200)
    log = training_log(run_id, gen, step)
    log.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="spade-train-") as tmp:
        config_file = os.path.join(tmp, "config.yaml")  # every process of the launch reads it
        Path(config_file).write_text(cfg.to_yaml())
        direct = direct_launch(cfg, config_file, run_id, gen, step)
        cmd = accelerate_command(cfg, config_file, run_id, gen, step) if direct is None else direct[0]
        env = {
            **os.environ,
            "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE"),
            "TRL_EXPERIMENTAL_SILENCE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            **training_env(cfg),
            **accelerate_env(cfg),
            **(direct[1] if direct is not None else {}),
        }
        with (
            open(log, "w", encoding="utf-8") as out,
            subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env) as proc,
        ):
            out.write(direct[2] if direct is not None else "")
            for line in proc.stdout or ():
                out.write(line)
                tail.append(line.rstrip())
                if echo is not None:
                    echo(line.rstrip())
            code = proc.wait()
    if code != 0:
        cause, error = failure_cause(code, list(tail))
        line = f"training of run {run_id} gen {gen} step {step} failed: {cause} (its whole output: {log})"
        raise TrainingError(line) from error
    summary = TrainSummary.from_dict(read_marker(store, run_id, global_step(cfg, gen, step) + 1)["summary"])
    summary.seconds = time.perf_counter() - started
    return summary
