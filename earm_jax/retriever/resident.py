"""Keeping the process's resident memory flat over a long-lived retriever.

Where it grew: not in the retriever's own data (a tenant's solver state is
2 MiB at 1,024 queries of capacity and 7.4 MiB at 4,096, its memory table a
few MiB per thousand memories) but in memory the process had freed and
glibc's allocator kept: every snapshot copies and hashes the whole solver
state (a few MiB of short-lived arrays each time), and every compile ahead of
need runs in a background thread whose allocator arena keeps the compiler's
freed working memory. ``malloc_trim(0)`` hands the free pages of every arena
back to the kernel; the retriever calls it after each snapshot and after each
compile ahead of need (a few milliseconds, every ``snapshot_every`` queries).
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
