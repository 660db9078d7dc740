"""EARM inside Mem0 (offline, real Mem0 + Qdrant in memory) and LangChain."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fakes import HashEmbedder, KeywordScorer, offline_mem0  # noqa: E402
from optional_extras import require_extra  # noqa: E402

from earm_jax.retriever import OnlineRetriever, RetrieverConfig  # noqa: E402
from earm_jax.retriever.tenants import TenantRetrievers  # noqa: E402

CONFIG = RetrieverConfig(
    pool_size=60,
    top_k=5,
    rank=2,
    initial_memories=128,
    initial_queries=32,
    precompile=False,
    preset="paper",
)
TOPICS = ["hiking", "painting", "guitar", "cooking", "chess", "swimming", "poetry"]


def _facts(user):
    facts = [
        f"{user} mentioned the weather on day {i} and a {TOPICS[i % 7]} magazine."
        for i in range(40)
    ]
    facts[33] = f"{user} won the regional chess final on day 33."
    return facts


@pytest.fixture(scope="module")
def mem0_memory(tmp_path_factory):
    folder = tmp_path_factory.mktemp("mem0")
    memory = offline_mem0(folder)
    for user in ("alice", "bob"):
        for fact in _facts(user):
            memory.add(fact, user_id=user, infer=False)
    yield memory
    memory.vector_store.client.close()


def test_mem0_pool_reranked_through_earm_per_user(tmp_path, mem0_memory):
    from earm_jax.retriever.mem0 import EarmReranker, search

    scorer = KeywordScorer()
    with TenantRetrievers(tmp_path, scorer, HashEmbedder(), CONFIG) as tenants:
        reranker = EarmReranker(tenants)
        query = "Who won at chess?"
        plain = mem0_memory.search(
            query, filters={"user_id": "alice"}, top_k=5, threshold=0.0
        )["results"]
        ranked = search(mem0_memory, query, "alice", reranker, pool=40, k=5)
        assert len(ranked) == 5 and all("rerank_score" in d for d in ranked)
        assert all(d["user_id"] == "alice" for d in ranked)
        assert ranked[0]["memory"] == "alice won the regional chess final on day 33."
        assert len(plain) == 5
        # Registered on first sight in alice's retriever only.
        assert 5 < tenants.get("alice").num_memories <= 40
        assert tenants.tenants() == ["alice"]
        bob = search(mem0_memory, query, "bob", reranker, pool=40, k=3)
        assert all(d["user_id"] == "bob" for d in bob)
        assert 3 < tenants.get("bob").num_memories <= 40
        # As a Mem0 reranker object, too (mem0 calls reranker.rerank(q, docs, k)).
        mixed = plain + bob
        with pytest.raises(ValueError, match="one user_id"):
            reranker.rerank(query, mixed, 3)


def test_mem0_async_path_awaits_the_retriever(tmp_path, mem0_memory):
    import asyncio

    from earm_jax.retriever.mem0 import EarmReranker, asearch

    class AwaitedScorer(KeywordScorer):
        def score_many(self, requests):
            raise AssertionError("the synchronous scorer path was used")

        async def ascore_many(self, requests):
            return KeywordScorer.score_many(self, requests)

    with TenantRetrievers(tmp_path, AwaitedScorer(), HashEmbedder(), CONFIG) as tenants:
        reranker = EarmReranker(tenants)
        query = "Who won at chess?"
        ranked = asyncio.run(
            asearch(mem0_memory, query, "alice", reranker, pool=40, k=5)
        )
        assert len(ranked) == 5 and all("rerank_score" in d for d in ranked)
        assert ranked[0]["memory"] == "alice won the regional chess final on day 33."
        assert asyncio.run(reranker.arerank(query, [])) == []


def test_langchain_retriever_own_pool_and_external_pool(tmp_path):
    require_extra("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from earm_jax.retriever.langchain import EarmRetriever

    with OnlineRetriever(
        tmp_path / "a", KeywordScorer(), HashEmbedder(), CONFIG
    ) as agent:
        agent.add(_facts("carol"), metadata=[{"day": i} for i in range(40)])
        lc = EarmRetriever(retriever=agent, k=3)
        documents = lc.invoke("Who won at chess?")
        assert len(documents) == 3
        assert (
            documents[0].page_content == "carol won the regional chess final on day 33."
        )
        assert documents[0].metadata["day"] == 33
        assert documents[0].metadata["earm_anchored"] is True

        class Fixed(BaseRetriever):
            def _get_relevant_documents(self, query, *, run_manager):
                return [
                    Document(id=f"ext-{i}", page_content=text)
                    for i, text in enumerate(_facts("dave")[25:])
                ]

        external = EarmRetriever(retriever=agent, base_retriever=Fixed(), k=2)
        documents = external.invoke("Who won at chess?")
        assert documents[0].id == "ext-8"
        assert agent.num_memories == 40 + 15


def test_adapters_return_fresh_text_and_metadata_after_an_edit(tmp_path):
    """Mem0 and LangChain pools carry the caller's current text and metadata;
    the retriever records both (an edit for a new text), so what it returns
    is never stale."""
    require_extra("langchain_core")
    from langchain_core.documents import Document
    from langchain_core.retrievers import BaseRetriever

    from earm_jax.retriever.langchain import EarmRetriever

    versions = {"text": "Sam plays chess.", "v": 1}

    class Changing(BaseRetriever):
        def _get_relevant_documents(self, query, *, run_manager):
            return [
                Document(
                    id="c1",
                    page_content=versions["text"],
                    metadata={"v": versions["v"]},
                ),
                Document(id="c2", page_content="Sam likes tea.", metadata={"v": 1}),
            ]

    with OnlineRetriever(
        tmp_path / "lc", KeywordScorer(), HashEmbedder(), CONFIG
    ) as agent:
        lc = EarmRetriever(retriever=agent, base_retriever=Changing(), k=2)
        first = {d.id: d for d in lc.invoke("Who plays chess?")}
        assert first["c1"].metadata["v"] == 1
        versions.update(text="Sam plays chess on Sundays.", v=3)
        again = {d.id: d for d in lc.invoke("Who plays chess?")}
        assert again["c1"].metadata["v"] == 3
        assert again["c1"].page_content == "Sam plays chess on Sundays."
        assert agent.get(["c1"])[0].metadata == {"v": 3}

    require_extra("mem0")
    from earm_jax.retriever.mem0 import EarmReranker

    with TenantRetrievers(
        tmp_path / "mem0", KeywordScorer(), HashEmbedder(), CONFIG
    ) as tenants:
        reranker = EarmReranker(tenants)

        def documents(text, version):
            return [
                {
                    "id": "d1",
                    "memory": text,
                    "user_id": "u",
                    "score": 0.9,
                    "metadata": {"v": version},
                },
                {
                    "id": "d2",
                    "memory": "Sam likes tea.",
                    "user_id": "u",
                    "score": 0.5,
                    "metadata": {"v": 1},
                },
            ]

        reranker.rerank("Who plays chess?", documents("Sam plays chess.", 1), 2)
        ranked = reranker.rerank(
            "Who plays chess?", documents("Sam plays chess daily.", 3), 2
        )
        assert {d["id"]: d["metadata"] for d in ranked}["d1"] == {"v": 3}
        stored = tenants.get("u").get(["d1"])[0]
        assert (stored.text, stored.metadata) == ("Sam plays chess daily.", {"v": 3})
        answer = reranker.last
        assert dict(zip(answer.memory_ids, answer.metadata, strict=True))["d1"] == {
            "v": 3
        }
