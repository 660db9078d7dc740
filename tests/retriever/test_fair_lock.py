"""The retriever's lock serves threads and coroutines in arrival order: an
``aquery`` beside threads that loop on the writer waits a bounded number of
lock turns (counted, never timed)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories, queries  # noqa: E402

from earm_jax.retriever import OnlineRetriever  # noqa: E402
from earm_jax.retriever.serial import FairLock  # noqa: E402

WRITERS = 3
# Turns each writer takes at most: the bound that keeps a broken (unfair)
# lock's test finite; a fair one serves the query long before.
WRITES_EACH = 200


def _wait_for_queue(lock: FairLock, length: int) -> None:
    """Spins until ``length`` waiters are queued (no clock involved)."""
    while True:
        with lock._condition:
            if len(lock._queue) >= length:
                return


def test_waiters_threads_and_coroutines_are_served_in_arrival_order():
    lock = FairLock()
    served: list[str] = []
    lock.acquire()
    threads = []
    for name in ("a", "b"):

        def take(name=name):
            with lock:
                served.append(name)

        thread = threading.Thread(target=take)
        thread.start()
        threads.append(thread)
        _wait_for_queue(lock, len(threads))

    async def coroutine() -> int:
        waited = await lock.acquire_async()
        served.append("async")
        lock.release()
        return waited

    def in_loop(box: list) -> None:
        box.append(asyncio.run(coroutine()))

    box: list[int] = []
    loop_thread = threading.Thread(target=in_loop, args=(box,))
    loop_thread.start()
    _wait_for_queue(lock, 3)
    last = threading.Thread(target=_append, args=(lock, served, "c"))
    last.start()
    _wait_for_queue(lock, 4)
    lock.release()
    for thread in (*threads, loop_thread, last):
        thread.join()
    assert served == ["a", "b", "async", "c"]
    assert box == [2]  # a's and b's turns came before the coroutine's
    assert lock.grants == 5


def _append(lock: FairLock, served: list[str], name: str) -> None:
    with lock:
        served.append(name)


def test_aquery_beside_busy_writer_threads_waits_bounded_turns(tmp_path):
    config = dataclasses.replace(CONFIG, synchronous="NORMAL")
    retriever = OnlineRetriever(tmp_path / "m", KeywordScorer(), HashEmbedder(), config)
    ids = retriever.add(memories(30))
    retriever.query(queries(1)[0])  # compiled before the race
    lock = retriever._mutex
    waits: list[int] = []
    original = lock.acquire_async

    async def counted() -> int:
        waited = await original()
        waits.append(waited)
        return waited

    lock.acquire_async = counted
    started = threading.Barrier(WRITERS + 1)
    stop = threading.Event()
    writes = [0] * WRITERS

    def writer(n: int) -> None:
        started.wait()
        while not stop.is_set() and writes[n] < WRITES_EACH:
            retriever.update(ids[n], metadata={"turn": writes[n]})
            writes[n] += 1

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(WRITERS)]
    for thread in threads:
        thread.start()
    started.wait()
    try:
        # Every writer has a call queued or running before the query asks.
        while min(writes) < 1:
            pass
        answers = [asyncio.run(retriever.aquery(q)) for q in queries(3)]
        during = list(writes)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
        retriever.close()
    assert all(answer.memory_ids for answer in answers)
    assert waits, "aquery took no turn of the lock"
    # At most one turn per writer queued ahead (each has one call in flight)
    # and the holder's: never every call they made meanwhile.
    assert max(waits) <= WRITERS, waits
    assert min(during) < WRITES_EACH, "the writers stopped before the queries ended"
