"""The pools a query goes down: a query's most similar memories, or the
candidates ``rerank`` is given (checked, the unknown ones added and the edited
ones updated, the live ones kept), each in the folder's pool order (the
similarity, or a free order: :mod:`earm_jax.retriever.pool_order`). Part of
:class:`~earm_jax.retriever.online.OnlineRetriever`; it holds no state."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from earm_jax.base import Query
from earm_jax.retriever.memory_rows import MemoryRows
from earm_jax.retriever.pool_order import in_free_order
from earm_jax.retriever.validation import check_id, check_k, check_text, metadata_json


class CandidatePools:
    """The pools of ``query`` and ``rerank`` (the rows, the experience and
    ``add``/``update`` come from the retriever)."""

    config: Any
    rows: MemoryRows
    experience: Any

    def _parse_candidates(self, query, candidates, k):
        """The checked query, ``k`` and ``(id, text, score, metadata)`` entries."""
        query = check_text(query, "query")
        k = check_k(k, self.config.top_k)
        if isinstance(candidates, str | Mapping) or not isinstance(
            candidates, Sequence
        ):
            raise ValueError("candidates must be a list of {'id', 'text'} dicts")
        if not candidates:
            raise ValueError("candidates is empty")
        if len(candidates) > self.config.pool_size:
            raise ValueError(
                f"{len(candidates)} candidates exceed pool_size={self.config.pool_size}"
            )
        parsed = []
        for i, entry in enumerate(candidates):
            if isinstance(entry, Mapping):
                mid, text = entry.get("id"), entry.get("text")
                score, meta = entry.get("score"), entry.get("metadata")
            elif isinstance(entry, tuple) and len(entry) == 2:
                (mid, text), score, meta = entry, None, None
            else:
                raise ValueError(
                    f"candidates[{i}] must be a dict or an (id, text) pair"
                )
            mid = check_id(mid, f"candidates[{i}].id")
            text = check_text(text, f"candidates[{i}].text")
            if score is not None and (
                not isinstance(score, int | float | np.floating)
                or not math.isfinite(score)
            ):
                raise ValueError(f"candidates[{i}].score must be a finite number")
            metadata_json(meta, f"candidates[{i}].metadata")
            if mid in self.rows.retired_ids and mid not in self.rows.row_of:
                raise ValueError(f"candidates[{i}]: id {mid!r} was deleted")
            parsed.append((mid, text, score, meta))
        if len({p[0] for p in parsed}) != len(parsed):
            raise ValueError("candidates hold an id twice")
        if any(p[2] is not None for p in parsed) and any(p[2] is None for p in parsed):
            raise ValueError("give a score for every candidate or for none")
        return query, k, parsed

    def _register_candidates(self, parsed) -> None:
        """Adds the unknown candidates, updates the edited ones."""
        table = self.rows
        new = [(m, t, meta) for m, t, _, meta in parsed if m not in table.row_of]
        if new:
            self.add(
                [t for _, t, _ in new],
                [meta for _, _, meta in new],
                [m for m, _, _ in new],
            )
        # A known id with a new text is an edit (a new version, no evidence);
        # new metadata alone replaces the stored metadata.
        added = {m for m, _, _ in new}
        for mid, text, _, meta in parsed:
            if mid in added:
                continue
            row = table.row_of[mid]
            if table.texts[row] != text or (
                meta is not None and dict(meta) != table.metadata[row]
            ):
                self.update(mid, text, meta)

    def _query_pool(
        self, text: str, vector: np.ndarray, where: Mapping | None
    ) -> Query:
        """The candidate pool of a query: its most similar memories among those
        matching ``where`` (a one-line error if there is none), in the
        folder's pool order."""
        if not self.rows.row_of:
            raise ValueError("the retriever holds no memory yet: add() some first")
        pool = self._pool_from_vector(text, vector, where)
        if not bool(np.asarray(pool.valid).any()):
            raise ValueError(f"no memory matches where={dict(where or {})!r}")
        return pool

    def _pool_from_vector(
        self, text: str, vector: np.ndarray, where: Mapping | None
    ) -> Query:
        pool = self.rows.similarity_pool(
            vector, where, self.experience.visible_rows, self.config.pool_size
        )
        return self._in_pool_order(text, pool)

    def _in_pool_order(self, text: str, pool: Query) -> Query:
        """``pool`` (its ``similarity`` the cosine) in the folder's pool order
        (:mod:`earm_jax.retriever.pool_order`)."""
        order = self.config.free_order
        if order is None:
            return pool
        count = int(np.asarray(pool.valid).sum())
        cosines = np.asarray(pool.similarity)[:count]
        return in_free_order(pool, order, text, self.rows.texts, cosines)

    def _candidate_pool(self, text, ids, scores, vector) -> Query:
        """The pool of the live ones of ``ids`` (their current versions), by the
        given similarity ``scores`` or else the embedder's cosine; under a
        free order, by that order of the query ``text`` (which reads this
        embedder's cosine, never a caller's score)."""
        if self.config.free_order is not None:
            scores = None
        pool = self.rows.given_pool(ids, scores, vector, self.config.pool_size)
        return self._in_pool_order(text, pool)


__all__ = ["CandidatePools"]
