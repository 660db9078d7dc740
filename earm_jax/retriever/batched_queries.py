"""Several queries at once (:meth:`BatchedQueries.query_many`): the anchors
of every query planned up front and paid in one scorer request, the answers
those of asking each in turn. Part of
:class:`~earm_jax.retriever.online.OnlineRetriever`."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from earm_jax.retriever.config import Retrieved
from earm_jax.retriever.memory_rows import MemoryRows
from earm_jax.retriever.serial import serialized
from earm_jax.retriever.validation import check_k, check_texts
from earm_jax.scoring.base import PairScore


class BatchedQueries:
    """``query_many`` (the rows, the experience, the payer, the journal and
    the one-query steps come from the retriever)."""

    config: Any
    rows: MemoryRows
    experience: Any
    payer: Any
    similarity_only: bool
    _journal: Any

    @serialized
    def query_many(self, texts: Sequence[str], k: int | None = None) -> list[Retrieved]:
        """Answers several queries in order, their anchors in one scorer request.

        The answers equal those of calling :meth:`query` on each in turn: the
        anchors of query ``i`` are drawn from the state after query ``i - 1``
        (the policy needs only the query count and the memories, so they can be
        drawn up front); should a policy's draw depend on more, the missing
        pairs are paid at that query.
        """
        self._check_open()
        texts = check_texts(texts)
        k = check_k(k, self.config.top_k)
        if not texts:
            return []
        if not self.rows.row_of:
            raise ValueError("the retriever holds no memory yet: add() some first")
        vectors = self._embed_queries(texts, "texts")
        pools = [
            self._pool_from_vector(text, vector, None)
            for text, vector in zip(texts, vectors, strict=True)
        ]
        experience = self.experience
        if experience.ledger is not None or self.similarity_only:
            # The best preset's rounds depend on the answers of earlier rounds:
            # no anchors can be planned ahead, so the queries run in turn
            # (without a scorer there is nothing to plan).
            return [
                self._answer(text, pool, k, vector=vector)
                for text, pool, vector in zip(texts, pools, vectors, strict=True)
            ]
        start = experience.count
        memory_texts = self.rows.texts
        # Plan every query's anchors up front (select reads only the count and
        # the memories), pay all unpaid pairs in one request, then answer in order.
        requests: dict[str, list[str]] = {}
        for i, (text, pool) in enumerate(zip(texts, pools, strict=True)):
            ahead = experience.state._replace(count=jnp.asarray(start + i, jnp.int32))
            _, rows, cached = self._prepare(text, pool, start + i, ahead)
            want = requests.setdefault(text, [])
            for r, v in zip(rows, cached, strict=True):
                if v is None and memory_texts[r] not in want:
                    want.append(memory_texts[r])
        batch = [(q, m) for q, m in requests.items() if m]
        fresh: dict[tuple[str, str], PairScore] = {}
        for (q, memories), answers in zip(batch, self.payer.score(batch), strict=True):
            for memory, answer in zip(memories, answers, strict=True):
                fresh[(q, memory)] = answer
        self._journal.put_scores(
            self.payer.key,
            [(q, m, a.value) for (q, m), a in fresh.items() if a.ok],
            start,
        )
        results = []
        used: set[tuple[str, str]] = set()
        for text, pool in zip(texts, pools, strict=True):
            index = experience.count
            experience.ensure_room(experience.rows_applied, index + 1)
            positions, rows, cached = self._prepare(text, pool, index, experience.state)
            answers, calls, hits, unplanned = [], 0, 0, False
            for r, v in zip(rows, cached, strict=True):
                pair = (text, memory_texts[r])
                if pair in fresh and pair not in used:
                    answers.append(fresh[pair])
                    used.add(pair)
                    calls += 1
                elif v is not None:
                    answers.append(PairScore.success(v))
                    hits += 1
                else:
                    unplanned = True
            if unplanned:  # the policy drew other anchors than planned
                answers, more, hits = self._pay(text, rows, cached, index)
                calls += more
            results.append(
                self._finish(text, pool, positions, rows, answers, k, calls, hits)
            )
        return results


__all__ = ["BatchedQueries"]
