"""Which GPUs generation and the trainer use (``orchestration.generation_devices`` / ``training_devices``,
docs/DESIGN.md §10): indices into the devices this process may use (its ``CUDA_VISIBLE_DEVICES``, unset: the
machine's). Nothing here changes the running process: a subprocess (the vLLM server, the trainer) gets its
``CUDA_VISIBLE_DEVICES`` in its own environment, and an in-process model is placed on ``cuda:i``."""

from __future__ import annotations

import os
from typing import Any


def visible_devices(devices: list[int] | None, visible: str | None = None) -> str | None:
    """``CUDA_VISIBLE_DEVICES`` for a process that should see ``devices`` (indices into ``visible``, the
    caller's own ``CUDA_VISIBLE_DEVICES``; unset: the machine's devices). None: leave it as it is.

    >>> visible_devices([2, 3]), visible_devices([1], "4,5,6"), visible_devices(None, "0") is None
    ('2,3', '5', True)
    >>> visible_devices([3], "4,5")
    Traceback (most recent call last):
    ...
    ValueError: device index 3 is out of range: CUDA_VISIBLE_DEVICES='4,5' has 2 devices
    """
    if devices is None:
        return None
    if visible is None or not visible.strip():
        return ",".join(str(d) for d in devices)
    ids = [x.strip() for x in visible.split(",") if x.strip()]
    for d in devices:
        if d >= len(ids):
            raise ValueError(
                f"device index {d} is out of range: CUDA_VISIBLE_DEVICES={visible!r} has {len(ids)} devices"
            )
    return ",".join(ids[d] for d in devices)


def subprocess_env(devices: list[int] | None) -> dict[str, str]:
    """The environment entries of a subprocess that should see ``devices`` (empty: it sees what this one does)."""
    value = visible_devices(devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
    return {} if value is None else {"CUDA_VISIBLE_DEVICES": value}


def training_env(cfg: Any) -> dict[str, str]:
    """Environment entries of the trainer subprocess: its devices when they are split from generation's."""
    return subprocess_env(cfg.orchestration.training_devices)


def in_process_device(device: str, devices: list[int] | None) -> str:
    """The torch device of an in-process model on ``devices``: ``cuda:i`` for the first of them when the
    model is on a GPU, else ``device`` unchanged.

    >>> in_process_device("cuda", [2, 3]), in_process_device("cuda", None), in_process_device("cpu", [1])
    ('cuda:2', 'cuda', 'cpu')
    """
    return f"cuda:{devices[0]}" if devices and device == "cuda" else device


def visible_gpu_count() -> int:
    """How many GPUs this process sees (0 without CUDA)."""
    import torch  # only where GPUs are counted

    return torch.cuda.device_count() if torch.cuda.is_available() else 0
