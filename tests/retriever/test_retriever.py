"""The online retriever: real MiniLM embeddings, restarts, growth, cache, faults."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from earm_jax.retriever import OnlineRetriever, RetrieverConfig
from earm_jax.scoring.base import PairScore, ScorerIdentity
from earm_jax.store.embeddings import Embedder

TOPICS = ["hiking", "painting", "guitar", "cooking", "chess", "swimming", "poetry"]


class KeywordScorer:
    """Scores 1.0 when the memory mentions the query's topic word, else 0.05;
    fails on memories containing "unreadable" (a scorer fault)."""

    identity = ScorerIdentity(kind="test-keyword", prompt_version="1")

    def __init__(self) -> None:
        self.pairs_sent = 0

    def score(self, query, memories):
        return self.score_many([(query, memories)])[0]

    def score_many(self, requests):
        out = []
        for query, memories in requests:
            self.pairs_sent += len(memories)
            topic = query.split()[-1].strip("?")
            out.append(
                [
                    PairScore.failure("unreadable memory")
                    if "unreadable" in memory
                    else PairScore.success(1.0 if topic in memory else 0.05)
                    for memory in memories
                ]
            )
        return out


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    return Embedder(cache_dir=tmp_path_factory.mktemp("embeddings"))


def _memories(count, seed=0):
    rng = np.random.default_rng(seed)
    texts = []
    for i in range(count):
        topic = TOPICS[rng.integers(len(TOPICS))]
        texts.append(f"Day {i}: Sam talked about {topic} with a friend number {i}.")
    return texts


def _queries(count, seed=1):
    rng = np.random.default_rng(seed)
    return [
        f"What did Sam say about {TOPICS[rng.integers(len(TOPICS))]}?"
        for _ in range(count)
    ]


CONFIG = RetrieverConfig(
    pool_size=24, top_k=5, rank=2, block_size=3, initial_memories=16, initial_queries=4
)


@pytest.mark.parametrize("solver", ["incremental", "als", "gradient"])
def test_restart_gives_the_same_answers_as_an_uninterrupted_run(
    tmp_path, embedder, solver
):
    config = dataclasses.replace(CONFIG, solver=solver)
    memories, queries = _memories(40), _queries(14)
    straight = OnlineRetriever(tmp_path / "a", KeywordScorer(), embedder, config)
    straight.add(memories)
    expected = [straight.query(q) for q in queries]
    straight.close()

    first = OnlineRetriever(tmp_path / "b", KeywordScorer(), embedder, config)
    first.add(memories)
    answers = [first.query(q) for q in queries[:6]]
    first.close()
    reopened = OnlineRetriever(tmp_path / "b", KeywordScorer(), embedder)
    assert reopened.num_queries == 6 and reopened.num_memories == 40
    answers += [reopened.query(q) for q in queries[6:]]
    for got, want in zip(answers, expected, strict=True):
        assert got.memory_ids == want.memory_ids
        np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-6)
    # Grew from 16 memories / 4 queries: 64 memory rows, 16 query slots.
    assert reopened.solver_config.num_memories == 64
    assert reopened.solver_config.capacity == 16


def test_answers_prefer_the_topic_and_come_in_chronological_order(tmp_path, embedder):
    retriever = OnlineRetriever(tmp_path, KeywordScorer(), embedder, CONFIG)
    retriever.add(_memories(60, seed=3))
    for query in _queries(12, seed=4):
        answer = retriever.query(query)
        assert answer.memory_ids == sorted(answer.memory_ids)
        topic = query.split()[-1].strip("?")
        assert sum(topic in text for text in answer.texts) >= 3, (query, answer.texts)


def test_no_pair_is_paid_twice_and_nothing_observed_is_lost(tmp_path, embedder):
    scorer = KeywordScorer()
    retriever = OnlineRetriever(tmp_path, scorer, embedder, CONFIG)
    retriever.add(_memories(30, seed=5))
    query = "What did Sam say about chess?"
    first = retriever.query(query)
    assert first.calls == first.budget and first.cache_hits == 0
    again = retriever.query(query)
    # The first stage scores the whole pool again: every pair is in the cache.
    assert again.calls == 0 and again.cache_hits == again.budget
    assert scorer.pairs_sent == first.calls
    log = [
        json.loads(line)
        for line in (tmp_path / "observations.jsonl").read_text().splitlines()
    ]
    assert [len(entry["anchors"]) for entry in log] == [first.budget, again.budget]
    stored = int(np.asarray(retriever.state.memory_count).sum())
    assert stored == sum(
        sum(score is not None for score in entry["scores"]) for entry in log
    )


def test_scorer_failures_are_reported_and_never_observed(tmp_path, embedder):
    retriever = OnlineRetriever(tmp_path, KeywordScorer(), embedder, CONFIG)
    texts = _memories(20, seed=6) + [
        f"an unreadable note {i} about chess" for i in range(4)
    ]
    retriever.add(texts)
    answer = retriever.query("What did Sam say about chess?")
    assert len(answer.failures) == 4
    assert all(reason == "unreadable memory" for _, reason in answer.failures)
    failed = {memory for memory, _ in answer.failures}
    assert all(
        int(c) == 0 for c in np.asarray(retriever.state.memory_count)[list(failed)]
    )


def test_bad_input_is_rejected_before_anything_changes(tmp_path, embedder):
    retriever = OnlineRetriever(tmp_path, KeywordScorer(), embedder, CONFIG)
    with pytest.raises(ValueError, match="no memory yet"):
        retriever.query("anything?")
    with pytest.raises(ValueError, match=r"texts\[1\] must be a non-empty string"):
        retriever.add(["fine", ""])
    assert retriever.num_memories == 0
    retriever.add(["one memory about chess"])
    with pytest.raises(ValueError, match="k must be >= 1"):
        retriever.query("chess?", k=0)
    assert retriever.num_queries == 0
    with pytest.raises(ValueError, match="RetrieverConfig.pool_size"):
        RetrieverConfig(pool_size=0)
