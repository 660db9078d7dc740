"""The calls that change the memories (``add``, ``update``, ``delete``) or
read them (``get``, ``memories``), and the embedding of texts: each change is
committed to the journal first, then the memory rows
(:class:`~earm_jax.retriever.memory_rows.MemoryRows`) and the experience
(:class:`~earm_jax.retriever.experience.Experience`) take it."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence

import numpy as np

from earm_jax.retriever.config import Memory, MemoryId
from earm_jax.retriever.serial import serialized
from earm_jax.retriever.validation import (
    check_id,
    check_text,
    check_texts,
    metadata_json,
)
from earm_jax.store.journal import Journal

_LOG = logging.getLogger("earm_jax.retriever")


class MemoryWrites:
    """The memory calls of :class:`~earm_jax.retriever.online.OnlineRetriever`
    (they change its ``rows`` and ``experience``; the forgotten texts the
    embedder's cache failed to drop are kept here, to retry)."""

    _unforgotten: frozenset[str] = frozenset()

    @property
    def num_memories(self) -> int:
        """Live memories (added, not deleted)."""
        return self.rows.num_live

    def _embed_queries(self, texts: list[str], what: str) -> np.ndarray:
        """Embeddings of query texts: an embedder with a cache keeps them
        only when query texts are kept (``query_retention="keep"``)."""
        return self._embed(texts, what, self.config.query_retention != "keep")

    def _embed(self, texts: list[str], what: str, transient=False) -> np.ndarray:
        embed = self.embedder.embed
        if transient:
            embed = getattr(self.embedder, "embed_transient", embed)
        vectors = embed(texts)
        try:
            vectors = np.asarray(vectors, np.float32)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"the embedder returned no array for {what}: {error}"
            ) from None
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(
                f"the embedder returned shape {vectors.shape} for {len(texts)} "
                f"{what}; expected ({len(texts)}, width)"
            )
        width = self.rows.width
        if width is not None and vectors.shape[1] != width:
            raise ValueError(
                f"the embedder returned width {vectors.shape[1]}, this retriever's "
                f"memories have width {width} (another embedding model?)"
            )
        if vectors.shape[1] < 1:
            raise ValueError("the embedder returned zero-width vectors")
        if not np.all(np.isfinite(vectors)):
            bad = int(np.flatnonzero(~np.all(np.isfinite(vectors), axis=1))[0])
            raise ValueError(
                f"the embedder returned a non-finite vector ({what}[{bad}])"
            )
        norms = np.linalg.norm(vectors, axis=1)
        if np.any(np.abs(norms - 1.0) > 1e-3):
            bad = int(np.flatnonzero(np.abs(norms - 1.0) > 1e-3)[0])
            raise ValueError(
                f"the embedder returned a vector of norm {norms[bad]:.4g} "
                f"({what}[{bad}]); the retriever needs unit-norm embeddings"
            )
        return vectors

    def _append_rows(self, db, ids, texts, metas, vectors, origins, seq) -> None:
        first = len(self.rows)
        self._journal.insert_memories(
            db,
            [
                (first + i, mid, text, meta, vector.tobytes(), origin, seq)
                for i, (mid, text, meta, vector, origin) in enumerate(
                    zip(ids, texts, metas, vectors, origins, strict=True)
                )
            ],
        )

    # -------------------------------------------------------------------- API

    @serialized
    def add(
        self,
        texts: Sequence[str],
        metadata: Sequence[Mapping | None] | None = None,
        ids: Sequence[MemoryId] | None = None,
    ) -> list[MemoryId]:
        """Adds memories; they are candidates from the next query on.

        Args:
          texts: the memories' texts (a list; a bare ``str`` is refused).
          metadata: one JSON-serialisable dict per text (or ``None``).
          ids: caller-chosen ``int`` or ``str`` ids, unique and never used
            before in this folder; ``None`` assigns integers.

        Returns:
          The ids, in order. Nothing is stored unless every input is valid.
        """
        self._check_open()
        texts = check_texts(texts)
        if metadata is not None:
            if isinstance(metadata, Mapping | str) or not isinstance(
                metadata, Sequence
            ):
                raise ValueError("metadata must be a list with one dict per text")
            if len(metadata) != len(texts):
                raise ValueError(
                    f"metadata has {len(metadata)} entries for {len(texts)} texts"
                )
        metas = [
            metadata_json(None if metadata is None else metadata[i], f"metadata[{i}]")
            for i in range(len(texts))
        ]
        if ids is not None:
            if isinstance(ids, str) or not isinstance(ids, Sequence):
                raise ValueError("ids must be a list with one id per text")
            if len(ids) != len(texts):
                raise ValueError(f"ids has {len(ids)} entries for {len(texts)} texts")
            ids = [check_id(mid, f"ids[{i}]") for i, mid in enumerate(ids)]
            if len(set(ids)) != len(ids):
                dup = next(m for m in ids if ids.count(m) > 1)
                raise ValueError(f"ids holds {dup!r} twice")
            for mid in ids:
                if mid in self.rows.row_of:
                    raise ValueError(f"id {mid!r} exists already (use update)")
                if mid in self.rows.retired_ids:
                    raise ValueError(f"id {mid!r} was deleted; ids are never reused")
        if not texts:
            return []
        vectors = self._embed(texts, "texts")
        if ids is None:
            start = max(self._journal.max_int_id() + 1, 0)
            ids = list(range(start, start + len(texts)))
        first = len(self.rows)
        origins = list(range(first, first + len(texts)))
        with self._journal.transaction() as db:
            if self.rows.width is None:
                self._journal.set_meta(db, "width", int(vectors.shape[1]))
            seq = self._journal.append_op(
                db, "add", {"first": first, "count": len(texts)}
            )
            self._append_rows(db, ids, texts, metas, vectors, origins, seq)
        self.rows.append(ids, texts, metas, vectors, origins)
        self.experience.apply_add(first, len(texts))
        self._committed(seq)
        self._warm_ahead()
        return list(ids)

    @serialized
    def update(
        self,
        id: MemoryId,
        text: str | None = None,
        metadata: Mapping | None = None,
        keep_history: bool = True,
    ) -> None:
        """Replaces a memory's text and/or metadata; keeps its id.

        A new text gets a fresh row with no observations: scores paid for the
        old text are never counted as evidence for the new one. New metadata
        alone (``text`` ``None`` or unchanged) is replaced in place: the text,
        hence its evidence, is the same.

        With ``keep_history=False`` a new text also redacts the old one as
        :meth:`delete` forgets a memory: when the call returns, the old
        text, its metadata, its embedding and the paid scores keyed by it are
        in no file of the folder (nor in the embedder's cache); the scores
        already folded into the solver's history stay, as numbers that name
        no text. With ``True`` (the default) the old version stays readable
        in the journal, as an edit history.
        """
        self._check_open()
        mid = check_id(id, "id")
        if not isinstance(keep_history, bool):
            raise ValueError(
                f"keep_history must be True or False, got {keep_history!r}"
            )
        if text is None and metadata is None:
            raise ValueError("update needs a text or metadata (both are None)")
        if text is not None:
            text = check_text(text, "text")
        meta = None if metadata is None else metadata_json(metadata, "metadata")
        table = self.rows
        if mid not in table.row_of:
            raise KeyError(f"no live memory with id {mid!r}")
        old = table.row_of[mid]
        if text is None or text == table.texts[old]:
            if meta is not None:
                self._replace_metadata(old, meta)
            return
        if meta is None:
            meta = json.dumps(table.metadata[old], sort_keys=True)
        vectors = self._embed([text], "text")
        new = len(table)
        origin = table.origin[old]
        versions = table.versions(mid)
        retire = {"rows": [old], "reason": "update"}
        if keep_history:
            redacted: set[str] = set()
        else:
            live = {table.texts[r] for r in table.row_of.values() if r != old}
            redacted = {table.texts[r] for r in versions} - live - {text, ""}
            # Versions an earlier forget emptied are tombstones already.
            retire["scrubbed"] = [r for r in versions if table.texts[r]]
        with self._journal.transaction() as db:
            seq = self._journal.append_op(db, "retire", retire)
            Journal.retire_memories(db, [old], seq)
            if not keep_history:
                self._journal.scrub_memories(
                    db, retire["scrubbed"], table.width or 0, seq
                )
                self._journal.forget_scores(db, sorted(redacted))
            seq = self._journal.append_op(db, "add", {"first": new, "count": 1})
            self._append_rows(db, [mid], [text], [meta], vectors, [origin], seq)
        table.retire([old], deleted=False)
        if not keep_history:
            table.blank(versions)
        self.experience.apply_retire([old])
        table.append([mid], [text], [meta], vectors, [origin])
        self.experience.apply_add(new, 1)
        self._committed(seq)
        if not keep_history:
            self._forget_everywhere(redacted, "an update that kept no history")

    def _replace_metadata(self, row: int, meta: str) -> None:
        if meta == json.dumps(self.rows.metadata[row], sort_keys=True):
            return
        with self._journal.transaction() as db:
            seq = self._journal.append_op(db, "metadata", {"row": row})
            self._journal.replace_metadata(db, row, meta)
        self.rows.metadata[row] = json.loads(meta)
        self._committed(seq)

    @serialized
    def delete(self, ids: Sequence[MemoryId]) -> None:
        """Deletes memories: never a candidate, scored or returned again, and
        forgotten on disk.

        When the call returns, the text, metadata and embedding of every
        version of each deleted memory are gone from every file of the folder
        (overwritten in the journal, freed space zeroed, the WAL checkpointed
        and truncated), and so are the paid scores keyed by those texts
        (unless a live memory has the same text). Kept: the id, as a
        tombstone (ids are never reused), its rows as empty placeholders (the
        experience matrix's rows keep their numbers), and the scores already
        folded into the solver's history as numbers that are masked (never a
        candidate again) and name no text.
        """
        self._check_open()
        table = self.rows
        ids = table.live_ids(ids)
        if not ids:
            return
        rows = sorted({table.row_of[mid] for mid in ids})
        forgotten = set(ids)
        versions = [r for r, mid in enumerate(table.ids) if mid in forgotten]
        texts = {table.texts[r] for r in versions}
        kept = {table.texts[r] for r in table.row_of.values() if r not in rows}
        forgotten_texts = texts - kept - {""}
        # The retire operation names the rows it empties, so the delete log
        # cannot lose a record unseen (Journal.deletion_problems).
        scrubbed = [r for r in versions if table.texts[r]]
        with self._journal.transaction() as db:
            seq = self._journal.append_op(
                db, "retire", {"rows": rows, "reason": "delete", "scrubbed": scrubbed}
            )
            Journal.retire_memories(db, rows, seq)
            self._journal.scrub_memories(db, scrubbed, table.width or 0, seq)
            self._journal.forget_scores(db, sorted(forgotten_texts))
        table.retire(rows, deleted=True)
        table.blank(versions)
        self.experience.apply_retire(rows)
        self._committed(seq)
        self._forget_everywhere(forgotten_texts, "a delete")

    def _forget_everywhere(self, texts: set[str], what: str) -> None:
        """After a committed forget: the texts' cached embeddings (and their
        digests) leave the embedder's cache, and the journal's WAL is
        truncated. Both are reported, never raised: the forget is stored."""
        forget = getattr(self.embedder, "forget", None)
        pending = set(texts) | self._unforgotten
        if forget is not None and pending:
            try:
                forget(sorted(pending))
            except Exception as error:  # noqa: BLE001 - the forget is committed
                _LOG.warning(
                    "%s: after %s, the embedder's cache kept the forgotten "
                    "texts' vectors (%s: %s); the next forget retries",
                    self.directory,
                    what,
                    type(error).__name__,
                    error,
                )
                self._unforgotten = frozenset(pending)
            else:
                self._unforgotten = frozenset()
        if not self._journal.flush_freed():
            # The next delete or the close (SQLite checkpoints when its last
            # connection closes) truncates the WAL.
            _LOG.warning(
                "%s: the WAL could not be truncated after %s (another "
                "connection is reading); the forgotten content stays in the "
                "-wal file until the next checkpoint",
                self.directory,
                what,
            )

    @serialized
    def get(self, ids: Sequence[MemoryId]) -> list[Memory]:
        """The live memories ``ids`` (``KeyError`` naming any unknown or deleted)."""
        self._check_open()
        table = self.rows
        return [table.memory(table.row_of[mid]) for mid in table.live_ids(ids)]

    @serialized
    def memories(self) -> list[Memory]:
        """Every live memory, in chronological order."""
        return self.rows.chronological()


__all__ = ["MemoryWrites"]
