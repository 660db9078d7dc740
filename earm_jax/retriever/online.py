"""The online retriever for one agent: EARM over a growing memory, crash-safe.

Per query: embed it, take the top-``pool_size`` live memories by cosine
similarity (or take a pool someone else retrieved, :meth:`OnlineRetriever.rerank`),
let the solver pick the anchors, pay the scorer for the unpaid ones, fold the
answers in, and return the top ``k`` memories by mixed score in chronological
order.

Durability. Everything lives in one folder:

* ``journal.sqlite`` (SQLite, WAL): the source of truth. Every memory version,
  every operation (add / update / delete / query, each one transaction), every
  paid score, and a snapshot of the solver state every ``snapshot_every``
  queries (content-addressed chunks: unchanged parts are not rewritten).
* ``lock``: ``flock``-ed by the one process that writes; holds its pid. The
  journal is ``flock``-ed too, so removing ``lock`` lets no second writer in
  (:mod:`earm_jax.store.lock`).
* ``retriever.json``: written once the journal holds its settings; a folder
  with it and a missing or empty journal is refused, never opened as new.
* ``high_water``: the last committed operation's number; a journal behind it
  (its ``-wal`` file removed after a crash) is refused
  (:mod:`earm_jax.store.high_water`).

A folder created with ``key_file=`` is keyed: its rows' digests are
HMAC-SHA256 under a key kept in that file, outside the folder
(:mod:`earm_jax.store.folder_key`), so rewriting the folder so that it passes
its checks needs the key; it opens only with that key file.

On open the latest snapshot is loaded and the operations after it are replayed
through the same code path that ran them (the solver is deterministic given its
keys, and every query's pool and scores are in the journal), so the state is
bit for bit the one an uninterrupted run would hold. A write is acknowledged
when its call returns; by then its transaction is committed. Paid scores are
committed the moment the scorer answers, before anything else, so a crash never
makes a pair be paid twice (except one killed in the instant between the
scorer's answer and that commit).

Edits and deletions. A memory keeps its id for life, but each *version* of it
(its text) is a row of the experience matrix. ``update(id, text)`` retires the
old row and gives the new text a fresh row: scores paid for the old text stay
in the history (they were true of that text and still inform the query
factors) but are never again counted as evidence for the new text, which
starts with no observations. ``delete(ids)`` retires the rows: never a
candidate, never scored, never returned again; ids are never reused. The
chronological key of a memory is the position of its first version.

What a retriever holds, each part with one owner (a change goes where its
owner lives):

* ``rows`` (:class:`~earm_jax.retriever.memory_rows.MemoryRows`,
  ``memory_rows.py``): every memory version's id, text, metadata and
  embedding, which are live, and the similarity pools drawn from them;
* ``experience`` (:class:`~earm_jax.retriever.experience.Experience`,
  ``experience.py``): the solver state, its buffer shapes (grown and compiled
  ahead there), the round preset's call ledger, the query count;
* ``payer`` (:class:`~earm_jax.retriever.paying.ScorerPath`, ``paying.py``):
  the scorer, its identity in the score cache, the failure counts;
* the journal (:class:`~earm_jax.store.journal.Journal`), opened, checked,
  replayed and snapshotted by ``recovery.py``, which also keeps the snapshot
  schedule; the folder lock and the call lock (``serial.py``) beside it.

The calls that change them: ``add``, ``update``, ``delete`` in
``memory_writes.py``; the pools of ``query`` and ``rerank`` in
``candidates.py`` (their order in ``pool_order.py``); one query paid,
recorded and answered in ``answering.py`` (each query is written to the
journal first, and the rows, the experience and the snapshot schedule take it
after the commit); ``query_many`` in ``batched_queries.py``; the coroutine
twins in ``asynchronous.py`` (its query queue in ``turns.py``); settings and
answers in ``config.py``, input checks in ``validation.py``, the compiled
functions in ``compiled.py``. This module assembles them: opening, the
read-only views, ``query``, ``rerank``, ``answer``, ``usage`` and closing.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from earm_jax.core.config import SolverConfig, SolverState
from earm_jax.retriever.answering import QueryAnswering
from earm_jax.retriever.asynchronous import AsyncRetrieving
from earm_jax.retriever.batched_queries import BatchedQueries
from earm_jax.retriever.candidates import CandidatePools
from earm_jax.retriever.config import (
    NO_SCORER,
    MemoryId,
    Retrieved,
    RetrieverConfig,
    Usage,
    is_int,
    runtime_options,
)
from earm_jax.retriever.memory_writes import MemoryWrites
from earm_jax.retriever.recovery import Recovery
from earm_jax.retriever.serial import FairLock, serialized
from earm_jax.retriever.validation import (
    check_k,
    check_text,
    check_where,
)
from earm_jax.scoring.base import Scorer
from earm_jax.store.embeddings import TextEmbedder
from earm_jax.store.journal import (
    JOURNAL_NAME,
    CorruptFolderError,
    Journal,
    lost_journal,
)
from earm_jax.store.journal_format import FOLDER_MODE, disk_full, is_disk_full
from earm_jax.store.lock import FolderLock


class OnlineRetriever(
    Recovery,
    MemoryWrites,
    CandidatePools,
    QueryAnswering,
    BatchedQueries,
    AsyncRetrieving,
):
    """EARM for one agent: add, edit, delete, query; the experience kept on disk.

    One process writes a folder at a time (a second gets
    :class:`~earm_jax.store.lock.FolderLockedError` naming the holder's pid).
    Use as a context manager, or call :meth:`close`.

    Args:
      directory: the retriever's folder (created if missing; reopened, with
        recovery, if it holds a retriever already).
      scorer: the relevance scorer; its ``identity`` is recorded, and reopening
        with another scorer identity raises (its scores would mix with the
        stored ones): use a new folder for a new scorer. ``None``: similarity
        mode, for trying the retriever without a scorer: no scorer is ever
        called, a query returns its ``k`` most similar memories, each scored
        ``(1 + cos) / 2`` (the folder records no scorer, so it stays a
        similarity-mode folder).
      embedder: text embedder; its identity (``identity`` if it has one,
        its width, its vector of a fixed probe text) is recorded at creation,
        and reopening with another model raises, like another scorer.
      config: settings; ``None`` takes the stored ones (or the defaults for a
        new folder). Experience settings must match the stored ones.
      key_file: the folder's key file. A new folder opened with one is keyed
        (the file is created, mode ``0600``, when missing; it must lie outside
        the folder); a keyed folder opens only with it, an unkeyed one never
        with one. Keep a copy: without it the folder cannot be opened.
      runtime: runtime options (``query_retention``, ``top_k``, ... : the
        fields a caller may change on each open) to open with, over
        ``config``'s or, with ``config=None``, over the folder's stored ones;
        e.g. ``{"query_retention": "none"}`` opens a folder keeping no query
        text, with the settings it was created with (not one whose calls
        follow the texts: it rebuilds their regression from every query's
        embedding). Recorded like a config's.

    Attributes:
      rows: the memory rows (:class:`~earm_jax.retriever.memory_rows.MemoryRows`).
      experience: the solver state, its shapes and the call ledger
        (:class:`~earm_jax.retriever.experience.Experience`).
      payer: the scorer and its failure counts
        (:class:`~earm_jax.retriever.paying.ScorerPath`).

    Every write checks first that the journal this retriever locked is still
    the folder's (:class:`~earm_jax.store.lock.LockLostError` otherwise, with
    nothing stored); a full disk is a
    :class:`~earm_jax.store.journal.DiskFullError` with nothing stored.

    Raises:
      FolderLockedError: another process holds the folder.
      CorruptFolderError: the folder fails its consistency check.
      FolderKeyError: a keyed folder without its key (or with another), or
        an unkeyed one with a key.
      ValueError: a different config or scorer than the folder's.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        scorer: Scorer,
        embedder: TextEmbedder,
        config: RetrieverConfig | None = None,
        key_file: str | os.PathLike[str] | None = None,
        *,
        runtime: Mapping[str, object] | None = None,
    ) -> None:
        if config is not None and not isinstance(config, RetrieverConfig):
            raise ValueError(
                f"config must be a RetrieverConfig, got {type(config).__name__}"
            )
        self._runtime = runtime_options(runtime)
        if config is not None and self._runtime:
            config = dataclasses.replace(config, **self._runtime)
        for name, thing, needed in (
            ("scorer", scorer, () if scorer is None else ("identity", "score_many")),
            ("embedder", embedder, ("embed",)),
        ):
            missing = [n for n in needed if not hasattr(thing, n)]
            if missing:
                raise ValueError(f"{name} has no {', '.join(missing)}")
        self.directory = Path(directory)
        self._key_file = None if key_file is None else Path(key_file)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"{self.directory} exists and is not a folder")
        try:
            self.directory.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        except OSError as error:
            raise disk_full(
                self.directory.parent, error, "the folder was not created"
            ) from error
        lost = lost_journal(self.directory)
        if lost is not None:
            raise CorruptFolderError(lost)
        timeout = self._runtime.get(
            "lock_timeout", (config or RetrieverConfig()).lock_timeout
        )
        self._lock = FolderLock(
            self.directory, timeout=timeout, guarded=(JOURNAL_NAME,)
        )
        self._journal: Journal | None = None
        self.experience = None
        self._mutex = FairLock()
        self._usage_totals: list[int] | None = None
        self._init_async()
        try:
            self._open(scorer, embedder, config)
        except sqlite3.DatabaseError as error:
            self._release()
            if is_disk_full(error, self.directory):
                raise disk_full(self.directory, error, "nothing was opened") from error
            raise CorruptFolderError(
                f"{self.directory / JOURNAL_NAME}: SQLite cannot read it ({error})"
            ) from error
        except BaseException:
            self._release()
            raise

    # ------------------------------------------------------- read-only views

    @property
    def state(self) -> SolverState:
        """The solver state (``experience.state``)."""
        return self.experience.state

    @property
    def ledger(self) -> Any:
        """The round preset's carry (``experience.ledger``; ``None`` for the
        one-round presets)."""
        return self.experience.ledger

    @property
    def solver_config(self) -> SolverConfig:
        """The solver's current buffer shapes (``experience.solver_config``)."""
        return self.experience.solver_config

    @property
    def scorer(self) -> Scorer | None:
        return self.payer.scorer

    @property
    def failure_counts(self) -> Counter[str]:
        """Failed scorer pairs by kind, since this retriever opened."""
        return self.payer.failure_counts

    @property
    def width(self) -> int | None:
        """The memories' embedding width (``None`` until the first)."""
        return self.rows.width

    @property
    def similarity_only(self) -> bool:
        """Whether this retriever has no scorer (similarity mode): its queries
        are ranked by similarity alone and never call a scorer."""
        # By the folder's record, so that check and repair, which open a
        # folder with a stand-in scorer, replay it as it ran.
        return self.payer.key == NO_SCORER.key()

    @property
    def num_queries(self) -> int:
        """Queries answered so far (the next query's index)."""
        return self.experience.count

    def _check_open(self) -> None:
        if self._journal is None:
            raise ValueError(f"the retriever of {self.directory} is closed")

    # --------------------------------------------------------------- queries

    def _checked_query(self, text, k, where):
        """:meth:`query`'s arguments checked (and the retriever not empty)."""
        self._check_open()
        text = check_text(text, "text")
        k = check_k(k, self.config.top_k)
        where = check_where(where)
        if not self.rows.row_of:
            raise ValueError("the retriever holds no memory yet: add() some first")
        return text, k, where

    @serialized
    def query(
        self, text: str, k: int | None = None, where: Mapping | None = None
    ) -> Retrieved:
        """Answers one query with the top ``k`` memories (chronological order).

        Args:
          text: the query.
          k: how many memories (default ``config.top_k``).
          where: keep only memories whose metadata has these keys with equal
            values of the same JSON type (``True`` never matches ``1``,
            ``None`` only a stored ``null``, never a missing key; see
            :mod:`earm_jax.retriever.validation`).
        """
        text, k, where = self._checked_query(text, k, where)
        vector = self._embed_queries([text], "query")[0]
        return self._answer(
            text, self._query_pool(text, vector, where), k, vector=vector
        )

    @serialized
    def rerank(
        self,
        query: str,
        candidates: Sequence[Mapping | tuple],
        k: int | None = None,
    ) -> Retrieved:
        """Reranks a pool someone else retrieved (Mem0, LangChain, LlamaIndex ...).

        Args:
          query: the query text.
          candidates: up to ``pool_size`` entries, each a dict with ``id`` and
            ``text`` (optional ``score``: the retriever's similarity, else
            cosine with this retriever's embedder, orders the pool; under a
            free order the pool goes down that order, which reads this
            embedder's cosine, and ``score`` is only checked; optional
            ``metadata``), or
            an ``(id, text)`` pair. Unknown ids are added on first sight; a
            known id with a new text is updated first (an edit: a new version
            with no evidence), and new metadata replaces the stored one.
          k: how many to return (default ``config.top_k``).
        """
        self._check_open()
        query, k, parsed = self._parse_candidates(query, candidates, k)
        vector = self._embed_queries([query], "query")[0]
        self._register_candidates(parsed)
        pool = self._candidate_pool(
            query,
            [p[0] for p in parsed],
            None if parsed[0][2] is None else [p[2] for p in parsed],
            vector,
        )
        return self._answer(query, pool, k, vector=vector)

    @serialized
    def answer(self, index: int) -> list[MemoryId]:
        """The ids query ``index`` returned, best first (from the journal)."""
        self._check_open()
        count = self.experience.count
        if not is_int(index) or not 0 <= index < count:
            raise ValueError(f"index must be in [0, {count}), got {index!r}")
        op = self._journal.query_op(int(index))
        if op is None:
            raise CorruptFolderError(
                f"{self._journal.path}: the operation of query {index} is missing"
            )
        return [self.rows.ids[r] for r in op[2]["answer"]]

    @serialized
    def usage(self) -> Usage:
        """What this retriever has paid, from its journal (all its life)."""
        self._check_open()
        if self._usage_totals is None:
            size = self.config.pool_size
            totals = [0, 0, 0]
            for _, kind, payload, data in self._journal.ops_after(0):
                if kind != "query":
                    continue
                totals[0] += int(payload.get("calls", 0))
                totals[1] += int(payload.get("cache_hits", 0))
                # The pool's fields lead the record (an embedding may follow).
                if data is not None and len(data) >= 14 * size:
                    valid = np.frombuffer(data[8 * size : 9 * size], np.bool_)
                    totals[2] += int(valid.sum())
            self._usage_totals = totals
        calls, hits, full = self._usage_totals
        return Usage(
            memories=self.num_memories,
            queries=self.experience.count,
            calls=calls,
            cache_hits=hits,
            full_pool_calls=full,
        )

    @serialized
    def warm_up(self) -> None:
        """Compiles the solver for the current buffer shapes now (else the first
        query does)."""
        self._check_open()
        self.experience.warm_up(self.rows.stored_width)

    def _warm_ahead(self) -> None:
        """Compiles the next buffer shapes in the background, when due."""
        self.experience.warm_ahead(self.rows.stored_width)

    # ------------------------------------------------------------------ close

    def _release(self) -> None:
        if self.experience is not None:
            self.experience.active = False
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._lock is not None:
            self._lock.release()

    @serialized
    def close(self) -> None:
        """Snapshots the state (for a fast reopen) and releases the folder."""
        if self._journal is None:
            return
        try:
            if self._last_seq > self._snapshot_seq:
                self._snapshot_quietly()
        finally:
            self._release()

    def __enter__(self) -> OnlineRetriever:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["OnlineRetriever"]
