"""The one S3 filesystem factory of the project (the store, corpora, the catalog and result storage).

The endpoint is ``endpoint_url`` when given, else the standard ``AWS_ENDPOINT_URL`` variable, else AWS;
credentials come from the standard AWS variables and are never passed around or stored.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import s3fs


def s3_endpoint(endpoint_url: str | None = None) -> str | None:
    """``endpoint_url``, else ``$AWS_ENDPOINT_URL``, else None (AWS itself); blank values count as unset."""
    return (endpoint_url or "").strip() or os.environ.get("AWS_ENDPOINT_URL", "").strip() or None


def s3_filesystem(endpoint_url: str | None = None) -> s3fs.S3FileSystem:
    """A fresh (never cached) s3fs filesystem on :func:`s3_endpoint`'s endpoint."""
    import s3fs

    return s3fs.S3FileSystem(endpoint_url=s3_endpoint(endpoint_url), skip_instance_cache=True)
