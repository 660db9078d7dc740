"""A persistent score cache, so that no (query, memory) pair is paid for twice.

Scores are keyed by the scorer's identity key, its prompt version and the
SHA-256 of the query and of the memory text (the texts themselves are not
stored). Only successful scores are stored: a failed pair is retried next time.
The cache is one SQLite file (stdlib ``sqlite3``) that lives with the
retriever's state; ``":memory:"`` gives a throwaway cache.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence

from earm_jax.store.hashing import text_sha256

from .base import PairScore, Scorer, ScorerIdentity

_SCHEMA = """
CREATE TABLE IF NOT EXISTS scores (
  scorer_key TEXT NOT NULL,
  prompt_version TEXT NOT NULL,
  query_sha256 TEXT NOT NULL,
  memory_sha256 TEXT NOT NULL,
  value REAL NOT NULL,
  status TEXT NOT NULL,
  created_at REAL NOT NULL,
  PRIMARY KEY (scorer_key, prompt_version, query_sha256, memory_sha256)
)
"""


@dataclasses.dataclass(frozen=True)
class CachedEntry:
    """One stored score (hashes only; the texts are not kept)."""

    scorer_key: str
    prompt_version: str
    query_sha256: str
    memory_sha256: str
    value: float
    status: str
    created_at: float


class ScoreCache:
    """Stores successful pair scores in SQLite.

    Thread-safe (one connection guarded by a lock). Use as a context manager or
    call ``close()``.

    Args:
      path: the SQLite file (parent folders are created), or ``":memory:"``.
    """

    def __init__(self, path: str | os.PathLike[str] = ":memory:") -> None:
        path_text = os.fspath(path)
        if path_text != ":memory:":
            parent = os.path.dirname(os.path.abspath(path_text))
            os.makedirs(parent, exist_ok=True)
        self.path = path_text
        self._lock = threading.Lock()
        self._connection = sqlite3.connect(
            path_text, check_same_thread=False, isolation_level=None
        )
        with self._lock:
            self._connection.execute("PRAGMA journal_mode=WAL")
            self._connection.execute(_SCHEMA)

    def get_many(
        self, identity: ScorerIdentity, query: str, memories: Sequence[str]
    ) -> list[float | None]:
        """Cached scores for ``memories`` (``None`` where not cached)."""
        if not memories:
            return []
        query_hash = text_sha256(query)
        memory_hashes = [text_sha256(memory) for memory in memories]
        found: dict[str, float] = {}
        unique_hashes = sorted(set(memory_hashes))
        chunk_size = 500  # stay below SQLite's bound-parameter limit
        with self._lock:
            for start in range(0, len(unique_hashes), chunk_size):
                chunk = unique_hashes[start : start + chunk_size]
                placeholders = ",".join("?" * len(chunk))
                rows = self._connection.execute(
                    "SELECT memory_sha256, value FROM scores WHERE scorer_key=? AND "
                    "prompt_version=? AND query_sha256=? AND status='ok' AND "
                    f"memory_sha256 IN ({placeholders})",
                    (identity.key(), identity.prompt_version, query_hash, *chunk),
                ).fetchall()
                found.update({memory_hash: value for memory_hash, value in rows})
        return [found.get(memory_hash) for memory_hash in memory_hashes]

    def put_many(
        self,
        identity: ScorerIdentity,
        query: str,
        memories: Sequence[str],
        scores: Sequence[PairScore],
    ) -> int:
        """Stores the successful, valid scores among ``scores`` (finite, in
        [0, 1]); returns how many."""
        if len(memories) != len(scores):
            raise ValueError(f"{len(memories)} memories but {len(scores)} scores")
        now = time.time()
        query_hash = text_sha256(query)
        rows = [
            (
                identity.key(),
                identity.prompt_version,
                query_hash,
                text_sha256(memory),
                float(score.value),
                "ok",
                now,
            )
            for memory, score in zip(memories, scores, strict=True)
            if _checked(score).ok
        ]
        if rows:
            with self._lock:
                self._connection.executemany(
                    "INSERT OR REPLACE INTO scores VALUES (?,?,?,?,?,?,?)", rows
                )
        return len(rows)

    def entries(self, identity: ScorerIdentity | None = None) -> Iterator[CachedEntry]:
        """All stored entries (of one scorer identity if given)."""
        sql = "SELECT * FROM scores"
        parameters: tuple[str, ...] = ()
        if identity is not None:
            sql += " WHERE scorer_key=? AND prompt_version=?"
            parameters = (identity.key(), identity.prompt_version)
        with self._lock:
            rows = self._connection.execute(sql, parameters).fetchall()
        for row in rows:
            yield CachedEntry(*row)

    def __len__(self) -> int:
        with self._lock:
            (count,) = self._connection.execute(
                "SELECT COUNT(*) FROM scores"
            ).fetchone()
        return int(count)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def __enter__(self) -> ScoreCache:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _checked(score: PairScore) -> PairScore:
    """A success whose value is not a finite number in [0, 1] becomes a counted
    failure (never cached, never replaced by a made-up score)."""
    if not score.ok:
        return score
    value = score.value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return PairScore.failure(f"invalid score: {value!r}")
    if not math.isfinite(value) or not 0.0 <= value <= 1.0:
        return PairScore.failure(f"invalid score: {value!r}")
    return score


@dataclasses.dataclass
class CacheCounters:
    """Cache hits (pairs answered from the cache) and misses (pairs sent on)."""

    hits: int = 0
    misses: int = 0


class CachedScorer:
    """Wraps a scorer: answers cached pairs, sends only the others, stores successes.

    Duplicate memory texts within one query are sent once. Failures are passed
    through and never cached.

    Args:
      scorer: the scorer that pays for uncached pairs.
      cache: where scores are kept.
    """

    def __init__(self, scorer: Scorer, cache: ScoreCache) -> None:
        self.scorer = scorer
        self.cache = cache
        self.counters = CacheCounters()

    @property
    def identity(self) -> ScorerIdentity:
        return self.scorer.identity

    def score(self, query: str, memories: Sequence[str]) -> list[PairScore]:
        return self.score_many([(query, memories)])[0]

    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[PairScore]]:
        identity = self.scorer.identity
        results: list[list[PairScore | None]] = []
        to_send: list[tuple[str, list[str]]] = []
        for query, memories in requests:
            cached = self.cache.get_many(identity, query, memories)
            results.append(
                [
                    None if value is None else PairScore.success(value)
                    for value in cached
                ]
            )
            missing = list(
                dict.fromkeys(
                    m for m, v in zip(memories, cached, strict=True) if v is None
                )
            )
            self.counters.hits += len(memories) - sum(v is None for v in cached)
            self.counters.misses += len(missing)
            to_send.append((query, missing))
        sendable = [(q, m) for q, m in to_send if m]
        fresh = iter(self.scorer.score_many(sendable) if sendable else [])
        for (query, memories), (_, missing), row in zip(
            requests, to_send, results, strict=True
        ):
            if not missing:
                continue
            scores = [_checked(score) for score in next(fresh)]
            if len(scores) != len(missing):
                raise RuntimeError(
                    f"inner scorer returned {len(scores)} scores for "
                    f"{len(missing)} memories"
                )
            self.cache.put_many(identity, query, missing, scores)
            by_memory = dict(zip(missing, scores, strict=True))
            for index, memory in enumerate(memories):
                if row[index] is None:
                    row[index] = by_memory[memory]
        complete: list[list[PairScore]] = []
        for row in results:
            if any(score is None for score in row):
                raise RuntimeError("inner scorer returned too few scores")
            complete.append([score for score in row if score is not None])
        return complete


__all__ = [
    "CacheCounters",
    "CachedEntry",
    "CachedScorer",
    "ScoreCache",
    "text_sha256",
]
