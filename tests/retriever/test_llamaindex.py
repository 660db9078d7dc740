"""EARM as a LlamaIndex node postprocessor, in a real query engine (local
embedding, mock LLM: offline)."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer  # noqa: E402
from optional_extras import require_extra  # noqa: E402

from earm_jax.retriever import OnlineRetriever  # noqa: E402

require_extra("llama_index.core")

from llama_index.core import (  # noqa: E402
    Document,
    VectorStoreIndex,
)
from llama_index.core.embeddings import BaseEmbedding  # noqa: E402
from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.response_synthesizers.no_text import NoText  # noqa: E402

TOPICS = ["hiking", "painting", "guitar", "cooking", "chess", "swimming", "poetry"]


class LocalEmbedding(BaseEmbedding):
    """The tests' hashing embedder as a LlamaIndex embedding (no model)."""

    def _vector(self, text: str) -> list[float]:
        return [float(x) for x in HashEmbedder().embed([text])[0]]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


def _documents():
    facts = [
        f"Sam mentioned the weather on day {i} and a {TOPICS[i % 7]} magazine."
        for i in range(40)
    ]
    facts[33] = "Sam won the regional chess final on day 33."
    return [Document(text=t, id_=f"fact-{i}") for i, t in enumerate(facts)]


def test_postprocessor_reranks_the_whole_overfetched_pool(tmp_path):
    from earm_jax.retriever.llamaindex import EarmReranker

    index = VectorStoreIndex.from_documents(
        _documents(), embed_model=LocalEmbedding(embed_batch_size=64)
    )
    scorer = KeywordScorer()
    with OnlineRetriever(tmp_path, scorer, HashEmbedder(), CONFIG) as agent:
        reranker = EarmReranker(agent, top_n=3)
        engine = RetrieverQueryEngine(
            retriever=index.as_retriever(similarity_top_k=12),
            response_synthesizer=NoText(llm=MockLLM()),
            node_postprocessors=[reranker],
        )
        response = engine.query("Who won at chess?")
        nodes = response.source_nodes
        assert len(nodes) == 3
        # Every one of the 12 over-fetched nodes was a candidate.
        assert agent.num_memories == 12 and agent.num_queries == 1
        scores = [n.score for n in nodes]
        assert scores == sorted(scores, reverse=True)
        if any("chess" in m for _, m in scorer.paid):
            assert "chess" in nodes[0].node.get_content()
        # The async path awaits arerank.
        nodes = asyncio.run(engine.aquery("What about poetry?")).source_nodes
        assert len(nodes) == 3 and agent.num_queries == 2
        assert reranker.postprocess_nodes([], query_str="x") == []
        with pytest.raises(ValueError, match="QueryBundle"):
            reranker.postprocess_nodes(nodes)
