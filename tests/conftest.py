"""Shared fixtures: configs, local and S3 stores (moto's real HTTP server on loopback), CLI runner."""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

# Test processes load torch like the entry points do: OpenMP waits sleep (docs/DESIGN.md §8, "CPU threads").
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

FIXTURES = Path(__file__).parent / "fixtures"
S3_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing-secret-do-not-leak",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Files with end-to-end (``slow``) tests first, each file's tests in their order. ``make test`` runs
    ``-n 2 --dist loadfile --no-loadscope-reorder``, which hands out whole files in this order: a long file
    handed out last keeps one worker busy while the other idles; handed out first, the short files fill in
    around it."""
    slow_files = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow_files)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """A real S3 HTTP endpoint (moto's server) on 127.0.0.1, with fake credentials in the environment."""
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in S3_ENV}
    os.environ.update(S3_ENV)
    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture
def s3_bucket(s3_endpoint: str) -> str:
    """A fresh bucket on the loopback S3 endpoint; returns its s3:// root."""
    import boto3

    name = f"spade-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=s3_endpoint).create_bucket(Bucket=name)
    return f"s3://{name}/store"


def _ancestors(pid: int) -> set[int]:
    """The parent chain of ``pid`` (empty once a process is gone)."""
    chain: set[int] = set()
    while pid > 1 and pid not in chain:
        chain.add(pid)
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            break
        pid = int(stat.rsplit(")", 1)[1].split()[1])
    return chain


def _our_jailed_processes() -> list[str]:
    """Jailed (uid 65534) processes started by this test process, or orphaned: not another session's jails."""
    out = subprocess.run(["ps", "-u", "65534", "-o", "pid=,ppid=,comm="], capture_output=True, text=True).stdout
    ours = []
    for line in out.strip().splitlines():
        pid, ppid, comm = line.split(None, 2)
        if int(ppid) == 1 or os.getpid() in _ancestors(int(pid)):
            ours.append(f"{pid} {comm}")
    return ours


@pytest.fixture
def jail_processes_checked() -> Iterator[None]:
    """Fail a test that leaves a jailed (uid 65534) process of its own behind (other test runs on the machine
    are not this test's business)."""
    yield
    deadline = time.monotonic() + 5.0  # a jail being torn down may take a moment to go
    while (left := _our_jailed_processes()) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert left == [], f"jailed processes left behind: {left}"


@pytest.fixture(scope="session")
def tiny_model_dir() -> str:
    """The embedded SmolLM2-135M-Instruct, converted once into the local cache."""
    from spade_core.llm.embedded import embedded_model_dir

    return str(embedded_model_dir())


@pytest.fixture(scope="session")
def micro_model_dir(tiny_model_dir: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A two-layer, 64-wide Llama with the tiny model's tokenizer and chat template, randomly initialised
    (seed 0): a real model the trainer updates in seconds, for tests of the trainer's mechanics (optimizer
    carried, importance weights, LoRA, checkpoints). A full checkpoint of it (weights and AdamW state) is
    ~40 MB where the tiny model's is ~1.6 GB: three of those filled a CI machine's disk. The tiny model
    itself is trained with LoRA by the Prefect deployment test, fully by `make demo` and the learning
    benchmark."""
    import shutil

    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    out = tmp_path_factory.mktemp("micro-model")
    config = AutoConfig.from_pretrained(tiny_model_dir)
    config.update(
        {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4}
        | {"num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 2048}
    )
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(out)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (Path(tiny_model_dir) / name).is_file():
            shutil.copy(Path(tiny_model_dir) / name, out / name)
    return str(out)


@pytest.fixture(scope="session")
def micro_generator(micro_model_dir: str):  # type: ignore[no-untyped-def]
    """The transformers backend on the micro model (CPU), loaded once per session: for tests of what the
    pipeline does with a model's replies, not of what a model writes (it writes noise, in milliseconds)."""
    from spade_core.llm.hf import TransformersGenerator

    generator = TransformersGenerator(micro_model_dir, device="cpu", dtype="float32", batch_size=16)
    yield generator
    generator.close()


@pytest.fixture(scope="session")
def tiny_generator(tiny_model_dir: str):  # type: ignore[no-untyped-def]
    """The transformers backend on the tiny model (CPU), loaded once per session."""
    from spade_core.llm.hf import TransformersGenerator

    generator = TransformersGenerator(tiny_model_dir, device="cpu", dtype="float32", batch_size=16)
    yield generator
    generator.close()
