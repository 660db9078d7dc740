"""Similarity mode: a retriever with no scorer ranks by similarity alone,
calls nothing, shows ``(1 + cos) / 2`` as the score, replays as it ran, and
says so over MCP (``stats``'s ``mode``)."""

from __future__ import annotations

import asyncio
import dataclasses
import sys
from pathlib import Path

import jax
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, TOPICS, HashEmbedder, KeywordScorer  # noqa: E402

from earm_jax.retriever import OnlineRetriever  # noqa: E402
from earm_jax.retriever.maintenance import _FromScratch, _open, check  # noqa: E402

MEMORIES = [
    f"{name} likes {topic} on {day}"
    for name in ("Ann", "Ben", "Cy")
    for topic in TOPICS
    for day in ("monday", "friday")
]
QUERIES = ["who likes hiking?", "who likes chess on friday?", "Ben poetry"]


def _similarity_order(embedder, query: str, k: int) -> tuple[list[int], np.ndarray]:
    """The expected answer: memory indices by descending cosine (ties: first
    added first), and each memory's cosine with the query."""
    vectors = embedder.embed(MEMORIES)
    cosine = vectors @ embedder.embed([query])[0]
    order = np.lexsort((np.arange(len(MEMORIES)), -cosine))
    return [int(i) for i in order[:k]], cosine


# The paper preset plans anchors ahead (query_many); best runs rounds and
# keeps a ledger that a replay must leave as the live run left it.
@pytest.mark.parametrize("preset", ["paper", "best"])
def test_no_scorer_ranks_by_similarity_and_calls_nothing(tmp_path, preset):
    config = dataclasses.replace(CONFIG, preset=preset)
    embedder = HashEmbedder()
    folder = tmp_path / "memory"
    with OnlineRetriever(folder, None, embedder, config) as memory:
        assert memory.similarity_only
        ids = memory.add(MEMORIES)
        answers = [memory.query(QUERIES[0], k=5)]
        answers += memory.query_many(QUERIES[1:], k=5)
        answers.append(asyncio.run(memory.aquery(QUERIES[0], k=5)))
        # A pool retrieved elsewhere, worst first: ranked by its similarity.
        given = [-0.5, -0.25, 0.0, 0.4, 0.9]
        pool = [
            {"id": ids[i], "text": MEMORIES[i], "score": s} for i, s in enumerate(given)
        ]
        reranked = memory.rerank(QUERIES[0], pool, k=3)
        usage = memory.usage()
        live = [np.asarray(x) for x in jax.tree.leaves((memory.state, memory.ledger))]
    assert reranked.by_score() == [ids[4], ids[3], ids[2]]
    assert reranked.scores == pytest.approx([0.5, 0.7, 0.95])
    assert reranked.calls == 0
    for query, answer in zip([*QUERIES, QUERIES[0]], answers, strict=True):
        order, cosine = _similarity_order(embedder, query, 5)
        assert answer.by_score() == [ids[i] for i in order]
        assert answer.calls == 0 and answer.budget == 0
        assert not any(answer.anchored)
        position = {mid: i for i, mid in enumerate(ids)}
        expected = [(1 + cosine[position[mid]]) / 2 for mid in answer.memory_ids]
        np.testing.assert_allclose(answer.scores, expected, atol=1e-6)
        assert all(0.0 <= s <= 1.0 for s in answer.scores)
    assert usage.calls == 0 and usage.queries == 5
    # A replay of the whole journal holds what the live run held (check
    # compares the solver state of the snapshot-based open with it).
    report = check(folder)
    assert report.ok, report.problems
    replayed = _open(folder, _FromScratch)
    try:
        again = jax.tree.leaves((replayed.state, replayed.ledger))
    finally:
        replayed.close()
    assert len(again) == len(live)
    for x, y in zip(live, again, strict=True):
        np.testing.assert_array_equal(x, np.asarray(y))
    with OnlineRetriever(folder, None, embedder, config) as memory:
        again = memory.query(QUERIES[1], k=5)
    assert again.by_score() == answers[1].by_score()


def test_a_folder_keeps_its_mode(tmp_path):
    embedder = HashEmbedder()
    with OnlineRetriever(tmp_path / "plain", None, embedder, CONFIG) as memory:
        memory.add(MEMORIES[:3])
    with pytest.raises(ValueError, match="created in similarity mode"):
        OnlineRetriever(tmp_path / "plain", KeywordScorer(), embedder, CONFIG)
    with OnlineRetriever(tmp_path / "scored", KeywordScorer(), embedder, CONFIG) as m:
        m.add(MEMORIES[:3])
    with pytest.raises(ValueError, match="cannot be opened without one"):
        OnlineRetriever(tmp_path / "scored", None, embedder, CONFIG)


def test_mcp_stats_names_the_mode_and_recall_scores_are_similarity(tmp_path):
    pytest.importorskip("mcp")
    from mcp import Client

    from earm_jax.retriever.mcp_server import build_server
    from earm_jax.retriever.tenants import TenantRetrievers

    embedder = HashEmbedder()
    order, cosine = _similarity_order(embedder, QUERIES[0], 4)

    async def session(tenants) -> tuple[dict, dict]:
        async with Client(build_server(tenants)) as client:
            for text in MEMORIES:
                reply = await client.call_tool("remember", {"text": text})
                assert not reply.is_error, reply.content
            recall = await client.call_tool("recall", {"query": QUERIES[0], "k": 4})
            stats = await client.call_tool("stats", {})
            return recall.structured_content, stats.structured_content

    with TenantRetrievers(tmp_path / "plain", None, embedder, CONFIG) as tenants:
        recall, stats = asyncio.run(session(tenants))
    assert stats["mode"] == "similarity"
    assert stats["calls_paid"] == 0 and stats["queries"] == 1
    assert recall["calls"] == 0
    assert [m["id"] for m in recall["memories"]] == order
    np.testing.assert_allclose(
        [m["score"] for m in recall["memories"]],
        [(1 + cosine[i]) / 2 for i in order],
        atol=1e-6,
    )
    scorer = KeywordScorer()
    with TenantRetrievers(tmp_path / "scored", scorer, embedder, CONFIG) as tenants:
        recall, stats = asyncio.run(session(tenants))
    assert stats["mode"] == "scorer" and stats["calls_paid"] > 0
