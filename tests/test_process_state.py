"""The library keeps no process-wide state of its own making: importing it changes no environment variable,
devices are set in a subprocess's own environment, and model leases and I/O counters belong to objects."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spade_core.config import load_config
from spade_core.devices import in_process_device, subprocess_env, training_env
from spade_core.pipeline.leases import ModelPool, process_pool


def test_importing_every_package_changes_no_environment_variable() -> None:
    # third-party packages set their own (gymnasium: PYGAME_HIDE_SUPPORT_PROMPT): load them first
    probe = (
        "import os, json, gymnasium, pandas, prefect, typer; before = dict(os.environ); "
        "import spade_core, spade_core.cli, spade_core.pipeline.runner, spade_core.pipeline.local, "
        "spade_core.train.launch, spade_core.eval, flows.spade, tasks.stages; "
        "print(json.dumps({k: v for k, v in os.environ.items() if before.get(k) != v}))"
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp"}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == "{}"


def test_devices_go_to_a_subprocess_environment_not_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    cfg = load_config(
        "tiny", overrides=["orchestration.generation_devices=[0]", "orchestration.training_devices=[1,2]"]
    )
    assert training_env(cfg) == {"CUDA_VISIBLE_DEVICES": "5,6"}
    assert subprocess_env(cfg.orchestration.generation_devices) == {"CUDA_VISIBLE_DEVICES": "4"}
    assert subprocess_env(None) == {}
    assert in_process_device("cuda", [1]) == "cuda:1" and in_process_device("cpu", [1]) == "cpu"
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5,6"


def test_each_runner_owns_its_model_pool() -> None:
    one, two = ModelPool(), ModelPool()
    assert one is not two and one.loaded() == [] and one.release() == 0
    assert process_pool() is process_pool()


def test_library_code_assigns_no_environment_variable() -> None:
    """No ``os.environ[...] = ...``, ``del``/``pop`` of one or ``putenv`` in the library: another thread of the
    threads task runner would see it. Entry points (the ``spade`` command, a subprocess's ``main``) set their
    own process's defaults with ``setdefault`` before the library runs; a subprocess gets its variables in
    its own environment (:func:`spade_core.devices.subprocess_env`)."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    assign = re.compile(r"os\.environ\[[^\]]+\]\s*=[^=]|del os\.environ\[|os\.environ\.(pop|update|clear)\(|putenv\(")
    found = [
        f"{path.relative_to(root)}:{number}: {line.strip()}"
        for package in ("spade_core", "sandbox")
        for path in sorted((root / package).rglob("*.py"))
        if "cli" not in path.relative_to(root).parts
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if assign.search(line.split("#", 1)[0])
    ]
    assert not found, "environment variables set by library code:\n" + "\n".join(found)
