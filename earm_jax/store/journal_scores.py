"""Paid scores in the journal: ``scorers(id, key)`` and ``scores(scorer,
query_hash, memory_hash, value, query_index, created_at, checksum)``, keyed by
16-byte SHA-256 prefixes of the texts, so no pair is paid for twice. A score's
digests are bound to its scorer and text hashes (a value moved to another
pair fails) and, in a keyed folder, need the key to forge."""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from earm_jax.store.integrity import RowDigests


def text_hash(text: str) -> bytes:
    """16-byte SHA-256 prefix of a text's UTF-8 bytes (the score key)."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


class ScoreStore:
    """The paid-score half of :class:`~earm_jax.store.journal.Journal`.

    After :meth:`keep_scores_in_memory`, paid scores are held by this object
    only (nothing keyed by a query's text reaches the disk); they are gone
    when it is closed.
    """

    path: Path
    _db: sqlite3.Connection
    _scorer_ids: dict[str, int]
    damaged_scores: int
    digests: RowDigests
    _in_memory: dict[tuple[str, bytes, bytes], float] | None = None

    def keep_scores_in_memory(self) -> None:
        """From now on, scores are stored in memory, not in the journal."""
        if self._in_memory is None:
            self._in_memory = {}

    def scorer_id(self, db: sqlite3.Connection, key: str) -> int:
        if key not in self._scorer_ids:
            db.execute("INSERT OR IGNORE INTO scorers (key) VALUES (?)", (key,))
            (number,) = db.execute(
                "SELECT id FROM scorers WHERE key=?", (key,)
            ).fetchone()
            self._scorer_ids[key] = int(number)
        return self._scorer_ids[key]

    def get_scores(
        self, scorer_key: str, query: str, memories: Sequence[str]
    ) -> list[float | None]:
        """Stored scores of ``(query, memory)`` pairs (``None`` where unpaid)."""
        if not memories:
            return []
        if self._in_memory is not None:
            key = text_hash(query)
            return [
                self._in_memory.get((scorer_key, key, text_hash(m))) for m in memories
            ]
        row = self._db.execute(
            "SELECT id FROM scorers WHERE key=?", (scorer_key,)
        ).fetchone()
        if row is None:
            return [None] * len(memories)
        query_hash = text_hash(query)
        hashes = [text_hash(memory) for memory in memories]
        found: dict[bytes, float] = {}
        unique = sorted(set(hashes))
        for start in range(0, len(unique), 500):
            part = unique[start : start + 500]
            marks = ",".join("?" * len(part))
            for fields in self._db.execute(
                "SELECT scorer, query_hash, memory_hash, value, query_index, "
                "checksum FROM scores WHERE scorer=? AND "
                f"query_hash=? AND memory_hash IN ({marks})",
                (row[0], query_hash, *part),
            ):
                if self.digests.damaged("scores", fields[:5], fields[5]):
                    self.damaged_scores += 1  # paid again, then overwritten
                    continue
                found[fields[2]] = fields[3]
        return [found.get(h) for h in hashes]

    def put_scores(
        self,
        scorer_key: str,
        pairs: Sequence[tuple[str, str, float]],
        query_index: int,
    ) -> None:
        """Stores paid ``(query, memory, value)`` scores in one transaction."""
        if not pairs:
            return
        if self._in_memory is not None:
            for q, m, v in pairs:
                self._in_memory[(scorer_key, text_hash(q), text_hash(m))] = float(v)
            return
        now = time.time()
        with self.transaction() as db:
            scorer = self.scorer_id(db, scorer_key)
            rows = [
                (scorer, text_hash(q), text_hash(m), float(v), int(query_index))
                for q, m, v in pairs
            ]
            # Only unpaid pairs are paid, so a pair stored already is one whose
            # row was found damaged at the lookup: the fresh answer replaces it.
            db.executemany(
                "INSERT OR REPLACE INTO scores VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(*fields, now, self.digests.row("scores", fields)) for fields in rows],
            )

    def num_scores(self) -> int:
        (count,) = self._db.execute("SELECT COUNT(*) FROM scores").fetchone()
        return int(count)

    def forget_scores(self, db: sqlite3.Connection, texts: Sequence[str]) -> None:
        """Deletes every paid score keyed by a text of ``texts``, as the
        memory's text or as the query's (a query that quoted it word for
        word), so no digest of those texts is left."""
        hashes = {text_hash(text) for text in texts}
        db.executemany(
            "DELETE FROM scores WHERE memory_hash=? OR query_hash=?",
            [(h, h) for h in hashes],
        )
        if self._in_memory is not None:
            for key in [k for k in self._in_memory if hashes & {k[1], k[2]}]:
                del self._in_memory[key]

    def drop_damaged_scores(self) -> int:
        """Deletes the paid scores whose row fails its checksum (they are paid
        again when needed); returns how many."""
        damaged = [
            fields[:3]
            for fields in self._db.execute(
                "SELECT scorer, query_hash, memory_hash, value, query_index, "
                "checksum FROM scores"
            ).fetchall()
            if self.digests.damaged("scores", fields[:5], fields[5])
        ]
        with self.transaction() as db:
            db.executemany(
                "DELETE FROM scores WHERE scorer=? AND query_hash=? AND memory_hash=?",
                damaged,
            )
        return len(damaged)


__all__ = ["ScoreStore", "text_hash"]
