"""Where Prefect persists task results: ``{store}/prefect-results`` (DESIGN.md §4, §10).

A local store gets a :class:`pathlib.Path` (a plain string would be read as a block slug). An S3 store
gets a ``RemoteFileSystem`` block on ``s3://.../prefect-results``, saved under a name derived from the
store URL so that every process (a worker, a Dask worker, a resumed run) finds the same one; the
endpoint comes from ``store.endpoint_url`` / ``AWS_ENDPOINT_URL`` and credentials from the standard AWS
variables, never from the block.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spade_core.fs import s3_endpoint
from spade_core.hashing import short_hash
from spade_core.store import Store


def block_name(store: Store) -> str:
    """The block name of a store's result storage (lowercase letters, digits and dashes)."""
    return "spade-results-" + short_hash(store.results_dir(), 12)


def result_storage(store: Store) -> Any:
    """The result storage of ``store``, saving the S3 block when needed (needs the Prefect API)."""
    if not store.is_s3:
        path = Path(store.results_dir())
        path.mkdir(parents=True, exist_ok=True)
        return path
    from prefect.filesystems import RemoteFileSystem

    endpoint = s3_endpoint(store.endpoint_url)
    settings: dict[str, Any] = {"client_kwargs": {"endpoint_url": endpoint}} if endpoint else {}
    block = RemoteFileSystem(basepath=store.results_dir(), settings=settings)
    block.save(block_name(store), overwrite=True)
    return block
