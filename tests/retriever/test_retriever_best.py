"""The online retriever with ``preset="best"``: rounds of one batched request,
the ledger's hard cap, restarts keep the ledger."""

from __future__ import annotations

import dataclasses

import pytest
from test_retriever import CONFIG, KeywordScorer, _memories, _queries

from earm_jax.retriever import OnlineRetriever
from earm_jax.store.embeddings import Embedder

BEST = dataclasses.replace(
    CONFIG, preset="best", call_budget=0.25, solver="incremental"
)


@pytest.fixture(scope="module")
def embedder(tmp_path_factory):
    return Embedder(cache_dir=tmp_path_factory.mktemp("embeddings"))


def test_best_preset_pays_in_rounds_under_the_cap_and_survives_restart(
    tmp_path, embedder
):
    memories, queries = _memories(40), _queries(10)
    straight = OnlineRetriever(tmp_path / "a", KeywordScorer(), embedder, BEST)
    straight.add(memories)
    expected = [straight.query(q) for q in queries]
    straight.close()
    total = sum(answer.calls for answer in expected)
    assert total <= 0.25 * BEST.pool_size * len(queries)
    assert all(1 <= answer.rounds <= 4 for answer in expected[:1])
    assert all(answer.rounds <= 4 for answer in expected)

    first = OnlineRetriever(tmp_path / "b", KeywordScorer(), embedder, BEST)
    first.add(memories)
    answers = [first.query(q) for q in queries[:4]]
    first.close()
    reopened = OnlineRetriever(tmp_path / "b", KeywordScorer(), embedder)
    assert reopened.config.preset == "best"
    answers += [reopened.query(q) for q in queries[4:]]
    for got, want in zip(answers, expected, strict=True):
        assert got.memory_ids == want.memory_ids
        assert got.calls == want.calls and got.rounds == want.rounds
