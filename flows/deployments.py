"""The deployments ``spade serve`` serves, read from ``prefect.yaml``: the file a ``prefect deploy`` reads is
the one list of names, descriptions, entrypoints and default parameters (docs/operations.md)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import yaml

PREFECT_YAML = Path(__file__).resolve().parents[1] / "prefect.yaml"


def deployment_specs(path: Path = PREFECT_YAML) -> list[dict[str, Any]]:
    """The ``deployments`` entries of ``prefect.yaml`` (anchors and merge keys resolved)."""
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: `spade serve` runs from a checkout of the repository")
    return list(yaml.safe_load(path.read_text())["deployments"])


def flow_at(entrypoint: str) -> Any:
    """The flow object of an entrypoint ``flows/spade.py:spade``."""
    file, _, name = entrypoint.partition(":")
    return getattr(importlib.import_module(file.removesuffix(".py").replace("/", ".")), name)


def runner_deployments(path: Path = PREFECT_YAML) -> list[Any]:
    """One Prefect ``RunnerDeployment`` per deployment of ``prefect.yaml``, to serve from this process."""
    return [
        flow_at(spec["entrypoint"]).to_deployment(
            name=spec["name"], description=spec.get("description"), parameters=spec.get("parameters") or {}
        )
        for spec in deployment_specs(path)
    ]
