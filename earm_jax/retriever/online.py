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
``candidates.py`` (their order in ``pool_order.py``); the coroutine twins in
``asynchronous.py`` (its query queue in ``turns.py``); settings and answers
in ``config.py``, input checks in ``validation.py``, the compiled functions
in ``compiled.py``. This module assembles them and answers
queries: each query is written to the journal first, and the rows, the
experience and the snapshot schedule take it after the commit.
"""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np

from earm_jax.base import Observation, Query, SideInputs
from earm_jax.core.config import SolverConfig, SolverState
from earm_jax.retriever.asynchronous import AsyncRetrieving
from earm_jax.retriever.candidates import CandidatePools
from earm_jax.retriever.config import (
    NO_SCORER,
    MemoryId,
    Retrieved,
    RetrieverConfig,
    Usage,
    is_int,
    runtime_options,
    similarity_score,
)
from earm_jax.retriever.experience import PayRound
from earm_jax.retriever.memory_writes import MemoryWrites
from earm_jax.retriever.paying import failure_kind
from earm_jax.retriever.pool_order import shown_free_order
from earm_jax.retriever.recovery import Recovery
from earm_jax.retriever.serial import FairLock, serialized
from earm_jax.retriever.validation import (
    check_k,
    check_text,
    check_texts,
    check_where,
)
from earm_jax.scoring.base import PairScore, Scorer
from earm_jax.store.embeddings import TextEmbedder
from earm_jax.store.journal import (
    JOURNAL_NAME,
    CorruptFolderError,
    Journal,
    lost_journal,
)
from earm_jax.store.journal_format import FOLDER_MODE, disk_full, is_disk_full
from earm_jax.store.lock import FolderLock


class OnlineRetriever(Recovery, MemoryWrites, CandidatePools, AsyncRetrieving):
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

    def _side(self, query: Query, vector) -> SideInputs | None:
        """The embeddings the calls that follow the texts read (else ``None``)."""
        if not self.config.reads_embeddings:
            return None
        embeddings = self.rows.embeddings
        rows = np.clip(np.asarray(query.candidates), 0, len(embeddings) - 1)
        return SideInputs(np.asarray(vector, np.float32), embeddings[rows])

    def _rounds(self, query: Query, pay: PayRound, vector=None, head_only=False):
        """The round preset's rounds for one query (:meth:`Experience.rounds`)."""
        return self.experience.rounds(query, pay, self._side(query, vector), head_only)

    def _apply_query(self, query: Query, observation: Observation, vector=None):
        """A recorded query folded in again (the replay of an open)."""
        experience = self.experience
        experience.ensure_room(experience.rows_applied, experience.count + 1)
        ledger = None
        if experience.ledger is not None and not self.similarity_only:
            # Replay the rounds with the recorded answers: the same requests,
            # hence the same carry, as when the query ran.
            values = np.asarray(observation.values)
            ok = np.asarray(observation.mask)
            ledger, _, _ = self._rounds(
                query, lambda positions: (values[positions], ok[positions]), vector
            )
        state, info = experience.observe(query, observation)
        experience.record(state, ledger)
        return info

    def _prepare(self, text: str, query: Query, index: int, state: SolverState):
        """Anchors of a one-round query (pool positions, rows) and their
        stored answers."""
        positions = np.flatnonzero(self.experience.select(query, index, state))
        rows = np.asarray(query.candidates)[positions]
        cached = self.payer.cached(text, [self.rows.texts[r] for r in rows])
        return positions, rows, cached

    def _pay(self, text, rows, cached, index, known=None):
        return self.payer.pay(
            text, [self.rows.texts[r] for r in rows], cached, index, known
        )

    def _finish(
        self,
        text,
        query,
        positions,
        rows,
        answers,
        k,
        calls,
        hits,
        adaptive=None,
        vector=None,
    ):
        """Records the query, updates the state, and builds the answer."""
        size = self.config.pool_size
        table = self.rows
        values = np.zeros(size, np.float32)
        mask = np.zeros(size, bool)
        failures = []
        for position, row, answer in zip(positions, rows, answers, strict=True):
            if answer.ok:
                values[position], mask[position] = answer.value, True
            else:
                failures.append((table.ids[row], answer.reason))
                self.payer.count_failure(answer.reason)
        observation = Observation(jnp.asarray(values), jnp.asarray(mask))
        experience = self.experience
        index = experience.count
        state, info = experience.observe(query, observation)
        # The best preset ranks by its own merge of direct answers and
        # similarity (policies/adaptive.py); the paper's by the mixed scores.
        scores = np.asarray(info.scores if adaptive is None else adaptive[1].scores)
        # What a caller is shown is on one scale whatever ranked it: the direct
        # answer where paid, the completion's estimate elsewhere, in [0, 1]
        # (best's merge keys order candidates but are not scores).
        # Clipped: a completion at the floor sits one ulp below 0 (so that a
        # direct 0 outranks it), which is no score to show.
        shown = np.clip(np.asarray(info.scores), 0.0, 1.0)
        budget = int(info.budget if adaptive is None else adaptive[1].limit)
        if self.similarity_only:
            # With no answer anywhere the completion knows nothing: similarity
            # is the only evidence, so it both ranks and is shown.
            scores = np.asarray(query.similarity, np.float32)
            shown = (
                similarity_score(query.similarity)
                if self.config.free_order is None
                else shown_free_order(query.similarity)
            )
            budget = 0
        valid = np.asarray(query.valid)
        candidates = np.asarray(query.candidates)
        positions_ranked = [
            p for p in np.lexsort((np.arange(size), -scores)) if valid[p]
        ][:k]
        chosen = sorted(
            positions_ranked, key=lambda p: (table.origin[candidates[p]], p)
        )
        payload = {
            "index": index,
            "k": k,
            "calls": calls,
            "cache_hits": hits,
            "budget": budget,
            # The kind only: a scorer's own words may quote the pair's texts.
            "failures": [
                [int(rows[i]), failure_kind(a.reason)]
                for i, a in enumerate(answers)
                if not a.ok
            ],
            "answer": [int(candidates[p]) for p in positions_ranked],
        }
        keep_text = self.config.query_retention == "keep"
        if keep_text:
            payload["text"] = text
        with self._journal.transaction() as db:
            seq = self._journal.append_op(
                db, "query", payload, self._encode_query(query, observation, vector)
            )
            if keep_text and self._redacted.get("texts"):
                self._redacted = {**self._redacted, "texts": False}
                self._journal.set_meta(db, "redacted", self._redacted)
        experience.record(state, None if adaptive is None else adaptive[0])
        if self._usage_totals is not None:
            self._usage_totals[0] += calls
            self._usage_totals[1] += hits
            self._usage_totals[2] += int(valid.sum())
        self._committed(seq, query=True)
        self._warm_ahead()
        return Retrieved(
            memory_ids=[table.ids[candidates[p]] for p in chosen],
            texts=[table.texts[candidates[p]] for p in chosen],
            metadata=[dict(table.metadata[candidates[p]]) for p in chosen],
            scores=[float(shown[p]) for p in chosen],
            anchored=[bool(mask[p]) for p in chosen],
            calls=calls,
            cache_hits=hits,
            failures=failures,
            budget=budget,
            query_index=index,
            ranked_ids=[table.ids[candidates[p]] for p in positions_ranked],
            rounds=1 if adaptive is None else adaptive[2],
        )

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

    def _answer(
        self,
        text: str,
        query: Query,
        k: int,
        known=None,
        prepaid: int = 0,
        vector=None,
    ) -> Retrieved:
        """Pays what the anchors need and records the query.

        ``known``: answers this query holds already, by memory text (the
        asynchronous path pays before it takes its turn); ``prepaid``: the
        pairs it paid for them, reported as this query's calls; ``vector``:
        the query's embedding (the learned-calls preset reads and records it).
        """
        experience = self.experience
        index = experience.count
        experience.ensure_room(experience.rows_applied, index + 1)
        if self.similarity_only:
            return self._finish(text, query, [], [], [], k, 0, 0, vector=vector)
        if experience.ledger is not None:
            return self._answer_in_rounds(text, query, k, known, prepaid, vector)
        positions, rows, cached = self._prepare(text, query, index, experience.state)
        answers, calls, hits = self._pay(text, rows, cached, index, known)
        return self._finish(
            text, query, positions, rows, answers, k, calls + prepaid, hits
        )

    def _answer_in_rounds(
        self,
        text: str,
        query: Query,
        k: int,
        known=None,
        prepaid: int = 0,
        vector=None,
    ) -> Retrieved:
        """A query of a preset that pays in rounds (``best``, learned calls):
        one batched scorer request per round."""
        index = self.experience.count
        all_positions, all_rows, all_answers = [], [], []
        totals = {"calls": prepaid, "hits": 0}

        def pay(positions: np.ndarray):
            rows = np.asarray(query.candidates)[positions]
            cached = self.payer.cached(text, [self.rows.texts[r] for r in rows])
            answers, calls, hits = self._pay(text, rows, cached, index, known)
            totals["calls"] += calls
            totals["hits"] += hits
            all_positions.extend(int(p) for p in positions)
            all_rows.extend(int(r) for r in rows)
            all_answers.extend(answers)
            return (
                np.asarray([a.value if a.ok else 0.0 for a in answers], np.float32),
                np.asarray([a.ok for a in answers], bool),
            )

        ledger, info, rounds = self._rounds(query, pay, vector)
        return self._finish(
            text,
            query,
            np.asarray(all_positions, np.int64),
            np.asarray(all_rows, np.int64),
            all_answers,
            k,
            totals["calls"],
            totals["hits"],
            adaptive=(ledger, info, rounds),
            vector=vector,
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
