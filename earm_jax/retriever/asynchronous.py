"""The asynchronous half of :class:`~earm_jax.retriever.online.OnlineRetriever`:
``aquery``, ``aquery_many``, ``arerank``, ``aadd`` (and ``aupdate``,
``adelete``, ``aget``) for agents that run on asyncio.

Many coroutines may share one retriever. A query runs in two parts:

* **paying ahead, concurrently**: it draws its anchors for the index it will
  most likely get (the queries in flight before it are counted, as
  :meth:`~earm_jax.retriever.online.OnlineRetriever.query_many` plans its
  anchors), awaits the scorer for the unpaid ones and stores each answer the
  moment it arrives (as the synchronous path does), without holding the
  retriever: the scoring of many queries overlaps (a pair another coroutine
  is paying is awaited, not paid twice);
* **its turn, serialised**: queries are recorded one at a time in the order
  they arrived. At its turn a query draws its anchors again from the state it
  is really folded into; anchors paid ahead are taken from what it paid, any
  others are paid then (the ``best`` preset's rounds read the answers of the
  queries before, so a query that arrived behind others may pay a few more
  pairs at its turn), and the query is recorded in one transaction, through
  the same code as :meth:`~earm_jax.retriever.online.OnlineRetriever.query`.

So the durability and fault rules are the synchronous ones: a query is
acknowledged when its coroutine returns; a scorer fault is a failed pair,
counted, never a made-up score; a cancelled coroutine records nothing but the
scores it was paid for (they are true and never paid twice), and a query is
never half-recorded (the recording is synchronous: no cancellation can reach
into it). Writes (``aadd``, ``aupdate``, ``adelete``) run one at a time, each
as its synchronous twin.

The scorer is awaited through its ``ascore_many(requests)`` coroutine where it
has one (:class:`~earm_jax.scoring.vllm.VllmScorer`); a scorer without one is
called in a daemon thread per request (a hung scorer never blocks the event
loop, and its pairs fail after ``config.scorer_timeout``). Embedding and the
solver's steps run on the event loop (they take milliseconds).

The retriever's lock is shared with the synchronous API (threads and
coroutines may mix) and serves both in arrival order
(:class:`~earm_jax.retriever.serial.FairLock`): a coroutine beside threads
that loop on the writer waits for the calls queued before its own, never for
every call they make after. A coroutine never blocks the event loop waiting
for it and never awaits while holding it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import jax.numpy as jnp
import numpy as np

from earm_jax.base import Query
from earm_jax.retriever.config import Memory, MemoryId, Retrieved, Usage
from earm_jax.retriever.turns import QueryQueue, Turn
from earm_jax.retriever.validation import check_texts
from earm_jax.scoring.base import PairScore

_T = TypeVar("_T")

_TURN_POLL_S = 0.05
"""How often a waiting query looks at the queue again (a wake-up is sent when
its turn comes; the poll only covers retrievers shared by several loops)."""


class _Unpaid(Exception):
    """Raised out of a dry run of the rounds: these memory texts are unpaid."""

    def __init__(self, texts: list[str]) -> None:
        super().__init__(f"{len(texts)} unpaid pairs")
        self.texts = texts


class AsyncRetrieving:
    """Coroutine methods of :class:`~earm_jax.retriever.online.OnlineRetriever`."""

    # ------------------------------------------------------------ machinery

    def _init_async(self) -> None:
        self._queue = QueryQueue()

    async def _locked(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """``fn(*args, **kwargs)`` under the retriever's lock, taken without
        blocking the event loop, in its turn among the threads and coroutines
        that asked before (:class:`~earm_jax.retriever.serial.FairLock`).
        ``fn`` is synchronous: nothing awaits while the lock is held, so no
        other coroutine of this thread can enter."""
        await self._mutex.acquire_async()
        try:
            return fn(*args, **kwargs)
        finally:
            self._mutex.release()

    # ----------------------------------------------------------- one query

    def _unpaid(
        self,
        text: str,
        pool: Query,
        index: int,
        known: Mapping[str, PairScore],
        vector=None,
        ahead: bool = False,
    ) -> list[str]:
        """Memory texts the query's anchors need that are neither stored nor
        ``known``, were it recorded at ``index`` now (no state changes)."""
        if self.similarity_only:
            return []
        memory_texts = self.rows.texts
        if self.experience.ledger is None:
            state = self.experience.state
            ahead = state._replace(count=jnp.asarray(index, jnp.int32))
            _, rows, cached = self._prepare(text, pool, index, ahead)
            return list(
                dict.fromkeys(
                    memory_texts[r]
                    for r, v in zip(rows, cached, strict=True)
                    if v is None and memory_texts[r] not in known
                )
            )

        # The calls that follow the texts read the regression as it will stand
        # at this query's turn, which the queries before it still change: ahead
        # of its turn a query plans (and pays) its similarity head only.
        head_only = ahead and self.config.reads_embeddings

        def pay(positions: np.ndarray):
            rows = np.asarray(pool.candidates)[positions]
            texts = [memory_texts[r] for r in rows]
            cached = self.payer.cached(text, texts)
            missing = [
                t
                for t, v in zip(texts, cached, strict=True)
                if v is None and t not in known
            ]
            if missing:
                raise _Unpaid(list(dict.fromkeys(missing)))
            answers = [
                known[t] if t in known else PairScore.success(v)
                for t, v in zip(texts, cached, strict=True)
            ]
            return (
                np.asarray([a.value if a.ok else 0.0 for a in answers], np.float32),
                np.asarray([a.ok for a in answers], bool),
            )

        try:
            self._rounds(pool, pay, vector, head_only)
        except _Unpaid as unpaid:
            return unpaid.texts
        return []

    def _step(
        self,
        text: str,
        pool_of: Callable[[], tuple[Query, np.ndarray]],
        k: int,
        turn: Turn,
        known: dict[str, PairScore],
        prepaid: int,
    ) -> Retrieved | tuple[list[str], int]:
        """One look at the query (under the lock): its answer when it is its
        turn and nothing is unpaid, else the unpaid texts and the index hint."""
        self._check_open()
        pool, vector = pool_of()
        position = self._queue.position(turn)
        index = self.experience.count + position
        missing = self._unpaid(text, pool, index, known, vector, position > 0)
        if not missing and position == 0:
            return self._answer(text, pool, k, known, prepaid, vector)
        return missing, index

    def _store_paid(
        self, text: str, answers: Mapping[str, PairScore], index: int
    ) -> None:
        self._check_open()
        self.payer.store(text, answers, index)

    async def _pay_ahead(
        self, text: str, missing: list[str], index: int, known: dict[str, PairScore]
    ) -> int:
        """Pays the unpaid pairs nobody else is paying, stores their answers,
        awaits the others'; returns how many pairs this coroutine paid."""
        mine, theirs = self._queue.claim(text, missing)
        fresh: dict[str, PairScore] = {}
        try:
            if mine:
                answers = (await self.payer.ascore([(text, mine)]))[0]
                paid = dict(zip(mine, answers, strict=True))
                await self._locked(self._store_paid, text, paid, index)
                fresh = paid
        finally:
            self._queue.settle(text, mine, fresh)
        # Mine count as this query's calls; of theirs only the failures are
        # kept (a scored pair is stored: the next look finds it, a cache hit).
        known.update(fresh)
        for memory, future in theirs.items():
            try:
                # Shielded: a waiter's cancellation must not cancel the pair
                # for the coroutine paying it and the others waiting.
                answer = await asyncio.shield(asyncio.wrap_future(future))
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not future.cancelled() or (task and task.cancelling()):
                    raise
                continue  # its payer was cancelled: the next look pays it
            if not answer.ok:
                known[memory] = answer
        return len(mine)

    async def _answer_async(
        self,
        text: str,
        pool_of: Callable[[], tuple[Query, np.ndarray]],
        k: int,
        turn: Turn,
    ) -> Retrieved:
        known: dict[str, PairScore] = {}
        prepaid = 0
        try:
            while True:
                step = await self._locked(
                    self._step, text, pool_of, k, turn, known, prepaid
                )
                if isinstance(step, Retrieved):
                    return step
                missing, index = step
                if missing:
                    prepaid += await self._pay_ahead(text, missing, index, known)
                    continue
                # Paid ahead: wait for the turn (a cheap look, no dry run).
                while self._queue.position(turn) != 0:
                    try:
                        await asyncio.wait_for(turn.event.wait(), _TURN_POLL_S)
                    except TimeoutError:
                        pass
        finally:
            self._queue.leave(turn)

    # ----------------------------------------------------------- public API

    async def aquery(
        self, text: str, k: int | None = None, where: Mapping | None = None
    ) -> Retrieved:
        """:meth:`query`, awaited (the scoring of concurrent queries overlaps)."""
        text, k, where = await self._locked(self._checked_query, text, k, where)
        vector = self._embed_queries([text], "query")[0]
        (turn,) = self._queue.join()
        return await self._answer_async(
            text, lambda: (self._query_pool(text, vector, where), vector), k, turn
        )

    async def aquery_many(
        self, texts: Sequence[str], k: int | None = None
    ) -> list[Retrieved]:
        """:meth:`query_many`, awaited: the queries are recorded in order, their
        scoring overlaps. If one fails the others still complete, then the
        first error is raised."""
        texts = check_texts(texts)
        if not texts:
            return []
        _, k, _ = await self._locked(self._checked_query, texts[0], k, None)
        vectors = self._embed_queries(texts, "texts")
        turns = self._queue.join(len(texts))
        tasks = [
            self._answer_async(
                text,
                lambda text=text, vector=vector: (
                    self._query_pool(text, vector, None),
                    vector,
                ),
                k,
                turn,
            )
            for text, vector, turn in zip(texts, vectors, turns, strict=True)
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        for result in results:
            if isinstance(result, BaseException):
                raise result
        return list(results)

    async def arerank(
        self,
        query: str,
        candidates: Sequence[Mapping | tuple],
        k: int | None = None,
    ) -> Retrieved:
        """:meth:`rerank`, awaited. Unknown candidates are registered (and
        edited ones updated) first, each as an acknowledged write: they stay
        registered if the coroutine is cancelled before the query is recorded."""
        self._check_open()
        query, k, parsed = await self._locked(
            self._parse_candidates, query, candidates, k
        )
        vector = self._embed_queries([query], "query")[0]
        await self._locked(self._register_candidates, parsed)
        ids = [p[0] for p in parsed]
        scores = None if parsed[0][2] is None else [p[2] for p in parsed]
        (turn,) = self._queue.join()
        return await self._answer_async(
            query,
            lambda: (self._candidate_pool(query, ids, scores, vector), vector),
            k,
            turn,
        )

    async def aadd(
        self,
        texts: Sequence[str],
        metadata: Sequence[Mapping | None] | None = None,
        ids: Sequence[MemoryId] | None = None,
    ) -> list[MemoryId]:
        """:meth:`add`, awaited (one write at a time)."""
        return await self._locked(self.add, texts, metadata, ids)

    async def aupdate(
        self,
        id: MemoryId,
        text: str | None = None,
        metadata: Mapping | None = None,
        keep_history: bool = True,
    ) -> None:
        """:meth:`update`, awaited."""
        await self._locked(self.update, id, text, metadata, keep_history)

    async def adelete(self, ids: Sequence[MemoryId]) -> None:
        """:meth:`delete`, awaited."""
        await self._locked(self.delete, ids)

    async def aget(self, ids: Sequence[MemoryId]) -> list[Memory]:
        """:meth:`get`, awaited."""
        return await self._locked(self.get, ids)

    async def ausage(self) -> Usage:
        """:meth:`usage`, awaited."""
        return await self._locked(self.usage)


__all__ = ["AsyncRetrieving"]
