"""The queue of a retriever's asynchronous queries: the order their turns
come in (the order they arrived), and the pairs a coroutine is paying now, so
that another that needs one awaits its answer instead of paying it twice.

One object owns both (:class:`QueryQueue`, the retriever's ``_queue``); it is
shared by the coroutines of one or more event loops, under its own lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Mapping

from earm_jax.scoring.base import PairScore


class Turn:
    """One query's place in the queue of asynchronous queries."""

    __slots__ = ("event",)

    def __init__(self) -> None:
        self.event = asyncio.Event()


class QueryQueue:
    """The turns of the asynchronous queries and the pairs being paid."""

    def __init__(self) -> None:
        self._turns: list[Turn] = []
        self._lock = threading.Lock()
        self._paying: dict[tuple[str, str], concurrent.futures.Future] = {}

    @property
    def idle(self) -> bool:
        """No query is queued and no pair is being paid."""
        with self._lock:
            return not self._turns and not self._paying

    def join(self, count: int = 1) -> list[Turn]:
        """``count`` new turns at the end of the queue."""
        turns = [Turn() for _ in range(count)]
        with self._lock:
            self._turns.extend(turns)
            if self._turns and self._turns[0] is turns[0]:
                turns[0].event.set()
        return turns

    def leave(self, turn: Turn) -> None:
        """Takes ``turn`` out (recorded, failed or cancelled) and wakes the
        next one when it led."""
        with self._lock:
            was_first = bool(self._turns) and self._turns[0] is turn
            if turn in self._turns:
                self._turns.remove(turn)
            head = self._turns[0] if self._turns and was_first else None
        if head is not None:
            head.event.set()

    def position(self, turn: Turn) -> int:
        """How many turns are ahead of ``turn``."""
        with self._lock:
            return self._turns.index(turn)

    def claim(
        self, text: str, memories: list[str]
    ) -> tuple[list[str], dict[str, concurrent.futures.Future]]:
        """Splits ``memories`` into the pairs the caller pays (claimed) and
        those another coroutine is paying (their futures)."""
        mine, theirs = [], {}
        with self._lock:
            for memory in memories:
                future = self._paying.get((text, memory))
                if future is None:
                    self._paying[(text, memory)] = concurrent.futures.Future()
                    mine.append(memory)
                else:
                    theirs[memory] = future
        return mine, theirs

    def settle(
        self, text: str, memories: list[str], answers: Mapping[str, PairScore]
    ) -> None:
        """Hands the answers of claimed pairs to whoever waits (a pair left
        unanswered, by a cancellation, is cancelled: the waiter pays it)."""
        with self._lock:
            futures = [self._paying.pop((text, m), None) for m in memories]
        for memory, future in zip(memories, futures, strict=True):
            if future is None or future.done():
                continue
            if memory in answers:
                future.set_result(answers[memory])
            else:
                future.cancel()


__all__ = ["QueryQueue", "Turn"]
