"""The durable retriever with ``preset="learned_calls"``: Top-similarity's
calls in two rounds, the library policy's choices query for query, and a crash
+ replay that rebuilds the regression from the recorded queries."""

from __future__ import annotations

import dataclasses
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from earm_jax.retriever import OnlineRetriever
from earm_jax.retriever.compiled import adaptive_for

sys.path.insert(0, str(Path(__file__).parent))
from fakes import HashEmbedder, KeywordScorer, memories, queries  # noqa: E402
from library_rounds import library_then_retriever  # noqa: E402
from test_retriever import CONFIG  # noqa: E402

LEARNED = dataclasses.replace(
    CONFIG, pool_size=30, preset="learned_calls", call_budget=0.3
)
CALLS = math.ceil(0.3 * 30)


def _open(folder, config=LEARNED):
    return OnlineRetriever(folder, KeywordScorer(), HashEmbedder(), config)


def _same_tree(got, want) -> bool:
    return jax.tree.structure(got) == jax.tree.structure(want) and all(
        bool(np.array_equal(np.asarray(a), np.asarray(b)))
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    )


@pytest.mark.parametrize("snapshot_every", [4, 1000])
def test_learned_calls_pay_top_similarity_calls_and_a_crash_replays_the_fit(
    tmp_path, snapshot_every
):
    config = dataclasses.replace(LEARNED, snapshot_every=snapshot_every)
    texts, asks = memories(60), queries(12)
    with _open(tmp_path / "straight", config) as straight:
        straight.add(texts)
        expected = [straight.query(q) for q in asks]
        fit = straight.ledger
    # Each query pays exactly Top-similarity's calls (no cache hits: distinct
    # queries), in two rounds, and the regression has learned something.
    assert [a.calls + a.cache_hits for a in expected] == [CALLS] * len(asks)
    assert all(a.rounds == 2 for a in expected)
    assert float(jnp.abs(fit.moment).sum()) > 0

    first = _open(tmp_path / "b", config)
    first.add(texts)
    answers = [first.query(q) for q in asks[:7]]
    first._release()  # what kill -9 leaves: no close(), no final snapshot
    with OnlineRetriever(tmp_path / "b", KeywordScorer(), HashEmbedder()) as again:
        assert again.config.preset == "learned_calls"
        answers += [again.query(q) for q in asks[7:]]
        assert _same_tree(again.ledger, fit)
    for got, want in zip(answers, expected, strict=True):
        assert got.memory_ids == want.memory_ids
        assert got.scores == want.scores
        assert (got.calls, got.rounds, got.budget) == (
            want.calls,
            want.rounds,
            want.budget,
        )


def test_the_retriever_pays_what_the_library_policy_chooses(tmp_path):
    """Query for query, the retriever's paid candidates are the ones the
    protocol policy's host loop chooses on the same pools, answers and
    embeddings (the carry passed along)."""
    texts, asks = memories(60), queries(10)
    scorer, embedder = KeywordScorer(), HashEmbedder()
    with OnlineRetriever(tmp_path / "a", scorer, embedder, LEARNED) as retriever:
        retriever.add(texts)
        policy = adaptive_for(LEARNED, embedder.width)[0]
        carry = policy.init()
        for ask in asks:
            carry, _, _ = library_then_retriever(retriever, policy, carry, ask, scorer)
        assert _same_tree(retriever.ledger, carry)


def test_learned_calls_with_no_query_retention_is_refused_naming_both():
    with pytest.raises(ValueError, match="query_retention='none'.*learned_calls"):
        dataclasses.replace(LEARNED, query_retention="none")


def test_a_query_record_without_its_embedding_is_named_as_damage(tmp_path):
    with _open(tmp_path / "a") as retriever:
        retriever.add(memories(20))
        retriever.query(queries(1)[0])
        with pytest.raises(Exception, match="pool record has"):
            retriever._decode_query(b"\0" * (14 * LEARNED.pool_size), "record")
