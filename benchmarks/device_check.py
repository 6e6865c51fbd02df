"""The GPU paths a CPU machine cannot run, checked in one short script (run by ``benchmarks/device_check.sh``,
≤ 10 minutes on one GPU). One line per check — ``ok``, ``FAIL`` (with the error's last line) or ``skip``
(a check it depends on failed) — and the exit status is the number of failures:

- ``gpu``: the device torch sees;
- ``model``: the tiny model's architecture and tokenizer with random weights in the check's dtype (its own
  94 MB of weights do not travel to an offline machine with the bundle; the computation is the same);
- ``generate``: the transformers backend generating on the device: seeded, with log-probs;
- ``grpo-step``: one GRPO step of the project's trainer, launched as the pipeline launches it (``accelerate
  launch``, on a GPU with ``data/accelerate/single-gpu.yaml``, bf16) on a stored generation the bundle carries
  (no-hint plays of the tiny model, played through the jail on the machine that made the bundle).

The bundle is made by ``benchmarks/device_bundle.py`` (``make device-bundle``). ``--device cpu`` runs the same
checks on a CPU (fp32, no accelerate config), which is how the test suite keeps this script working.

    python3 benchmarks/device_check.py [--bundle .device] [--device cuda|cpu] [--layers N]
"""

from __future__ import annotations

import os
import sys

# benchmarks/sandbox.py is named like the `sandbox` package: drop this directory from the import path.
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != os.path.dirname(os.path.abspath(__file__))]

import argparse
import json
import math
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

RUN = "bench"  # the run id of the bundle's stored generation (benchmarks/train_step.py's)


