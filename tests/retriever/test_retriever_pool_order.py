"""The retriever under a free order (``RetrieverConfig.free_order``): every
pool re-sorted by cosine + word coverage before any call, written out by hand;
every preset pays down it; the setting is stored, compared on reopen and
replayed bit for bit after a crash; and on a LoCoMo conversation the real
build's free order finds more evidence than the similarity order."""

from __future__ import annotations

import asyncio
import dataclasses
import math
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from optional_extras import require_extra

from earm_jax.retriever import OnlineRetriever, RetrieverConfig, check
from earm_jax.scoring.word_coverage import word_coverage

sys.path.insert(0, str(Path(__file__).parent))
from fakes import (  # noqa: E402
    FREE_ORDER,
    HashEmbedder,
    KeywordScorer,
    NamedHashEmbedder,
    memories,
    queries,
    store_config,
    stored_config,
)
from test_retriever import CONFIG  # noqa: E402

FREE = FREE_ORDER
TOP = dataclasses.replace(
    CONFIG, preset="top_similarity", pool_size=20, call_budget=0.25, free_order=FREE
)
CALLS = math.ceil(0.25 * 20)


def _open(folder, config=TOP, scorer=None, embedder=None):
    return OnlineRetriever(
        folder,
        KeywordScorer() if scorer is None else scorer,
        NamedHashEmbedder() if embedder is None else embedder,
        config,
    )


def _written_out(texts, ask, pool_size, order=FREE):
    """The free order of ``ask``'s pool by hand: the ``pool_size`` most
    similar memories, then ``beta cos + delta cov + gamma`` descending."""
    vectors = NamedHashEmbedder().embed(texts)
    cosine = (vectors @ NamedHashEmbedder().embed([ask])[0]).astype(np.float32)
    members = np.lexsort((np.arange(len(texts)), -cosine))[:pool_size]
    coverage = word_coverage(ask, [texts[m] for m in members])
    key = (
        order.similarity_weight * cosine[members].astype(np.float64)
        + order.coverage_weight * coverage
        + order.shift
    )
    ranked = np.lexsort((np.arange(len(members)), -key))
    return members[ranked], key[ranked], members


def _answered(answers, fields) -> list[tuple]:
    """The ``fields`` of each answer, in order (two runs compared at once)."""
    return [tuple(getattr(answer, f) for f in fields) for answer in answers]


def _same_tree(got, want) -> bool:
    return jax.tree.structure(got) == jax.tree.structure(want) and all(
        bool(np.array_equal(np.asarray(a), np.asarray(b)))
        for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True)
    )


def test_every_pool_goes_down_the_free_order_and_its_top_is_paid(tmp_path):
    require_extra("wordfreq")
    texts, asks = memories(40), queries(8)
    scorer = KeywordScorer()
    differs = 0
    with _open(tmp_path, scorer=scorer) as agent:
        agent.add(texts)  # rows 0..39, ids 0..39
        for ask in asks:
            rows, key, by_similarity = _written_out(texts, ask, TOP.pool_size)
            vector = agent._embed_queries([ask], "query")[0]
            pool = agent._query_pool(ask, vector, None)
            assert np.array_equal(np.asarray(pool.candidates), rows)
            np.testing.assert_allclose(np.asarray(pool.similarity), key, rtol=1e-6)
            assert bool(np.asarray(pool.valid).all())
            before = len(scorer.paid)
            answer = agent.query(ask)
            assert answer.calls + answer.cache_hits == CALLS
            head = {texts[r] for r in rows[:CALLS]}
            assert {m for _, m in scorer.paid[before:]} <= head
            differs += set(rows[:CALLS]) != set(by_similarity[:CALLS])
    assert differs > 0  # the similarity order would have paid others


