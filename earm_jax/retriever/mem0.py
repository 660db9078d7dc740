"""EARM behind Mem0: a ``mem0`` reranker that reranks Mem0's whole pool.

Mem0's own ``search(..., rerank=True)`` reranks only the top-k it already cut
(upstream issue mem0 #6448), so a reranker there cannot bring back what
similarity missed. Over-fetch instead: :func:`search` asks Mem0 for ``pool``
results with no score cutoff and reranks all of them through the agent's
:class:`~earm_jax.retriever.online.OnlineRetriever` (Mem0 ids are the retriever's
ids; a memory is registered on first sight, an edited one updated).
:class:`EarmReranker` is also a Mem0 ``BaseReranker`` (``memory.reranker =
EarmReranker(...)``) for code that calls ``search(rerank=True)``; give it the
over-fetched list.

Tenants: Mem0's ``user_id`` selects the tenant's retriever when a
:class:`~earm_jax.retriever.tenants.TenantRetrievers` is given; one user's results
never reach another user's experience.

Install with ``pip install earm_jax[mem0]``. Set ``MEM0_TELEMETRY=False`` and
``MEM0_DIR`` before importing mem0 (docs/agents.md, "Mem0").
"""

from __future__ import annotations

import inspect
from typing import Any

from mem0.reranker.base import BaseReranker

from earm_jax.retriever.online import OnlineRetriever
from earm_jax.retriever.tenants import TenantRetrievers


class EarmReranker(BaseReranker):
    """Reranks Mem0 result dicts through EARM.

    Args:
      retrievers: one agent's retriever, or a :class:`TenantRetrievers` keyed
        by Mem0 ``user_id``.
      use_mem0_scores: pass Mem0's cosine ``score`` as the pool similarity
        (default), else the retriever's embedder computes it (a retriever
        with a free order goes down that order either way).
    """

    def __init__(
        self,
        retrievers: OnlineRetriever | TenantRetrievers,
        use_mem0_scores: bool = True,
    ) -> None:
        self.retrievers = retrievers
        self.use_mem0_scores = use_mem0_scores
        self.last: Any = None

    def _retriever(self, documents: list[dict]) -> OnlineRetriever:
        if isinstance(self.retrievers, OnlineRetriever):
            return self.retrievers
        users = {document.get("user_id") for document in documents}
        if len(users) != 1 or None in users:
            raise ValueError(
                f"documents must all carry one user_id to pick the tenant, got {users}"
            )
        return self.retrievers.get(str(users.pop()))

    def _candidates(
        self, documents: list[dict[str, Any]], top_k: int | None
    ) -> tuple[OnlineRetriever, list[dict[str, Any]], int]:
        retriever = self._retriever(documents)
        candidates = []
        for document in documents:
            entry = {"id": str(document["id"]), "text": document["memory"]}
            if self.use_mem0_scores and document.get("score") is not None:
                entry["score"] = float(document["score"])
            if document.get("metadata"):
                entry["metadata"] = document["metadata"]
            candidates.append(entry)
        if self.use_mem0_scores and any("score" not in c for c in candidates):
            for entry in candidates:
                entry.pop("score", None)
        k = min(top_k or len(documents), len(documents))
        return retriever, candidates, k

    def _ranked(
        self, answer: Any, documents: list[dict[str, Any]]
    ) -> list[dict[str, Any]]:
        self.last = answer
        by_id = {str(document["id"]): document for document in documents}
        score_of = dict(zip(answer.memory_ids, answer.scores, strict=True))
        return [
            {**by_id[mid], "rerank_score": float(score_of[mid])}
            for mid in answer.by_score()
        ]

    def rerank(
        self, query: str, documents: list[dict[str, Any]], top_k: int | None = None
    ) -> list[dict[str, Any]]:
        """Mem0's documents best first, cut to ``top_k``, with ``rerank_score``."""
        if not documents:
            return []
        retriever, candidates, k = self._candidates(documents, top_k)
        return self._ranked(retriever.rerank(query, candidates, k=k), documents)

    async def arerank(
        self, query: str, documents: list[dict[str, Any]], top_k: int | None = None
    ) -> list[dict[str, Any]]:
        """:meth:`rerank`, awaited (:meth:`OnlineRetriever.arerank`)."""
        if not documents:
            return []
        retriever, candidates, k = self._candidates(documents, top_k)
        answer = await retriever.arerank(query, candidates, k=k)
        return self._ranked(answer, documents)


def _request(memory: Any, query: str, user_id: str, pool: int) -> Any:
    """Mem0's search for ``pool`` results of ``user_id``, with no score threshold:
    a result dict (an awaitable of one from a ``mem0.AsyncMemory``)."""
    return memory.search(query, filters={"user_id": user_id}, top_k=pool, threshold=0.0)


def _documents(found: dict[str, Any], user_id: str) -> list[dict[str, Any]]:
    """The result dicts of a Mem0 search, each carrying ``user_id`` (which
    picks the tenant)."""
    documents = found["results"]
    for document in documents:
        document.setdefault("user_id", user_id)
    return documents


def search(
    memory: Any,
    query: str,
    user_id: str,
    reranker: EarmReranker,
    pool: int = 60,
    k: int = 10,
) -> list[dict[str, Any]]:
    """Mem0 search over-fetching ``pool`` results, all reranked by EARM.

    Args:
      memory: a ``mem0.Memory``.
      query, user_id: as for ``Memory.search``.
      reranker: the EARM reranker.
      pool: how many Mem0 results to fetch (no score threshold).
      k: how many to return.
    """
    found = _request(memory, query, user_id, pool)
    return reranker.rerank(query, _documents(found, user_id), top_k=k)


async def asearch(
    memory: Any,
    query: str,
    user_id: str,
    reranker: EarmReranker,
    pool: int = 60,
    k: int = 10,
) -> list[dict[str, Any]]:
    """:func:`search`, awaited: ``memory`` is a ``mem0.AsyncMemory`` (or a
    ``mem0.Memory``, whose search then runs on the event loop), the reranking
    is :meth:`EarmReranker.arerank`."""
    found = _request(memory, query, user_id, pool)
    if inspect.isawaitable(found):
        found = await found
    return await reranker.arerank(query, _documents(found, user_id), top_k=k)


__all__ = ["EarmReranker", "asearch", "search"]
