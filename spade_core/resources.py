"""The bundled files: config presets, seed environments and accelerate configs (package ``spade_data``).

The repository keeps them in the top-level ``data/`` directory, which installs as the package
``spade_data`` (``pyproject.toml`` maps the name onto the directory), so a regular ``pip install .`` and an
editable install find them the same way, from any working directory.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path

DATA_PACKAGE = "spade_data"
KINDS = ("configs", "seed_envs", "starter_envs", "accelerate")


def data_dir(kind: str) -> Path:
    """The directory of one kind of bundled file: ``configs``, ``seed_envs`` or ``accelerate``.

    Raises:
        ValueError: ``kind`` is not one of :data:`KINDS`.
        FileNotFoundError: the package is zipped or lacks the directory (a broken install).

    >>> sorted(p.name for p in data_dir("configs").glob("tiny.yaml"))
    ['tiny.yaml']
    """
    if kind not in KINDS:
        raise ValueError(f"bundled data kind {kind!r} is unknown; kinds: {', '.join(KINDS)}")
    root = files(DATA_PACKAGE)
    if not isinstance(root, Path):
        raise FileNotFoundError(f"package {DATA_PACKAGE!r} is not installed as plain files ({root!r}); reinstall spade")
    directory = root / kind
    if not directory.is_dir():
        raise FileNotFoundError(f"bundled data directory {str(directory)!r} is missing; reinstall spade")
    return directory


def parents_dir(folder: str) -> Path:
    """The folder a ``designer.parents`` value names: an absolute path as it is, a name (``[a-z0-9_]+``) as
    that folder of the bundled seed environments.

    Raises:
        ValueError: ``folder`` is neither.

    >>> parents_dir("difficulty") == data_dir("seed_envs") / "difficulty", parents_dir("/tmp/p")
    (True, PosixPath('/tmp/p'))
    """
    if Path(folder).is_absolute():
        return Path(folder)
    if re.fullmatch(r"[a-z0-9_]+", folder):
        return data_dir("seed_envs") / folder
    raise ValueError(f"{folder!r} is neither a folder name of data/seed_envs ([a-z0-9_]+) nor an absolute path")
