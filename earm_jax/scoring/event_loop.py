"""A private asyncio event loop in a daemon thread, so that asynchronous HTTP
clients offer plain synchronous calls (also from notebooks, whose own loop
is already running)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable
from concurrent.futures import Future
from typing import TypeVar

_T = TypeVar("_T")


class EventLoopThread:
    """A private asyncio loop in a daemon thread, for synchronous callers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="earm-scorer-loop", daemon=True
        )
        self._thread.start()

    def run(self, coroutine: Awaitable[_T]) -> _T:
        """Runs ``coroutine`` on the loop and waits for its result."""
        future: Future[_T] = asyncio.run_coroutine_threadsafe(coroutine, self.loop)  # type: ignore[arg-type]
        return future.result()

    def stop(self) -> None:
        """Stops the loop and joins its thread (idempotent)."""
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=10.0)
        self.loop.close()


__all__ = ["EventLoopThread"]
