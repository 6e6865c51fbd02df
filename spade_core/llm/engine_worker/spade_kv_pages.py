"""A vLLM worker extension, loaded by the engine's own interpreter (``--worker-extension-cls``), that hands
a CPU engine's KV-cache pages back to the operating system while the trainer runs beside it.

vLLM's CPU build has no sleep mode. An engine kept through the update (``generator_during_update: kept``)
holds its whole KV cache all the same, though the trainer's turn needs none of it: every checkpoint after
the update is loaded with the prefix cache reset, so no block written before is read again.
:meth:`KVPages.release_kv_pages` gives the cache's pages back (``madvise(MADV_DONTNEED)`` on each cache
tensor's whole pages); the next request that writes a block gets a zero page, as the freshly allocated
cache did. This directory is put on the engine's ``PYTHONPATH`` alone: the module imports nothing of the
project (the engine runs in its own environment), only the standard library.
"""

from __future__ import annotations

import ctypes
import mmap
from typing import Any

MADV_DONTNEED = 4  # <sys/mman.h> on Linux


class KVPages:
    """Mixed into vLLM's worker class; called as ``POST /collective_rpc {"method": "release_kv_pages"}``."""

    model_runner: Any

    def release_kv_pages(self) -> int:
        """Give back the pages of every KV-cache tensor; returns the bytes released (0 where madvise fails)."""
        libc = ctypes.CDLL(None, use_errno=True)
        libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
        page, released, seen = mmap.PAGESIZE, 0, set()
        for tensor in _tensors(getattr(self.model_runner, "kv_caches", [])):
            start, size = tensor.data_ptr(), tensor.numel() * tensor.element_size()
            if start in seen or size == 0:
                continue
            seen.add(start)
            first, last = -(-start // page) * page, (start + size) // page * page  # whole pages inside
            if last > first and libc.madvise(first, last - first, MADV_DONTNEED) == 0:
                released += last - first
        return released


def _tensors(caches: Any) -> list[Any]:
    """The tensors in the runner's ``kv_caches`` (a list of tensors, or of lists of them)."""
    out: list[Any] = []
    for item in caches:
        if isinstance(item, (list, tuple)):
            out += _tensors(item)
        elif hasattr(item, "data_ptr"):
            out.append(item)
    return out
