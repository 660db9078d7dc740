"""EARM as a LangChain retriever (``langchain_core.retrievers.BaseRetriever``).

Two ways to use it:

* ``EarmRetriever(retriever=agent)``: the agent's
  :class:`~earm_jax.retriever.online.OnlineRetriever` retrieves and reranks;
* ``EarmRetriever(retriever=agent, base_retriever=other, pool=60)``: another
  LangChain retriever (a vector store's ``as_retriever(k=60)``) fetches the pool
  and EARM reranks all of it (documents need an ``id``).

Install with ``pip install earm_jax[langchain]``.
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import (
    AsyncCallbackManagerForRetrieverRun,
    CallbackManagerForRetrieverRun,
)
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict


class EarmRetriever(BaseRetriever):
    """LangChain retriever over an EARM :class:`OnlineRetriever`.

    Attributes:
      retriever: the agent's retriever.
      k: documents to return (``None``: the retriever's ``top_k``).
      base_retriever: optional LangChain retriever that fetches the pool.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    retriever: Any
    k: int | None = None
    base_retriever: BaseRetriever | None = None

    def _get_relevant_documents(
        self, query: str, *, run_manager: CallbackManagerForRetrieverRun
    ) -> list[Document]:
        if self.base_retriever is None:
            return self._documents(self.retriever.query(query, k=self.k))
        pool = self.base_retriever.invoke(
            query, config={"callbacks": run_manager.get_child()}
        )
        candidates = _candidates(pool)
        if not candidates:
            return []
        return self._documents(self.retriever.rerank(query, candidates, k=self.k))

    async def _aget_relevant_documents(
        self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun
    ) -> list[Document]:
        """The coroutine path of ``ainvoke``: awaits the retriever's
        ``aquery`` / ``arerank`` (no worker thread)."""
        if self.base_retriever is None:
            return self._documents(await self.retriever.aquery(query, k=self.k))
        pool = await self.base_retriever.ainvoke(
            query, config={"callbacks": run_manager.get_child()}
        )
        candidates = _candidates(pool)
        if not candidates:
            return []
        answer = await self.retriever.arerank(query, candidates, k=self.k)
        return self._documents(answer)

    @staticmethod
    def _documents(answer: Any) -> list[Document]:
        ranked = dict(
            zip(answer.memory_ids, range(len(answer.memory_ids)), strict=True)
        )
        documents = []
        for mid in answer.by_score():
            i = ranked[mid]
            documents.append(
                Document(
                    id=str(mid),
                    page_content=answer.texts[i],
                    metadata={
                        **answer.metadata[i],
                        "earm_score": answer.scores[i],
                        "earm_anchored": answer.anchored[i],
                        "earm_query_index": answer.query_index,
                    },
                )
            )
        return documents


def _candidates(pool: list[Document]) -> list[dict[str, Any]]:
    candidates = []
    for position, document in enumerate(pool):
        if document.id is None:
            raise ValueError(
                f"base_retriever returned document {position} without an id"
            )
        candidates.append(
            {
                "id": str(document.id),
                "text": document.page_content,
                "metadata": dict(document.metadata),
            }
        )
    return candidates


__all__ = ["EarmRetriever"]
