"""The retriever's write-ahead journal: one SQLite file in WAL mode.

It is the source of truth for everything a retriever knows: its settings, every
memory version (text, metadata, embedding), every operation in order (add,
update, delete, query), every paid score, and snapshots of the solver state.
Each operation is one transaction, so a crash (even ``kill -9``) leaves either
all of it or none; the solver state is rebuilt on open from the latest snapshot
plus a replay of the operations after it.

Tables:

* ``meta(key, value)``: JSON settings (format, config, scorer identity, width).
* ``memories(row, id, text, metadata, embedding, origin, op, retired_op)``: one
  row per memory *version*; ``row`` is the experience-matrix row, ``origin`` the
  row of the id's first version (its chronological key), ``retired_op`` the
  operation that edited or deleted it.
* ``ops(seq, kind, payload, data)``: the replay log; ``payload`` is JSON,
  ``data`` the fixed-width arrays of a query (pool, anchors, scores).
* ``scorers(id, key)`` and ``scores(scorer, query_hash, memory_hash, value,
  query_index, created_at)``: every successful paid score, keyed by 16-byte
  SHA-256 prefixes of the texts, so no pair is paid for twice.
* ``snapshots(id, seq, num_queries, solver_config, manifest, created_at)`` and
  ``chunks(hash, data)``: pytree snapshots, stored as content-addressed chunks
  of each leaf (unchanged chunks are not written again, so the growing history
  buffers cost only their new rows).
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

JOURNAL_NAME = "journal.sqlite"
FORMAT = "earm-retriever/2"
CHUNK_BYTES = 32 * 1024

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (
  row INTEGER PRIMARY KEY,
  id NOT NULL,
  text TEXT NOT NULL,
  metadata TEXT NOT NULL,
  embedding BLOB NOT NULL,
  origin INTEGER NOT NULL,
  op INTEGER NOT NULL,
  retired_op INTEGER
);
CREATE UNIQUE INDEX IF NOT EXISTS live_ids ON memories(id) WHERE retired_op IS NULL;
CREATE INDEX IF NOT EXISTS memory_ids ON memories(id);
CREATE TABLE IF NOT EXISTS ops (
  seq INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  payload TEXT NOT NULL,
  data BLOB
);
CREATE INDEX IF NOT EXISTS query_ops ON ops(json_extract(payload, '$.index'))
  WHERE kind = 'query';
CREATE TABLE IF NOT EXISTS scorers (id INTEGER PRIMARY KEY, key TEXT UNIQUE NOT NULL);
CREATE TABLE IF NOT EXISTS scores (
  scorer INTEGER NOT NULL,
  query_hash BLOB NOT NULL,
  memory_hash BLOB NOT NULL,
  value REAL NOT NULL,
  query_index INTEGER NOT NULL,
  created_at REAL NOT NULL,
  PRIMARY KEY (scorer, query_hash, memory_hash)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS snapshots (
  id INTEGER PRIMARY KEY,
  seq INTEGER NOT NULL,
  num_queries INTEGER NOT NULL,
  solver_config TEXT NOT NULL,
  manifest TEXT NOT NULL,
  created_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS chunks (hash BLOB PRIMARY KEY, data BLOB NOT NULL);
"""


class CorruptFolderError(ValueError):
    """A retriever folder fails its consistency check (the message names the
    file and what is wrong)."""


def text_hash(text: str) -> bytes:
    """16-byte SHA-256 prefix of a text's UTF-8 bytes (the score key)."""
    return hashlib.sha256(text.encode("utf-8")).digest()[:16]


def _chunk_hash(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=16).digest()


