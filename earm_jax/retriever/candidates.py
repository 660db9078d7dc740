"""The candidate pools ``rerank`` is given: checked entries, the unknown ones
added and the edited ones updated, and the pool of the live ones by similarity
(:meth:`~earm_jax.retriever.memory_rows.MemoryRows.given_pool`). Part of
:class:`~earm_jax.retriever.online.OnlineRetriever`; it holds no state."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from earm_jax.base import Query
from earm_jax.retriever.memory_rows import MemoryRows
from earm_jax.retriever.validation import check_id, check_k, check_text, metadata_json


class CandidatePools:
    """``rerank``'s candidates (the rows and ``add``/``update`` come from the
    retriever)."""

    config: Any
    rows: MemoryRows

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

    def _candidate_pool(self, ids, scores, vector) -> Query:
        """The pool of the live ones of ``ids`` (their current versions), by the
        given similarity ``scores`` or else the embedder's cosine."""
        return self.rows.given_pool(ids, scores, vector, self.config.pool_size)


__all__ = ["CandidatePools"]
