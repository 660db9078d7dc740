"""One call at a time per retriever: threads of one process may share one."""

from __future__ import annotations

import functools


def serialized(method):
    """Runs ``method`` under the retriever's lock: threads of one process may
    share one retriever (one writer per folder, one call at a time)."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._mutex:
            return method(self, *args, **kwargs)

    return locked


__all__ = ["serialized"]