def last_line(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()
    return (text[-1] if text else type(exc).__name__)[:300]


class Checks:
    """Runs checks in order; a check whose dependency failed is skipped."""

    def __init__(self) -> None:
        self.failed: set[str] = set()
        self.results: dict[str, Any] = {}

    def run(self, name: str, check: Callable[[], tuple[Any, str]], needs: tuple[str, ...] = ()) -> None:
        if missing := [n for n in needs if n in self.failed or n not in self.results]:
            print(f"skip {name:<10} (needs {', '.join(missing)})", flush=True)
            self.failed.add(name)
            return
        started = time.perf_counter()
        try:
            result, detail = check()
        except Exception as exc:  # one line per check: the error's own
            print(f"FAIL {name:<10} {last_line(exc)}", flush=True)
            self.failed.add(name)
            return
        self.results[name] = result
        print(f"ok   {name:<10} {detail} ({time.perf_counter() - started:.1f} s)", flush=True)


def check_gpu(device: str) -> tuple[str, str]:
    import torch

    if device == "cpu":
        return "cpu", f"cpu (torch {torch.__version__}, no GPU asked for)"
    if not torch.cuda.is_available():
        raise RuntimeError("torch sees no CUDA device")
    props = torch.cuda.get_device_properties(0)
    return "cuda", f"{props.name}, {props.total_memory / 2**30:.0f} GiB (torch {torch.__version__})"


def check_model(bundle: Path, work: Path, dtype: str, layers: int | None) -> tuple[str, str]:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    source = bundle / "model"
    config = AutoConfig.from_pretrained(source)
    if layers is not None:
        config.num_hidden_layers = layers
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    out = work / "model"
    model.save_pretrained(out)
    for entry in source.iterdir():
        if entry.is_file() and not (out / entry.name).exists():
            shutil.copy(entry, out / entry.name)
    params = sum(p.numel() for p in model.parameters())
    return str(out), f"{config.model_type}, {config.num_hidden_layers} layers, {params / 1e6:.0f}M parameters, {dtype}"


def check_generate(model_dir: str, device: str, dtype: str) -> tuple[None, str]:
    from spade_core.llm.base import GenerationRequest, SamplingParams
    from spade_core.llm.hf import TransformersGenerator

    generator = TransformersGenerator(model_dir, device=device, dtype=dtype, batch_size=8)
    try:
        asks = [GenerationRequest(messages=[{"role": "user", "content": f"Count to {i + 3}."}]) for i in range(8)]
        params = SamplingParams(temperature=1.0, max_new_tokens=32, seed=0, logprobs=True)
        started = time.perf_counter()
        out = generator.generate(asks, params)
        seconds = time.perf_counter() - started
    finally:
        generator.close()
    errors = [c.error for c in out if c.error]
    if errors:
        raise RuntimeError(f"{len(errors)} of 8 requests failed: {errors[0]}")
    tokens = sum(len(c.token_ids) for c in out)
    if any(c.logprobs is None or len(c.logprobs) != len(c.token_ids) for c in out):
        raise RuntimeError("a completion's log-probs do not match its tokens")
    if not all(math.isfinite(x) and x <= 0 for c in out for x in c.logprobs or []):
        raise RuntimeError("a log-prob is not finite or above 0")
    return None, f"8 seeded requests, {tokens} tokens with log-probs, {tokens / seconds:.0f} tok/s on {device}"


def check_grpo_step(bundle: Path, work: Path, model_dir: str, device: str, dtype: str) -> tuple[None, str]:
    from spade_core.config import load_config
    from spade_core.store.artifacts import Store
    from spade_core.store.checkpoints import checkpoint_complete
    from spade_core.train.launch import launch_training

    root = work / "store"
    shutil.copytree(bundle / "store", root)
    overrides = [
        f"store.root={root}",
        f"model.name_or_path={model_dir}",
        "model.backend=transformers",
        f"model.device={device}",
        f"model.dtype={dtype}",
        "training.lora=false",
    ]
    if device == "cuda":
        overrides.append("training.accelerate_config=single-gpu.yaml")
    cfg = load_config("tiny", None, overrides)
    store = Store(str(root))
    summary = launch_training(cfg, store, RUN, 1, 0)
    if summary.skipped_reason or not checkpoint_complete(store, RUN, 1):
        raise RuntimeError(f"no checkpoint 1: {summary.skipped_reason or summary.line()}")
    metrics = store.read_table("train_metrics", run_id=RUN, gen=1)
    seconds = [float(s) for s in metrics["step_seconds"].dropna()]
    if not seconds or not all(math.isfinite(float(x)) for x in metrics["loss"].dropna()):
        raise RuntimeError(f"the step logged no time or a loss that is not finite: {metrics.to_dict('records')}")
    how = "single-gpu.yaml, bf16" if device == "cuda" else "one CPU process"
    return None, f"{summary.line()}; {seconds[0]:.1f} s for the step ({how})"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bundle", default=".device", help="the directory benchmarks/device_bundle.py made")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--layers", type=int, default=None, help="fewer layers than the tiny model (a CPU test)")
    parser.add_argument("--json", default=None, help="also write the results here")
    args = parser.parse_args(argv)
    bundle = Path(args.bundle)
    if not (bundle / "model" / "config.json").is_file() or not (bundle / "store").is_dir():
        print(f"FAIL bundle     {bundle} has no model/config.json or store/: make device-bundle", flush=True)
        return 1
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    checks = Checks()
    with tempfile.TemporaryDirectory(prefix="spade-device-check-") as tmp:
        work = Path(tmp)
        checks.run("gpu", lambda: check_gpu(args.device))
        checks.run("model", lambda: check_model(bundle, work, dtype, args.layers), needs=("gpu",))
        model_dir = lambda: str(checks.results["model"])  # noqa: E731 (read once the model check has run)
        checks.run("generate", lambda: check_generate(model_dir(), args.device, dtype), needs=("model",))
        checks.run(
            "grpo-step", lambda: check_grpo_step(bundle, work, model_dir(), args.device, dtype), needs=("model",)
        )
    if args.json:
        Path(args.json).write_text(json.dumps({"failed": sorted(checks.failed), "device": args.device}))
    print(f"device check: {4 - len(checks.failed)} of 4 checks passed", flush=True)
    return len(checks.failed)


if __name__ == "__main__":
    sys.exit(main())