def test_similarity_mode_ranks_by_the_free_order_and_shows_its_probability(
    tmp_path,
):
    require_extra("wordfreq")
    texts = memories(40)
    config = dataclasses.replace(TOP, preset="paper")
    with OnlineRetriever(tmp_path, None, NamedHashEmbedder(), config) as agent:
        agent.add(texts)
        for ask in queries(4):
            rows, key, _ = _written_out(texts, ask, TOP.pool_size)
            answer = agent.query(ask, k=5)
            assert answer.ranked_ids == [int(r) for r in rows[:5]]
            shown = dict(zip(answer.memory_ids, answer.scores, strict=True))
            for r, z in zip(rows[:5], key[:5], strict=True):
                assert shown[int(r)] == pytest.approx(1 / (1 + math.exp(-z)), 1e-6)
            assert answer.calls == 0


def test_rerank_goes_down_the_free_order_whatever_score_a_caller_gives(tmp_path):
    require_extra("wordfreq")
    texts, ask = memories(20), queries(1)[0]
    given = [
        {"id": f"m{i}", "text": t, "score": float(s)}
        for i, (t, s) in enumerate(
            zip(texts, np.random.default_rng(3).random(20), strict=True)
        )
    ]
    bare = [{"id": g["id"], "text": g["text"]} for g in given]
    with _open(tmp_path) as agent:
        answer = agent.rerank(ask, given, k=3)
        vector = agent._embed_queries([ask], "query")[0]
        ids = [g["id"] for g in given]
        with_scores = agent._candidate_pool(
            ask, ids, [g["score"] for g in given], vector
        )
        without = agent._candidate_pool(ask, ids, None, vector)
        assert np.array_equal(
            np.asarray(with_scores.candidates), np.asarray(without.candidates)
        )
        key = np.asarray(without.similarity)[: len(texts)]
        assert np.all(np.diff(key) <= 0)
        assert answer.calls + answer.cache_hits == CALLS
        assert len(agent.rerank(ask, bare, k=3).memory_ids) == 3


def test_query_many_and_the_async_path_equal_query_in_turn(tmp_path):
    require_extra("wordfreq")
    texts, asks = memories(40), queries(6)
    paper = dataclasses.replace(TOP, preset="paper")
    best = dataclasses.replace(TOP, preset="best", pool_size=30, call_budget=0.3)
    for name, config, run in (
        ("paper", paper, lambda agent: agent.query_many(asks)),
        ("best", best, lambda agent: asyncio.run(agent.aquery_many(asks))),
    ):
        with _open(tmp_path / f"{name}-one", config) as one:
            one.add(texts)
            expected = [one.query(ask) for ask in asks]
            state = one.state
        with _open(tmp_path / f"{name}-many", config) as many:
            many.add(texts)
            got = run(many)
            assert _same_tree(many.state, state)
        shown = ("memory_ids", "scores", "anchored")
        assert _answered(got, shown) == _answered(expected, shown)


def test_a_crash_replays_the_free_order_bit_for_bit(tmp_path):
    require_extra("wordfreq")
    config = dataclasses.replace(
        TOP, preset="best", pool_size=30, call_budget=0.3, snapshot_every=1000
    )
    texts, asks = memories(60), queries(12)
    with _open(tmp_path / "straight", config) as straight:
        straight.add(texts)
        expected = [straight.query(q) for q in asks]
        state, ledger = straight.state, straight.ledger
    first = _open(tmp_path / "b", config)
    first.add(texts)
    answers = [first.query(q) for q in asks[:7]]
    first._release()  # what kill -9 leaves: no close(), no final snapshot
    with _open(tmp_path / "b", None) as again:
        assert again.config.free_order == FREE
        answers += [again.query(q) for q in asks[7:]]
        assert _same_tree(again.state, state) and _same_tree(again.ledger, ledger)
    # The deep check replays every recorded pool as it went down it.
    report = check(tmp_path / "b", deep=True)
    assert report.ok, report.problems
    shown = ("memory_ids", "scores", "calls")
    assert _answered(answers, shown) == _answered(expected, shown)


