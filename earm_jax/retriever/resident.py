"""Handing freed heap memory back to the kernel, so a long-lived retriever's
resident memory follows what it holds.

What a retriever holds is small: a tenant's solver state is 2 MiB at a query
capacity of 1,024 and 7.4 MiB at 4,096 (pool 200, rank 8), its memory table a
few MiB per thousand memories. What glibc's allocator may keep after it is
freed is not: every snapshot copies and hashes the whole solver state, and
every compile ahead of need runs in a background thread, whose allocator
arena keeps the compiler's working memory once it is freed. ``malloc_trim(0)``
returns the free pages of every arena; the retriever calls it after each
snapshot (every ``snapshot_every`` queries) and after each compile ahead of
need. ``benchmarks/bench_retriever.py --no-trim`` measures the difference.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim``, or ``None`` (another C library, another OS)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    try:
        trim = ctypes.CDLL(name).malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    return trim


def trim_heap() -> bool:
    """Returns freed heap pages to the kernel; ``False`` where unsupported."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


__all__ = ["trim_heap"]
