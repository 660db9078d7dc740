"""EARM as a LlamaIndex node postprocessor (a reranker).

A LlamaIndex retriever over-fetches (``similarity_top_k=60``); the
postprocessor reranks all the nodes it returned through the agent's
:class:`~earm_jax.retriever.online.OnlineRetriever` and keeps the top
``top_n``::

    engine = index.as_query_engine(
        similarity_top_k=60, node_postprocessors=[EarmReranker(agent, top_n=5)]
    )

Node ids are the retriever's ids (a node is registered on first sight; a node
whose text changed is updated, a new version with no evidence); the
retriever's similarity is the node's score when every node has one, else the
retriever's own embedder's cosine. Returned nodes carry the EARM score as
their ``score``, best first. ``apostprocess_nodes`` awaits
:meth:`~earm_jax.retriever.online.OnlineRetriever.arerank` (no worker thread).

Install with ``pip install earm_jax[llamaindex]``.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.bridge.pydantic import Field
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle


class EarmReranker(BaseNodePostprocessor):
    """Reranks LlamaIndex nodes through EARM; keeps the best ``top_n``.

    Attributes:
      retriever: the agent's :class:`OnlineRetriever`.
      top_n: nodes to keep (``None``: the retriever's ``top_k``).
      use_node_scores: pass the nodes' similarity scores as the pool's
        similarity (default), else the retriever's embedder computes it (a
        retriever with a free order goes down that order either way).
    """

    retriever: Any = Field(description="The agent's OnlineRetriever.")
    top_n: int | None = Field(default=None, description="Nodes to keep.")
    use_node_scores: bool = Field(default=True)

    def __init__(self, retriever: Any = None, top_n: int | None = None, **data):
        super().__init__(retriever=retriever, top_n=top_n, **data)

    @classmethod
    def class_name(cls) -> str:
        return "EarmReranker"

    def _candidates(self, nodes: list[NodeWithScore]) -> list[dict[str, Any]]:
        scored = self.use_node_scores and all(n.score is not None for n in nodes)
        candidates = []
        for item in nodes:
            entry = {
                "id": item.node.node_id,
                "text": item.node.get_content(metadata_mode=MetadataMode.NONE),
            }
            if scored:
                entry["score"] = float(item.score)
            candidates.append(entry)
        return candidates

    def _k(self, nodes: list[NodeWithScore]) -> int:
        k = self.top_n or self.retriever.config.top_k
        return min(k, len(nodes))

    @staticmethod
    def _ranked(answer: Any, nodes: list[NodeWithScore]) -> list[NodeWithScore]:
        by_id = {item.node.node_id: item.node for item in nodes}
        score_of = dict(zip(answer.memory_ids, answer.scores, strict=True))
        return [
            NodeWithScore(node=by_id[mid], score=float(score_of[mid]))
            for mid in answer.by_score()
        ]

    def _check(self, nodes, query_bundle) -> bool:
        if query_bundle is None:
            raise ValueError("EarmReranker needs the query (a QueryBundle)")
        return bool(nodes)

    def _postprocess_nodes(
        self,
        nodes: list[NodeWithScore],
        query_bundle: QueryBundle | None = None,
    ) -> list[NodeWithScore]:
        if not self._check(nodes, query_bundle):
            return []
        answer = self.retriever.rerank(
            query_bundle.query_str, self._candidates(nodes), k=self._k(nodes)
        )
        return self._ranked(answer, nodes)

    async def _apostprocess_nodes(
        self,
        nodes: list[NodeWithScore],
        query_bundle: QueryBundle | None = None,
    ) -> list[NodeWithScore]:
        if not self._check(nodes, query_bundle):
            return []
        answer = await self.retriever.arerank(
            query_bundle.query_str, self._candidates(nodes), k=self._k(nodes)
        )
        return self._ranked(answer, nodes)


__all__ = ["EarmReranker"]