def test_the_free_order_is_stored_and_a_reopen_must_agree(tmp_path):
    with _open(tmp_path / "free") as agent:
        agent.add(memories(8))
    stored = stored_config(tmp_path / "free")
    assert stored["free_order"] == FREE.to_json()
    assert RetrieverConfig(**stored).free_order == FREE  # read back from JSON
    for other in (
        dataclasses.replace(TOP, free_order=None),
        dataclasses.replace(TOP, free_order=dataclasses.replace(FREE, shift=0.4)),
    ):
        with pytest.raises(ValueError, match="other settings \\(free_order: stored"):
            _open(tmp_path / "free", other)

    # A folder made before the setting stored none: the similarity order.
    plain = dataclasses.replace(TOP, free_order=None)
    with _open(tmp_path / "old", plain) as agent:
        agent.add(memories(8))
    stored = stored_config(tmp_path / "old")
    del stored["free_order"]
    store_config(tmp_path / "old", stored)
    with _open(tmp_path / "old", None) as again:
        assert again.config.free_order is None and again.config.pool_order == (
            "similarity"
        )
    with _open(tmp_path / "old", plain) as again:
        assert again.num_memories == 8


def test_a_free_order_that_cannot_apply_is_refused_before_anything_is_stored(
    tmp_path,
):
    with pytest.raises(ValueError, match="free_order must be a blend of the texts"):
        dataclasses.replace(TOP, free_order=dataclasses.replace(FREE, logit_weight=1))
    with pytest.raises(ValueError, match="free_order must be a SimilarityBlend"):
        dataclasses.replace(TOP, free_order=(1.0, 2.0))
    with pytest.raises(ValueError, match="free_order: not a similarity blend"):
        dataclasses.replace(TOP, free_order={"similarity_weight": 1.0})
    # The weights were fitted on another encoder's cosine.
    with pytest.raises(ValueError, match="fitted on the cosine of 'hash-64'.*names"):
        _open(tmp_path, embedder=HashEmbedder())
    with _open(tmp_path, dataclasses.replace(TOP, free_order=None)) as agent:
        assert agent.config.pool_order == "similarity"  # created now, as new


@pytest.mark.locomo
def test_the_builds_free_order_finds_more_evidence_on_a_conversation_it_never_saw(
    tmp_path, conversations, embedding_cache_dir
):
    """Conversation 26's turns as an agent's memories, its questions asked in
    similarity mode (no scorer): the free order of the fold that held 26 out
    (from the committed recorded answers) puts more of each question's
    evidence in the top 10 than the similarity order does."""
    require_extra("wordfreq")
    from earm_jax.locomo.memories import build_memories
    from earm_jax.scoring.recorded_answers import RecordedAnswers
    from earm_jax.store.embeddings import Embedder

    recorded = RecordedAnswers.load(
        Path(__file__).parents[2]
        / "experiments/scores/turns-500steps-bf16-coverage-scores.npz"
    )
    order = recorded.free_order_of("26")
    memory_set = build_memories(
        next(c for c in conversations if c.sample_id == "26"), "turns"
    )
    texts = [m.text for m in memory_set.memories]
    asked = [
        (q.question, set(rows))
        for q, rows in zip(memory_set.queries, memory_set.relevant_rows, strict=True)
        if rows
    ]
    embedder = Embedder(cache_dir=embedding_cache_dir)
    recall = {}
    for free_order in (None, order):
        config = RetrieverConfig(
            preset="paper", precompile=False, free_order=free_order
        )
        with OnlineRetriever(
            tmp_path / str(free_order is None), None, embedder, config
        ) as agent:
            ids = agent.add(texts)
            row_of = {mid: row for row, mid in enumerate(ids)}
            answers = agent.query_many([q for q, _ in asked], k=10)
        recall[free_order is None] = np.mean(
            [
                len({row_of[m] for m in a.memory_ids} & rows) / len(rows)
                for a, (_, rows) in zip(answers, asked, strict=True)
            ]
        )
    similarity, free = recall[True], recall[False]
    print(f"conversation 26, Recall@10: similarity {similarity:.3f}, free {free:.3f}")
    assert free > similarity + 0.10, (similarity, free)
