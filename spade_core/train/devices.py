"""Which GPUs the generation server and the trainer see (``orchestration.generation_devices`` /
``training_devices``, docs/DESIGN.md §10): indices into the devices this process may use, turned into the
``CUDA_VISIBLE_DEVICES`` value a process needs."""

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


def _machine_visible() -> str | None:
    """This process's devices before :func:`use_generation_devices` narrowed them."""
    if os.environ.get("SPADE_GENERATION_DEVICES_SET") == "1":
        return os.environ.get("SPADE_ORIGINAL_CUDA_VISIBLE_DEVICES") or None
    return os.environ.get("CUDA_VISIBLE_DEVICES")


def training_env(cfg: Any) -> dict[str, str]:
    """Environment entries of the trainer subprocess: its devices when they are split from generation's."""
    value = visible_devices(cfg.orchestration.training_devices, _machine_visible())
    return {} if value is None else {"CUDA_VISIBLE_DEVICES": value}


def use_generation_devices(cfg: Any) -> None:
    """Narrow this process (the flow's, which hosts the generation server) to the generation devices, once,
    before CUDA is initialised; a no-op when none are set or it was already done."""
    devices = cfg.orchestration.generation_devices
    if devices is None or os.environ.get("SPADE_GENERATION_DEVICES_SET") == "1":
        return
    value = visible_devices(devices, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if value is not None:
        os.environ["SPADE_ORIGINAL_CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        os.environ["CUDA_VISIBLE_DEVICES"] = value
        os.environ["SPADE_GENERATION_DEVICES_SET"] = "1"
