"""The device check (``benchmarks/device_check.sh``): where no GPU is present it says so in one line and
exits 0; its checks themselves run here on the CPU (``--device cpu``, a two-layer cut of the tiny model) on
a bundle made as ``make device-bundle`` makes one, so the script a GPU session runs is known to work."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "benchmarks"


def load(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_a_gpu_the_device_check_says_so_and_exits_0() -> None:
    env = {**os.environ, "PYTHON": sys.executable}
    done = subprocess.run([str(BENCH / "device_check.sh")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines() == [
        f"device check: no GPU here (torch sees no CUDA device, or {sys.executable} has no torch): nothing to check"
    ]


@pytest.mark.slow
@pytest.mark.usefixtures("jail_processes_checked")
def test_the_device_checks_run_on_the_cpu_on_a_bundle_made_here(tmp_path: Path) -> None:
    bundle = load("device_bundle")
    bench = load("train_step")
    bundle.copy_model(tmp_path / "model")
    from spade_core.store.artifacts import Store

    assert bench.stored_generation(Store(str(tmp_path / "store")), envs=2, plays=2, turns=2, tokens=16) == 4
    done = subprocess.run(
        [sys.executable, str(BENCH / "device_check.py"), "--bundle", str(tmp_path), "--device", "cpu", "--layers", "2"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    assert [line.split()[:2] for line in lines[:4]] == [["ok", n] for n in ("gpu", "model", "generate", "grpo-step")]
    assert lines[-1] == "device check: 4 of 4 checks passed"
