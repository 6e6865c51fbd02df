"""Short content hashes: the one place that cuts a sha256 hex digest to a prefix.

Ids (``env_id``, ``doc_id``, ``episode_id``), the config hash and table digests are all the first hex digits
of a sha256; they are part of stored rows and cache keys, so their values must never change.
"""

from __future__ import annotations

import hashlib
from typing import Any


def short_hash(data: str | bytes, length: int = 16, *, errors: str = "strict") -> str:
    """The first ``length`` hex digits of the sha256 of ``data`` (a str is UTF-8 encoded first).

    Args:
        data: The bytes, or a text encoded as UTF-8.
        length: How many hex digits to keep, 1 to 64.
        errors: The UTF-8 error handler for a str (``"surrogatepass"`` hashes lone surrogates as well).

    Returns:
        The hex prefix.

    Raises:
        ValueError: ``length`` is not an integer from 1 to 64.

    >>> short_hash("hello")
    '2cf24dba5fb0a30e'
    >>> short_hash(b"hello", 8)
    '2cf24dba'
    """
    if isinstance(length, bool) or not isinstance(length, int) or not 1 <= length <= 64:
        raise ValueError(f"hash length {length!r} must be an integer from 1 to 64")
    raw = data.encode("utf-8", errors) if isinstance(data, str) else data
    return hashlib.sha256(raw).hexdigest()[:length]


def stream_hash(stream: Any, length: int = 16) -> str:
    """:func:`short_hash` of everything the binary file ``stream`` holds, read in chunks (gigabytes stay out
    of memory): the digest a store records for each file.

    >>> import io
    >>> stream_hash(io.BytesIO(b"hello")) == short_hash(b"hello")
    True
    """
    return hashlib.file_digest(stream, "sha256").hexdigest()[:length]
