"""The memory rows a retriever holds in memory: every version of every memory
(id, text, metadata, embedding, chronological origin), which versions are
live, and the similarity pools drawn from them.

One object owns these lists (:class:`MemoryRows`, the retriever's ``rows``);
it never touches the journal or the solver: the retriever writes a change to
the journal first and tells the rows after it is committed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

import jax.numpy as jnp
import numpy as np

from earm_jax.base import Query
from earm_jax.retriever.config import Memory, MemoryId
from earm_jax.retriever.validation import check_id, matches


class MemoryRows:
    """Every version of every memory, by row (a row is a row of the
    experience matrix; an edit or a delete retires a row, never reuses it).

    Attributes:
      ids, texts, metadata, origin, live: one entry per row. ``origin`` is the
        row of the memory's first version (its chronological key); a
        forgotten version's text is ``""`` and its metadata ``{}``.
      embeddings: ``(rows, width)`` float32, zeros for a forgotten version.
      row_of: the live row of each live id.
      retired_ids: ids deleted (never reused).
      width: the embedding width (``None`` until the first memory).
    """

    def __init__(self, width: int | None = None) -> None:
        self.ids: list[MemoryId] = []
        self.texts: list[str] = []
        self.metadata: list[dict] = []
        self.origin: list[int] = []
        self.live: list[bool] = []
        self.row_of: dict[MemoryId, int] = {}
        self.retired_ids: set[MemoryId] = set()
        self.embeddings = np.zeros((0, 0), np.float32)
        self.width = width

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def num_live(self) -> int:
        return len(self.row_of)

    @property
    def stored_width(self) -> int:
        """The width of the stored embeddings (0 while there are none)."""
        return int(self.embeddings.shape[1]) if self.embeddings.size else 0

    def append(self, ids, texts, metas, vectors, origins) -> None:
        """New live rows (``metas``: JSON text) at the end."""
        for mid, text, meta, origin in zip(ids, texts, metas, origins, strict=True):
            self.row_of[mid] = len(self.ids)
            self.ids.append(mid)
            self.texts.append(text)
            self.metadata.append(json.loads(meta))
            self.origin.append(origin)
            self.live.append(True)
        self.embeddings = (
            vectors.copy()
            if self.embeddings.size == 0
            else np.concatenate([self.embeddings, vectors])
        )
        self.width = int(vectors.shape[1])

    def load(self, row, mid, text, metadata, origin, live) -> None:
        """One stored row, in order (opening a folder; the embeddings follow
        in :meth:`finish_loading`)."""
        self.ids.append(mid)
        self.texts.append(text)
        self.metadata.append(metadata)
        self.origin.append(int(origin))
        self.live.append(live)
        if live:
            self.row_of[mid] = row

    def finish_loading(self, embeddings: list[np.ndarray]) -> None:
        self.retired_ids = {mid for mid in self.ids if mid not in self.row_of}
        if embeddings:
            self.embeddings = np.stack(embeddings).astype(np.float32)

    def retire(self, rows: Sequence[int], deleted: bool) -> None:
        """Rows no longer live (an edit's old version, or a delete: its id is
        then retired for good)."""
        for row in rows:
            self.live[row] = False
            del self.row_of[self.ids[row]]
            if deleted:
                self.retired_ids.add(self.ids[row])

    def blank(self, rows: Sequence[int]) -> None:
        """Forgets the content of ``rows`` (the rows stay, as placeholders)."""
        for row in rows:
            self.texts[row] = ""
            self.metadata[row] = {}
            self.embeddings[row] = 0.0

    def versions(self, mid: MemoryId) -> list[int]:
        """Every row that ever held ``mid``."""
        return [r for r, other in enumerate(self.ids) if other == mid]

    def live_ids(self, ids: Sequence[MemoryId]) -> list[MemoryId]:
        """``ids`` checked: a list of well-formed ids of live memories
        (``ValueError`` / ``KeyError`` naming what is wrong)."""
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValueError("ids must be a list of ids")
        ids = [check_id(mid, f"ids[{i}]") for i, mid in enumerate(ids)]
        unknown = [mid for mid in ids if mid not in self.row_of]
        if unknown:
            raise KeyError(f"no live memory with id(s) {unknown!r}")
        return ids

    def memory(self, row: int) -> Memory:
        return Memory(self.ids[row], self.texts[row], dict(self.metadata[row]))

    def chronological(self) -> list[Memory]:
        """Every live memory, in chronological order."""
        rows = sorted(self.row_of.values(), key=lambda r: (self.origin[r], r))
        return [self.memory(r) for r in rows]

    # ------------------------------------------------------------------ pools

    def eligible(self, where: Mapping | None, visible: int) -> np.ndarray:
        """Which of the first ``visible`` rows may be a candidate."""
        live = np.asarray(self.live[:visible], bool)
        if where:
            match = np.array(
                [matches(meta, where) for meta in self.metadata[:visible]], bool
            )
            live &= match
        return live

    def similarity_pool(
        self, vector: np.ndarray, where: Mapping | None, visible: int, size: int
    ) -> Query:
        """The ``size`` eligible rows most similar to ``vector``."""
        similarity = self.embeddings[:visible] @ vector
        eligible = self.eligible(where, visible)
        similarity = np.where(eligible, similarity, -np.inf).astype(np.float32)
        take = int(min(size, eligible.sum()))
        order = np.lexsort((np.arange(visible), -similarity))[:take]
        return pool_of(order, similarity[order], size)

    def given_pool(self, ids, scores, vector, size: int) -> Query:
        """The pool of the live ones of ``ids`` (their current versions), by
        the given similarity ``scores`` or else the cosine with ``vector``."""
        live = [i for i, mid in enumerate(ids) if mid in self.row_of]
        if not live:
            raise ValueError("every candidate was deleted")
        rows = np.array([self.row_of[ids[i]] for i in live], np.int64)
        if scores is not None:
            similarity = np.array([scores[i] for i in live], np.float32)
        else:
            similarity = (self.embeddings[rows] @ vector).astype(np.float32)
        order = np.lexsort((np.arange(len(rows)), -similarity))
        return pool_of(rows[order], similarity[order], size)


def pool_of(rows: np.ndarray, similarity: np.ndarray, size: int) -> Query:
    """A :class:`~earm_jax.base.Query` of ``size`` slots holding ``rows``."""
    take = len(rows)
    candidates = np.zeros(size, np.int32)
    sims = np.zeros(size, np.float32)
    valid = np.zeros(size, bool)
    candidates[:take], sims[:take], valid[:take] = rows, similarity, True
    return Query(jnp.asarray(candidates), jnp.asarray(sims), jnp.asarray(valid))


__all__ = ["MemoryRows", "pool_of"]
