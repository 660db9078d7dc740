"""The coroutine API: same answers as the synchronous one, overlapping scoring,
serialised recording, cancellation at every await, faults, LangChain."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import random
import sys
import threading
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from earm_jax.retriever import OnlineRetriever

sys.path.insert(0, str(Path(__file__).parent))
from fakes import (  # noqa: E402
    CONFIG,
    HashEmbedder,
    KeywordScorer,
    memories,
    queries,
)
from optional_extras import require_extra  # noqa: E402

BEST = dataclasses.replace(CONFIG, preset="best")
LEARNED = dataclasses.replace(CONFIG, preset="learned_calls", call_budget=0.5)


class AsyncKeywordScorer(KeywordScorer):
    """The keyword scorer with a native coroutine path that takes ``delay``
    seconds per request; records in-flight requests and the threads used."""

    def __init__(self, delay: float = 0.0) -> None:
        super().__init__()
        self.delay = delay
        self.sync_calls = 0
        self.async_calls = 0
        self.in_flight = 0
        self.max_in_flight = 0
        self.threads: set[int] = set()
        self.gate: asyncio.Event | None = None
        self.entered: asyncio.Event | None = None

    def score_many(self, requests):
        self.sync_calls += 1
        return super().score_many(requests)

    async def ascore_many(self, requests):
        self.async_calls += 1
        self.threads.add(threading.get_ident())
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            if self.entered is not None:
                self.entered.set()
            if self.gate is not None:
                await self.gate.wait()
            await asyncio.sleep(self.delay)
        finally:
            self.in_flight -= 1
        return KeywordScorer.score_many(self, requests)


def _open(folder, scorer=None, config=CONFIG):
    return OnlineRetriever(folder, scorer or KeywordScorer(), HashEmbedder(), config)


def _leaves(retriever):
    tree = (retriever.state, retriever.ledger)
    return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(tree)]


def _same_state(a, b):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


def _same(a, b):
    assert a.memory_ids == b.memory_ids
    assert a.scores == b.scores
    assert (a.calls, a.cache_hits, a.budget, a.query_index) == (
        b.calls,
        b.cache_hits,
        b.budget,
        b.query_index,
    )


@pytest.mark.parametrize(
    "config", [CONFIG, BEST, LEARNED], ids=["paper", "best", "learned_calls"]
)
def test_awaited_one_at_a_time_equals_the_synchronous_api(tmp_path, config):
    texts, asks = memories(30), queries(8)
    with _open(tmp_path / "sync", config=config) as plain:
        plain.add(texts[:20])
        expected = [plain.query(q) for q in asks[:4]]
        plain.add(texts[20:])
        expected += [plain.query(q, k=3) for q in asks[4:6]]
        expected.append(plain.rerank(asks[6], [(i, texts[i]) for i in range(8)]))
        expected += plain.query_many(asks[:2])

    async def run(retriever):
        await retriever.aadd(texts[:20])
        got = [await retriever.aquery(q) for q in asks[:4]]
        await retriever.aadd(texts[20:])
        got += [await retriever.aquery(q, k=3) for q in asks[4:6]]
        got.append(await retriever.arerank(asks[6], [(i, texts[i]) for i in range(8)]))
        got += await retriever.aquery_many(asks[:2])
        return got

    scorer = AsyncKeywordScorer()
    with _open(tmp_path / "async", scorer, config) as awaited:
        got = asyncio.run(run(awaited))
        assert awaited.usage() == _open_usage(tmp_path / "sync", config)
    for a, b in zip(expected, got, strict=True):
        _same(a, b)
    assert scorer.sync_calls == 0 and scorer.async_calls > 0


def _open_usage(folder, config):
    with _open(folder, config=config) as retriever:
        return retriever.usage()


@pytest.mark.parametrize(
    "config", [CONFIG, BEST, LEARNED], ids=["paper", "best", "learned_calls"]
)
def test_100_concurrent_queries_overlap_and_replay_bit_for_bit(tmp_path, config):
    config = dataclasses.replace(config, snapshot_every=1000)
    # Distinct texts (the best preset's first round is the same for a same text,
    # whose pairs are then paid once and awaited by the others).
    asks = [f"Question {i}: {q}" for i, q in enumerate(queries(100, seed=5))]
    scorer = AsyncKeywordScorer(delay=0.05)
    retriever = _open(tmp_path, scorer, config)
    retriever.add(memories(40))
    retriever.warm_up()

    async def run():
        return await asyncio.gather(*(retriever.aquery(q) for q in asks))

    started = time.perf_counter()
    answers = asyncio.run(run())
    elapsed = time.perf_counter() - started
    # Recorded one at a time, in arrival order, every one of them.
    assert [a.query_index for a in answers] == list(range(100))
    assert retriever.num_queries == 100
    for a in answers:
        assert retriever.answer(a.query_index) == a.ranked_ids
    # The scoring overlapped: many requests were in flight at once.
    assert scorer.max_in_flight >= 10
    assert scorer.sync_calls == 0
    usage = retriever.usage()
    assert usage.queries == 100
    assert usage.calls == sum(a.calls for a in answers)
    assert usage.calls == len(scorer.paid)  # every paid pair is counted
    assert len(set(scorer.paid)) == len(scorer.paid)  # and paid once
    print(f"100 concurrent queries in {elapsed:.2f} s")
    live = _leaves(retriever)
    retriever._release()  # a crash: no final snapshot, full replay
    with _open(tmp_path, KeywordScorer(), config) as reopened:
        _same_state(live, _leaves(reopened))
        assert reopened.usage() == usage


def test_cancelled_while_scoring_records_nothing(tmp_path):
    scorer = AsyncKeywordScorer()
    retriever = _open(tmp_path, scorer)
    retriever.add(memories(20))

    async def run():
        scorer.gate, scorer.entered = asyncio.Event(), asyncio.Event()
        task = asyncio.create_task(retriever.aquery(queries(1)[0]))
        await scorer.entered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert retriever.num_queries == 0
        assert retriever._journal.num_scores() == 0
        assert retriever._queue.idle
        scorer.gate = None
        return await retriever.aquery(queries(1)[0])

    answer = asyncio.run(run())
    assert answer.query_index == 0 and answer.calls > 0
    live = _leaves(retriever)
    retriever._release()
    with _open(tmp_path) as reopened:
        assert reopened.num_queries == 1
        _same_state(live, _leaves(reopened))


def test_cancelled_while_waiting_for_its_turn_keeps_what_it_paid(tmp_path):
    scorer = AsyncKeywordScorer()
    retriever = _open(tmp_path, scorer)
    retriever.add(memories(20))
    first, second = "What did Sam say about chess?", "What did Sam say about poetry?"

    async def run():
        gate = asyncio.Event()
        # The first query holds the head of the queue, stuck at its scorer.
        original = scorer.ascore_many

        async def slow_for_first(requests):
            if requests[0][0] == first:
                await gate.wait()
            return await original(requests)

        scorer.ascore_many = slow_for_first
        head = asyncio.create_task(retriever.aquery(first))
        await asyncio.sleep(0.05)
        behind = asyncio.create_task(retriever.aquery(second))
        while not any(q == second for q, _ in scorer.paid):
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # paid ahead, now waiting for its turn
        assert not behind.done()
        behind.cancel()
        with pytest.raises(asyncio.CancelledError):
            await behind
        gate.set()
        answer = await head
        del scorer.ascore_many
        return answer

    answer = asyncio.run(run())
    assert answer.query_index == 0 and retriever.num_queries == 1
    paid_ahead = {m for q, m in scorer.paid if q == second}
    assert paid_ahead
    # Its scores were stored when they arrived: never paid twice.
    before = len(scorer.paid)
    again = retriever.query(second)
    assert again.query_index == 1 and again.cache_hits > 0
    assert not paid_ahead & {m for q, m in scorer.paid[before:] if q == second}
    retriever.close()


def test_cancelled_while_waiting_for_the_lock_records_nothing(tmp_path):
    retriever = _open(tmp_path, AsyncKeywordScorer())
    retriever.add(memories(20))
    held, release = threading.Event(), threading.Event()

    def hold():
        with retriever._mutex:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(10)

    async def run():
        task = asyncio.create_task(retriever.aquery(queries(1)[0]))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        add = asyncio.create_task(retriever.aadd(["Sam bought a new chess set."]))
        await asyncio.sleep(0.05)
        add.cancel()
        with pytest.raises(asyncio.CancelledError):
            await add

    asyncio.run(run())
    release.set()
    thread.join()
    assert retriever.num_queries == 0 and retriever.num_memories == 20
    retriever.close()


@pytest.mark.parametrize("config", [CONFIG, BEST], ids=["paper", "best"])
def test_random_cancellations_leave_a_consistent_journal(tmp_path, config):
    config = dataclasses.replace(config, snapshot_every=1000)
    rng = random.Random(7)
    asks = queries(40, seed=9)
    scorer = AsyncKeywordScorer()
    retriever = _open(tmp_path, scorer, config)
    retriever.add(memories(30))

    async def slow(requests):
        await asyncio.sleep(rng.uniform(0.0, 0.03))
        return KeywordScorer.score_many(scorer, requests)

    scorer.ascore_many = slow

    async def run():
        tasks = [asyncio.create_task(retriever.aquery(q)) for q in asks]
        for task in rng.sample(tasks, 15):
            await asyncio.sleep(rng.uniform(0.0, 0.01))
            task.cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    results = asyncio.run(run())
    done = [r for r in results if not isinstance(r, BaseException)]
    assert all(
        isinstance(r, asyncio.CancelledError)
        for r in results
        if isinstance(r, BaseException)
    )
    assert sorted(a.query_index for a in done) == list(range(len(done)))
    assert retriever.num_queries == len(done) and retriever._queue.idle
    live = _leaves(retriever)
    retriever._release()
    with _open(tmp_path, config=config) as reopened:
        _same_state(live, _leaves(reopened))
        for a in done:
            assert reopened.answer(a.query_index) == a.ranked_ids


def test_scorer_faults_are_failed_pairs(tmp_path):
    class Raising(AsyncKeywordScorer):
        async def ascore_many(self, requests):
            raise RuntimeError("scorer exploded")

    class Hanging(AsyncKeywordScorer):
        async def ascore_many(self, requests):
            await asyncio.sleep(30)

    config = dataclasses.replace(CONFIG, scorer_timeout=0.2)
    for scorer, reason in (
        (Raising(), "scorer raised RuntimeError: scorer exploded"),
        (Hanging(), "timeout after 0.2 s"),
    ):
        folder = tmp_path / type(scorer).__name__
        with _open(folder, scorer, config) as retriever:
            retriever.add(memories(20))
            answer = asyncio.run(retriever.aquery(queries(1)[0]))
            assert answer.failures and {r for _, r in answer.failures} == {reason}
            assert not any(answer.anchored)
            assert retriever.num_queries == 1


def test_a_scorer_without_a_coroutine_runs_in_a_daemon_thread(tmp_path):
    hang = threading.Event()

    class Blocking(KeywordScorer):
        def score_many(self, requests):
            hang.wait(30)
            return super().score_many(requests)

    config = dataclasses.replace(CONFIG, scorer_timeout=0.2)
    with _open(tmp_path, Blocking(), config) as retriever:
        retriever.add(memories(20))

        async def run():
            ticks = 0

            async def tick():
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            ticker = asyncio.create_task(tick())
            answer = await retriever.aquery(queries(1)[0])
            ticker.cancel()
            return answer, ticks

        answer, ticks = asyncio.run(run())
        assert ticks >= 5  # the loop kept running while the scorer hung
        assert {r for _, r in answer.failures} == {"timeout after 0.2 s"}
        hang.set()
        answer = asyncio.run(retriever.aquery(queries(2)[1]))
        assert answer.calls > 0 and not answer.failures


def test_threads_and_coroutines_share_one_retriever(tmp_path):
    scorer = AsyncKeywordScorer(delay=0.01)
    config = dataclasses.replace(CONFIG, snapshot_every=1000)
    retriever = _open(tmp_path, scorer, config)
    retriever.add(memories(30))
    asks = queries(20, seed=3)

    def threads():
        for q in asks[:10]:
            retriever.query(q)

    async def coroutines():
        return await asyncio.gather(*(retriever.aquery(q) for q in asks[10:]))

    worker = threading.Thread(target=threads)
    worker.start()
    asyncio.run(coroutines())
    worker.join()
    assert retriever.num_queries == 20
    live = _leaves(retriever)
    retriever._release()
    with _open(tmp_path, config=config) as reopened:
        _same_state(live, _leaves(reopened))


class _NoThreads(concurrent.futures.ThreadPoolExecutor):
    def submit(self, *args, **kwargs):
        raise AssertionError("a worker thread was asked for")


def test_langchain_ainvoke_awaits_the_async_path(tmp_path):
    require_extra("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from earm_jax.retriever.langchain import EarmRetriever

    texts = memories(30)

    class Pool(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager):
            raise AssertionError("the synchronous path was used")

        async def _aget_relevant_documents(self, query, *, run_manager):
            return [Document(id=str(i), page_content=t) for i, t in enumerate(texts)][
                :12
            ]

    scorer = AsyncKeywordScorer(delay=0.01)
    with _open(tmp_path, scorer) as agent:
        agent.add(texts, ids=[str(i) for i in range(30)])
        own = EarmRetriever(retriever=agent, k=3)
        pooled = EarmRetriever(retriever=agent, base_retriever=Pool(), k=3)

        async def run():
            asyncio.get_running_loop().set_default_executor(_NoThreads())
            one = await own.ainvoke("What did Sam say about chess?")
            many = await own.abatch(
                ["What did Sam say about poetry?", "What did Sam say about guitar?"]
            )
            other = await pooled.ainvoke("What did Sam say about hiking?")
            return one, many, other

        main = threading.get_ident()
        one, many, other = asyncio.run(run())
    assert len(one) == 3 and len(many) == 2 and len(other) == 3
    assert all("chess" in d.page_content for d in one if d.metadata["earm_anchored"])
    assert scorer.sync_calls == 0 and scorer.threads == {main}
    assert {d.metadata["earm_query_index"] for d in many[0] + many[1]} <= {1, 2}


def test_async_errors_are_the_synchronous_ones(tmp_path):
    with _open(tmp_path, AsyncKeywordScorer()) as retriever:
        with pytest.raises(ValueError, match="holds no memory"):
            asyncio.run(retriever.aquery("anything?"))
        asyncio.run(retriever.aadd(["Sam likes chess."], ids=["a"]))
        with pytest.raises(ValueError, match="exists already"):
            asyncio.run(retriever.aadd(["again"], ids=["a"]))
        with pytest.raises(ValueError, match="no memory matches"):
            asyncio.run(retriever.aquery("chess?", where={"user": "x"}))
        asyncio.run(retriever.aupdate("a", "Sam loves chess."))
        assert asyncio.run(retriever.aget(["a"]))[0].text == "Sam loves chess."
        asyncio.run(retriever.adelete(["a"]))
        with pytest.raises(KeyError):
            asyncio.run(retriever.aget(["a"]))
        assert retriever._queue.idle
    with pytest.raises(ValueError, match="closed"):
        asyncio.run(retriever.aquery("chess?"))


def test_learned_calls_concurrent_queries_pay_what_they_pay_in_turn(tmp_path):
    """A query ahead of its turn plans only the head (which the similarity
    order fixes): the tail follows the regression as it stands at its turn,
    so concurrent queries pay exactly the pairs they pay one at a time."""
    config = dataclasses.replace(LEARNED, snapshot_every=1000)
    asks = [f"Question {i}: {q}" for i, q in enumerate(queries(40, seed=7))]
    with _open(tmp_path / "turn", KeywordScorer(), config) as in_turn:
        in_turn.add(memories(40))
        expected = [in_turn.query(q) for q in asks]
    scorer = AsyncKeywordScorer(delay=0.05)
    with _open(tmp_path / "concurrent", scorer, config) as retriever:
        retriever.add(memories(40))

        async def run():
            return await asyncio.gather(*(retriever.aquery(q) for q in asks))

        answers = asyncio.run(run())
        assert scorer.max_in_flight >= 5
    assert len(scorer.paid) == sum(a.calls for a in expected)
    for got, want in zip(answers, expected, strict=True):
        assert got.memory_ids == want.memory_ids
