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

from langchain_core.callbacks import CallbackManagerForRetrieverRun
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
            answer = self.retriever.query(query, k=self.k)
        else:
            pool = self.base_retriever.invoke(
                query, config={"callbacks": run_manager.get_child()}
            )
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
            if not candidates:
                return []
            answer = self.retriever.rerank(query, candidates, k=self.k)
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


__all__ = ["EarmRetriever"]
