"""Local cache entries built once: the one file-lock + atomic-rename helper of the project.

The converted embedded model, the embedded corpus as Parquet, downloaded checkpoints and merged LoRA
models are built on first use under ``$SPADE_CACHE``. Several processes may want the same entry at once
(a Prefect worker, a Dask worker, the training subprocess): one builds it under a :class:`filelock.FileLock`
beside the entry, into a hidden temp path renamed into place, and the others wait and reuse it. A crash
mid-build leaves only the temp path, which the next build replaces.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock


class CacheBuildError(RuntimeError):
    """A build function that returned without producing a usable entry; the message names the entry."""


def lock_path(target: Path) -> Path:
    """The lock file of ``target``: ``.{name}.lock`` in the same directory."""
    return target.with_name(f".{target.name}.lock")


def build_once(target: Path, build: Callable[[Path], object], *, ready: Callable[[Path], bool] | None = None) -> Path:
    """Return ``target``, building it first if it is not ready (one process at a time).

    Args:
        target: The cache entry (a file or a directory).
        build: Writes the entry at the path it is given (a fresh temp path beside ``target``, which does not
            exist yet); it may create a file or a directory there.
        ready: Whether an existing entry is complete and current (default: it exists). An entry that exists
            but is not ready is replaced.

    Returns:
        ``target``.

    Raises:
        CacheBuildError: ``build`` returned but the entry is still not ready.
    """
    is_ready = ready or Path.exists
    if is_ready(target):
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(lock_path(target))):
        if is_ready(target):  # another process built it while this one waited
            return target
        tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        try:
            build(tmp)
            if not tmp.exists():
                raise CacheBuildError(f"building cache entry {str(target)!r} wrote nothing")
            _remove(target)
            os.replace(tmp, target)
        finally:
            _remove(tmp)
        if not is_ready(target):
            raise CacheBuildError(f"cache entry {str(target)!r} is incomplete after its build")
    return target


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
