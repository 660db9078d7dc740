"""One call at a time per retriever: threads of one process may share one,
and coroutines beside them.

The retriever's lock is a :class:`FairLock`: threads (the synchronous API)
and coroutines (the asynchronous API, :meth:`FairLock.acquire_async`) wait in
one queue and are served in arrival order. A plain lock hands itself to
whichever blocked thread the OS wakes first, so a coroutine that can only poll
it (it must not block its event loop) lost every race to threads looping on
the writer: beside three such threads one ``aquery`` finished nothing in 30 s.
In the queue, a waiter is served after at most the waiters ahead of it.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import threading
from collections.abc import Callable


class _Ticket:
    """One waiter's place in the queue (``wake``: how to tell a coroutine
    its turn has come; threads wait on the lock's condition instead)."""

    __slots__ = ("wake",)

    def __init__(self, wake: Callable[[], None] | None = None) -> None:
        self.wake = wake


class FairLock:
    """A reentrant lock that serves its waiters, threads and coroutines, in
    the order they asked.

    ``grants`` counts the acquisitions so far (reentrant ones excluded): the
    turns the lock has given, whoever took them.

    >>> lock = FairLock()
    >>> with lock:
    ...     with lock:  # reentrant, as the retriever's methods nest
    ...         pass
    >>> lock.grants
    1
    """

    def __init__(self) -> None:
        self._condition = threading.Condition(threading.Lock())
        self._owner: int | None = None
        self._depth = 0
        self._queue: collections.deque[_Ticket] = collections.deque()
        self.grants = 0

    def _take(self, me: int) -> None:
        """Makes ``me`` the owner (called under the condition)."""
        self._owner, self._depth = me, 1
        self.grants += 1

    def _wake_head(self) -> None:
        """Tells the first waiter the lock may be free (under the condition)."""
        if not self._queue:
            return
        head = self._queue[0]
        if head.wake is not None:
            head.wake()
        else:
            self._condition.notify_all()

    def _leave(self, ticket: _Ticket) -> None:
        """Removes a waiter that gave up (under the condition)."""
        was_head = bool(self._queue) and self._queue[0] is ticket
        try:
            self._queue.remove(ticket)
        except ValueError:
            return
        if was_head and self._owner is None:
            self._wake_head()

    def _granted(self, me: int, ticket: _Ticket) -> bool:
        """Takes the lock if it is free and ``ticket`` is first (under the
        condition)."""
        if self._owner is None and self._queue and self._queue[0] is ticket:
            self._queue.popleft()
            self._take(me)
            return True
        return False

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Takes the lock, after every waiter that asked before."""
        me = threading.get_ident()
        with self._condition:
            if self._owner == me:
                self._depth += 1
                return True
            if self._owner is None and not self._queue:
                self._take(me)
                return True
            if not blocking:
                return False
            ticket = _Ticket()
            self._queue.append(ticket)
            try:
                granted = self._condition.wait_for(
                    lambda: self._granted(me, ticket),
                    None if timeout < 0 else timeout,
                )
            except BaseException:
                self._leave(ticket)
                raise
            if not granted:
                self._leave(ticket)
            return granted

    async def acquire_async(self) -> int:
        """Takes the lock from a coroutine, after every waiter that asked
        before, without blocking the event loop. The owner is the loop's
        thread: release it before the coroutine next awaits.

        Returns:
          the turns others took between this request and its grant (at most
          the waiters queued before it, plus the holder's).
        """
        me = threading.get_ident()
        loop = asyncio.get_running_loop()
        turn = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(turn.set)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        with self._condition:
            if self._owner == me:
                self._depth += 1
                return 0
            if self._owner is None and not self._queue:
                self._take(me)
                return 0
            ticket = _Ticket(wake)
            self._queue.append(ticket)
            asked = self.grants
        try:
            while True:
                await turn.wait()
                turn.clear()
                with self._condition:
                    if self._granted(me, ticket):
                        return self.grants - 1 - asked
        except BaseException:
            with self._condition:
                self._leave(ticket)
            raise

    def release(self) -> None:
        with self._condition:
            if self._owner != threading.get_ident():
                raise RuntimeError("release of a FairLock this thread does not hold")
            self._depth -= 1
            if self._depth:
                return
            self._owner = None
            self._wake_head()

    def __enter__(self) -> FairLock:
        self.acquire()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()


def serialized(method):
    """Runs ``method`` under the retriever's lock: threads of one process may
    share one retriever (one writer per folder, one call at a time)."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._mutex:
            return method(self, *args, **kwargs)

    return locked


__all__ = ["FairLock", "serialized"]