class Journal:
    """The SQLite journal of one retriever folder.

    Args:
      folder: the retriever's folder.
      synchronous: SQLite ``synchronous`` mode; ``"FULL"`` (default) makes an
        acknowledged write survive a power cut, ``"NORMAL"`` only a process crash.
    """

    def __init__(self, folder: str | os.PathLike[str], synchronous: str = "FULL"):
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, got {synchronous!r}")
        self.path = Path(folder) / JOURNAL_NAME
        self.existed = self.path.exists() and self.path.stat().st_size > 0
        try:
            self._db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False
            )
            # Small pages: a query touches a few rows, and WAL writes whole pages.
            self._db.execute("PRAGMA page_size=1024")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as error:
            raise CorruptFolderError(
                f"{self.path}: not a readable SQLite journal ({error})"
            ) from error
        self._scorer_ids: dict[str, int] = {}

    # ------------------------------------------------------------ transactions

    def transaction(self) -> _Transaction:
        """``with journal.transaction() as db:`` one atomic, durable write."""
        return _Transaction(self._db)

    def close(self) -> None:
        self._db.close()

    # -------------------------------------------------------------------- meta

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self._db.execute("SELECT value FROM meta WHERE key=?", (key,)).fetchone()
        if row is None:
            return default
        try:
            return json.loads(row[0])
        except ValueError as error:
            raise CorruptFolderError(
                f"{self.path}: meta[{key!r}] is not JSON ({error})"
            ) from error

    @staticmethod
    def set_meta(db: sqlite3.Connection, key: str, value: Any) -> None:
        db.execute(
            "INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value))
        )

    # ---------------------------------------------------------------- the log

    @staticmethod
    def append_op(
        db: sqlite3.Connection, kind: str, payload: dict, data: bytes | None = None
    ) -> int:
        cursor = db.execute(
            "INSERT INTO ops (kind, payload, data) VALUES (?, ?, ?)",
            (kind, json.dumps(payload), data),
        )
        return int(cursor.lastrowid)

    def ops_after(self, seq: int) -> Iterator[tuple[int, str, dict, bytes | None]]:
        rows = self._db.execute(
            "SELECT seq, kind, payload, data FROM ops WHERE seq > ? ORDER BY seq",
            (seq,),
        )
        for number, kind, payload, data in rows:
            try:
                decoded = json.loads(payload)
            except ValueError as error:
                raise CorruptFolderError(
                    f"{self.path}: operation {number} ({kind}) has a payload that "
                    f"is not JSON ({error})"
                ) from error
            yield int(number), kind, decoded, data

    def last_seq(self) -> int:
        (seq,) = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM ops").fetchone()
        return int(seq)

    # --------------------------------------------------------------- memories

    def memory_rows(self) -> list[tuple]:
        """``(row, id, text, metadata, embedding, origin, op, retired_op)`` by row."""
        return self._db.execute(
            "SELECT row, id, text, metadata, embedding, origin, op, retired_op "
            "FROM memories ORDER BY row"
        ).fetchall()

    def max_int_id(self) -> int:
        (value,) = self._db.execute(
            "SELECT MAX(id) FROM memories WHERE typeof(id)='integer'"
        ).fetchone()
        return -1 if value is None else int(value)

    # ----------------------------------------------------------------- scores

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
            found.update(
                self._db.execute(
                    "SELECT memory_hash, value FROM scores WHERE scorer=? AND "
                    f"query_hash=? AND memory_hash IN ({marks})",
                    (row[0], query_hash, *part),
                ).fetchall()
            )
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
        now = time.time()
        with self.transaction() as db:
            scorer = self.scorer_id(db, scorer_key)
            db.executemany(
                "INSERT OR IGNORE INTO scores VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (scorer, text_hash(q), text_hash(m), float(v), query_index, now)
                    for q, m, v in pairs
                ],
            )

    def num_scores(self) -> int:
        (count,) = self._db.execute("SELECT COUNT(*) FROM scores").fetchone()
        return int(count)

    # -------------------------------------------------------------- snapshots

    def write_snapshot(
        self,
        seq: int,
        num_queries: int,
        solver_config: dict,
        leaves: Sequence[np.ndarray],
        names: Sequence[str] | None = None,
    ) -> int:
        """Stores a pytree's leaves as of operation ``seq``; returns bytes written.

        One transaction: the new snapshot replaces the old one atomically, and
        only chunks not already stored are written.
        """
        manifest = []
        new_chunks: dict[bytes, bytes] = {}
        for leaf in leaves:
            array = np.array(leaf, order="C", copy=True)
            hashes = []
            if array.ndim == 0 or array.nbytes <= CHUNK_BYTES:
                pieces = [array.tobytes()]
            else:
                row_bytes = max(1, array.nbytes // array.shape[0])
                rows = max(1, CHUNK_BYTES // row_bytes)
                pieces = [
                    array[start : start + rows].tobytes()
                    for start in range(0, array.shape[0], rows)
                ]
            for piece in pieces:
                digest = _chunk_hash(piece)
                hashes.append(digest.hex())
                new_chunks[digest] = piece
            manifest.append(
                {"shape": list(array.shape), "dtype": array.dtype.str, "chunks": hashes}
            )
            if names is not None:
                manifest[-1]["name"] = names[len(manifest) - 1]
        stored = {
            bytes(h) for (h,) in self._db.execute("SELECT hash FROM chunks").fetchall()
        }
        written = 0
        with self.transaction() as db:
            for digest, piece in new_chunks.items():
                if digest not in stored:
                    db.execute("INSERT INTO chunks VALUES (?, ?)", (digest, piece))
                    written += len(piece)
            db.execute("DELETE FROM snapshots")
            db.execute(
                "INSERT INTO snapshots (seq, num_queries, solver_config, manifest, "
                "created_at) VALUES (?, ?, ?, ?, ?)",
                (
                    seq,
                    num_queries,
                    json.dumps(solver_config),
                    json.dumps(manifest),
                    time.time(),
                ),
            )
            stale = stored - set(new_chunks)
            db.executemany(
                "DELETE FROM chunks WHERE hash=?", [(digest,) for digest in stale]
            )
        return written

    def latest_snapshot(self) -> tuple[int, int, dict, list, list | None] | None:
        """``(seq, num_queries, solver_config, leaves, leaf names)`` of the
        snapshot, verified (names ``None`` if it stored none).

        Raises:
          CorruptFolderError: a chunk is missing or does not match its hash.
        """
        row = self._db.execute(
            "SELECT seq, num_queries, solver_config, manifest FROM snapshots "
            "ORDER BY id DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        seq, num_queries, config_text, manifest_text = row
        try:
            config, manifest = json.loads(config_text), json.loads(manifest_text)
        except ValueError as error:
            raise CorruptFolderError(
                f"{self.path}: the snapshot's manifest is not JSON ({error})"
            ) from error
        leaves = []
        for number, entry in enumerate(manifest):
            pieces = []
            for digest_hex in entry["chunks"]:
                digest = bytes.fromhex(digest_hex)
                found = self._db.execute(
                    "SELECT data FROM chunks WHERE hash=?", (digest,)
                ).fetchone()
                if found is None:
                    raise CorruptFolderError(
                        f"{self.path}: snapshot leaf {number} misses chunk "
                        f"{digest_hex} (run `earm retriever repair`)"
                    )
                if _chunk_hash(found[0]) != digest:
                    raise CorruptFolderError(
                        f"{self.path}: snapshot leaf {number} chunk {digest_hex} "
                        "does not match its hash (run `earm retriever repair`)"
                    )
                pieces.append(found[0])
            data = b"".join(pieces)
            dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
            if len(data) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
                raise CorruptFolderError(
                    f"{self.path}: snapshot leaf {number} holds {len(data)} bytes, "
                    f"not a {dtype} array of shape {shape}"
                )
            leaves.append(np.frombuffer(data, dtype).reshape(shape).copy())
        names = [entry.get("name") for entry in manifest]
        return (
            int(seq),
            int(num_queries),
            config,
            leaves,
            None if None in names else names,
        )

    def drop_snapshots(self) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM snapshots")
            db.execute("DELETE FROM chunks")

    def integrity_problems(self) -> list[str]:
        """SQLite's own ``quick_check`` (empty when fine)."""
        rows = self._db.execute("PRAGMA quick_check").fetchall()
        return [row[0] for row in rows if row[0] != "ok"]

    def bytes_on_disk(self) -> int:
        total = 0
        for suffix in ("", "-wal"):
            path = Path(str(self.path) + suffix)
            if path.exists():
                total += path.stat().st_size
        return total


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.db.execute("COMMIT")
        else:
            self.db.execute("ROLLBACK")


__all__ = [
    "CHUNK_BYTES",
    "FORMAT",
    "JOURNAL_NAME",
    "CorruptFolderError",
    "Journal",
    "text_hash",
]
