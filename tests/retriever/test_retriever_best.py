"""The durable retriever with ``preset="best"``: rounds of one batched request,
the ledger's hard cap, and a crash + replay that reproduces the ledger."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from earm_jax.retriever import OnlineRetriever
from earm_jax.retriever.compiled import adaptive_for

sys.path.insert(0, str(Path(__file__).parent))
from fakes import HashEmbedder, KeywordScorer, memories, queries  # noqa: E402
from library_rounds import library_then_retriever  # noqa: E402
from test_retriever import CONFIG  # noqa: E402


class RareScorer(KeywordScorer):
    """Evidence only for one topic word: most queries find nothing early and
    go on to later rounds."""

    def value(self, query: str, memory: str) -> float:
        topic = query.split()[-1].strip("?")
        return 1.0 if topic in memory and len(topic) % 3 == 0 else 0.05


BEST = dataclasses.replace(CONFIG, pool_size=30, preset="best", call_budget=0.5)


def _same_ledger(got, want) -> bool:
    return jax.tree.structure(got) == jax.tree.structure(want) and all(
        bool((a == b).all())
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    )


def _open(folder, config=BEST):
    return OnlineRetriever(folder, RareScorer(), HashEmbedder(), config)


@pytest.mark.parametrize("call_order", ["embedding", "similarity"])
@pytest.mark.parametrize("snapshot_every", [4, 1000])
def test_best_pays_in_rounds_under_the_cap_and_a_crash_replays_the_ledger(
    tmp_path, snapshot_every, call_order
):
    config = dataclasses.replace(
        BEST, snapshot_every=snapshot_every, call_order=call_order
    )
    texts, asks = memories(40), queries(12)
    with _open(tmp_path / "straight", config) as straight:
        straight.add(texts)
        expected = [straight.query(q) for q in asks]
        ledger = straight.ledger
    total = sum(answer.calls for answer in expected)
    assert total <= int(0.5 * config.pool_size * len(asks))
    assert all(answer.rounds <= 4 for answer in expected)
    assert any(answer.rounds >= 2 for answer in expected)
    # The embedding order's regression is in the ledger (rebuilt on reopen).
    learned = float(jnp.abs(ledger.embedding_fit.moment).sum())
    assert (learned > 0) == (call_order == "embedding")

    first = _open(tmp_path / "b", config)
    first.add(texts)
    answers = [first.query(q) for q in asks[:7]]
    first._release()  # what kill -9 leaves: no close(), no final snapshot
    with OnlineRetriever(tmp_path / "b", RareScorer(), HashEmbedder()) as again:
        assert again.config.preset == "best"
        answers += [again.query(q) for q in asks[7:]]
        assert _same_ledger(again.ledger, ledger)
        # Read back from the records (which may carry the query's embedding).
        assert again.usage().full_pool_calls == len(asks) * config.pool_size
    for got, want in zip(answers, expected, strict=True):
        assert got.memory_ids == want.memory_ids
        assert got.scores == want.scores
        assert (got.calls, got.rounds, got.budget) == (
            want.calls,
            want.rounds,
            want.budget,
        )


def test_best_pays_what_the_library_policy_chooses_where_the_texts_point(tmp_path):
    """Query for query, the default ``best`` (similarity head, then the
    embedding regression) pays the candidates the protocol policy's host loop
    chooses on the same pools, answers, memory biases and embeddings."""
    texts, asks = memories(40), queries(10)
    scorer, embedder = RareScorer(), HashEmbedder()
    assert BEST.call_order == "embedding" and BEST.stop_rule == "spend"
    with OnlineRetriever(tmp_path / "a", scorer, embedder, BEST) as retriever:
        retriever.add(texts)
        policy = adaptive_for(BEST, embedder.width)[0]
        ledger = policy.init()
        for ask in asks:
            ledger, _, _ = library_then_retriever(
                retriever, policy, ledger, ask, scorer
            )
        assert _same_ledger(retriever.ledger, ledger)


def test_best_query_many_equals_queries_in_turn(tmp_path):
    texts, asks = memories(30), queries(6)
    with _open(tmp_path / "a") as one:
        one.add(texts)
        expected = [one.query(q) for q in asks]
    with _open(tmp_path / "b") as many:
        many.add(texts)
        got = many.query_many(asks)
    assert [a.memory_ids for a in got] == [a.memory_ids for a in expected]
    assert [a.calls for a in got] == [a.calls for a in expected]


def test_a_snapshot_of_an_older_ledger_layout_is_replaced_by_a_full_replay(tmp_path):
    """A best-preset folder whose snapshot predates the learned order's ledger
    fields reopens by replaying every operation: the same ledger and answers
    as a run that never stopped."""
    import json
    import sqlite3

    config = dataclasses.replace(BEST, snapshot_every=4)
    texts, asks = memories(40), queries(12)
    with _open(tmp_path / "straight", config) as straight:
        straight.add(texts)
        expected = [straight.query(q) for q in asks]
        ledger = straight.ledger
    with _open(tmp_path / "old", config) as first:
        first.add(texts)
        answers = [first.query(q) for q in asks[:8]]
    # What the older code wrote: a ledger without the learned order's leaves.
    db = sqlite3.connect(tmp_path / "old" / "journal.sqlite")
    (manifest_text,) = db.execute("SELECT manifest FROM snapshots").fetchone()
    manifest = [
        entry
        for entry in json.loads(manifest_text)
        if entry.get("name") not in ("[1].order_gram", "[1].order_rhs")
    ]
    assert len(manifest) == len(json.loads(manifest_text)) - 2
    db.execute("UPDATE snapshots SET manifest=?", (json.dumps(manifest),))
    db.commit()
    db.close()
    with _open(tmp_path / "old", config) as again:
        answers += [again.query(q) for q in asks[8:]]
        assert _same_ledger(again.ledger, ledger)
    assert [a.memory_ids for a in answers] == [a.memory_ids for a in expected]
    assert [a.calls for a in answers] == [a.calls for a in expected]


def test_a_snapshot_with_the_paced_price_is_replaced_by_a_full_replay(tmp_path):
    """Folders written before price pacing left the shipped ledger hold a
    ``[1].price`` leaf (float32[], after ``spent``) in their snapshot; they
    reopen by replaying every operation, to the ledger and answers of a run
    that never stopped."""
    import json
    import sqlite3

    config = dataclasses.replace(BEST, snapshot_every=4)
    texts, asks = memories(40), queries(12)
    with _open(tmp_path / "straight", config) as straight:
        straight.add(texts)
        expected = [straight.query(q) for q in asks]
        ledger = straight.ledger
    with _open(tmp_path / "old", config) as first:
        first.add(texts)
        answers = [first.query(q) for q in asks[:8]]
    # What that code wrote: the same leaves plus the price, a float32 scalar
    # like ``spent`` (its blob stands in for the price's).
    db = sqlite3.connect(tmp_path / "old" / "journal.sqlite")
    (manifest_text,) = db.execute("SELECT manifest FROM snapshots").fetchone()
    manifest = []
    for entry in json.loads(manifest_text):
        manifest.append(entry)
        if entry.get("name") == "[1].spent":
            manifest.append(entry | {"name": "[1].price"})
    assert len(manifest) == len(json.loads(manifest_text)) + 1
    db.execute("UPDATE snapshots SET manifest=?", (json.dumps(manifest),))
    db.commit()
    db.close()
    with _open(tmp_path / "old", config) as again:
        answers += [again.query(q) for q in asks[8:]]
        assert _same_ledger(again.ledger, ledger)
    assert [a.memory_ids for a in answers] == [a.memory_ids for a in expected]
    assert [a.calls for a in answers] == [a.calls for a in expected]


def test_best_reports_scores_in_zero_one_never_its_merge_keys(tmp_path):
    """``best`` ranks by merge keys (a paid answer + 2 above the unpaid), but
    a caller is shown the direct answer where paid and the completion
    elsewhere, in [0, 1]."""
    with _open(tmp_path / "best") as retriever:
        retriever.add(memories(40))
        answers = [retriever.query(q, k=8) for q in queries(12)]
    assert any(any(a.anchored) for a in answers)
    for answer in answers:
        assert all(0.0 <= s <= 1.0 for s in answer.scores), answer.scores
        for score, paid in zip(answer.scores, answer.anchored, strict=True):
            if paid:  # a paid memory shows the scorer's own answer
                assert min(abs(score - 1.0), abs(score - 0.05)) < 1e-6


class NothingScorer(KeywordScorer):
    """Every answer 0: the completion sits at the floor of the scale."""

    def value(self, query: str, memory: str) -> float:
        return 0.0


@pytest.mark.parametrize("preset", ["best", "paper", "learned_calls"])
def test_a_completion_at_the_floor_is_shown_as_zero_not_below(tmp_path, preset):
    """The solver keeps an unpaid completion at 0 one ulp below a paid 0 (so
    the answer outranks it); what a caller is shown is still in [0, 1]."""
    config = dataclasses.replace(BEST, preset=preset, block_size=1)
    with OnlineRetriever(
        tmp_path / preset, NothingScorer(), HashEmbedder(), config
    ) as r:
        r.add(memories(40))
        answers = [r.query(q, k=25) for q in queries(6)]
    shown = [s for a in answers for s in a.scores]
    assert min(shown) == 0.0 and all(0.0 <= s <= 1.0 for s in shown), shown
    assert any(not paid for a in answers for paid in a.anchored)
