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
* ``deletions(number, row, op, tombstone, previous)``: the delete log, one
  record per memory row a forget emptied (``delete``, or ``update`` without
  history): the row, the operation, the row's checksum as the forget left it
  (its ``tombstone``: a digest of the emptied row, never of the text) and the
  previous record's checksum, so the records form a chain.

Integrity. Every row of ``meta``, ``memories``, ``ops``, ``scores`` and
``deletions`` carries a ``checksum``: an 8-byte digest of each of its fields,
each bound to the row's place (:mod:`earm_jax.store.integrity`), so a damaged
row, or a value moved to another row with its digest, is named with the field
that no longer matches; a keyed folder's digests are HMAC-SHA256 under a key
kept outside it (:mod:`earm_jax.store.folder_key`). Rows are verified when
read (memories, the delete log and replayed operations at open, scores at
each lookup, an answer when asked for); :meth:`Journal.findings` verifies
every row. Text columns are read as raw bytes, so invalid UTF-8 is a finding
too, never a decoding error. Snapshot chunks are keyed by their own BLAKE2b
hash. ``retired_op`` (which a delete or an edit sets later) is not in the
memory checksum: it is checked against the retire operations instead.
Operations are numbered without gaps, so one removed from the middle is
named (:meth:`Journal.missing_op`). A row a forget emptied must still hold
its tombstone, and each forget an operation records must have its delete-log
record: a deleted row put back from a backup, or a record removed or edited,
is named (:meth:`Journal.deletion_problems`). Operations lost as a whole at
the end (a ``-wal`` file removed after a crash) are caught by the high-water
mark beside the journal (:mod:`earm_jax.store.high_water`), checked at open.
What no check inside the folder can catch: the journal and its high-water
mark rolled back together to a consistent older state, and, in an unkeyed
folder, anything rewritten with digests recomputed (anyone can compute them).
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from earm_jax.store.delete_log import DeleteLog
from earm_jax.store.folder_key import FolderKeyError, open_key
from earm_jax.store.high_water import HIGH_WATER_NAME, HighWater, behind_mark
from earm_jax.store.integrity import (
    CHECKED_FIELDS,
    KEYED_SCHEME,
    LEGACY_TABLES,
    CorruptFolderError,
    RowDigests,
    decoded_text,
    legacy_damaged_fields,
    raw_column,
)
from earm_jax.store.journal_format import (
    FORMAT,
    JOURNAL_NAME,
    MARKER_NAME,
    MIGRATED_FORMATS,
    SCHEMA,
    DiskFullError,
    Transaction,
    disk_full,
    is_disk_full,
    lost_journal,
    write_marker,
)
from earm_jax.store.journal_memories import MemoryTable
from earm_jax.store.journal_scores import ScoreStore, text_hash
from earm_jax.store.snapshots import CHUNK_BYTES, SnapshotStore, chunk_hash

_OP_COLUMNS = ", ".join(
    raw_column("ops", c) for c in (*CHECKED_FIELDS["ops"], "checksum")
)
# The columns that find a row of each digested table again (to rewrite its
# checksum when a folder is upgraded).
_ROW_KEYS = {
    "meta": ("rowid",),
    "memories": ("row",),
    "ops": ("seq",),
    "scores": ("scorer", "query_hash", "memory_hash"),
}


def _row_name(table: str, fields: Sequence[Any]) -> str:
    """How a message names a row of ``table`` (from its checked fields)."""
    if table == "meta":
        return f"meta[{bytes(fields[0]).decode('utf-8', 'replace')!r}]"
    if table == "memories":
        mid = fields[1]
        if isinstance(mid, bytes):
            mid = mid.decode("utf-8", "replace")
        return f"memory row {fields[0]} (id {mid!r})"
    if table == "ops":
        return f"operation {fields[0]}"
    return (
        f"paid score (query {bytes(fields[1]).hex()}, memory {bytes(fields[2]).hex()})"
    )


class Journal(SnapshotStore, ScoreStore, MemoryTable, DeleteLog):
    """The SQLite journal of one retriever folder.

    Args:
      folder: the retriever's folder.
      synchronous: SQLite ``synchronous`` mode; ``"FULL"`` (default) makes an
        acknowledged write survive a power cut, ``"NORMAL"`` only a process crash.
      guard: called inside every write transaction, before anything is
        written (e.g. :meth:`~earm_jax.store.lock.FolderLock.verify`); what it
        raises rolls the transaction back.
      key_file: the folder's key file (:mod:`earm_jax.store.folder_key`):
        required for a keyed folder, refused for an unkeyed one; a new folder
        opened with one is keyed.
      create_key: create ``key_file`` when it is missing and the folder is
        new (a retriever creating its folder; ``check`` never creates one).

    Raises:
      FolderKeyError: the folder is keyed and no key file, or a wrong one,
        was given; or it is not keyed and one was given.
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        synchronous: str = "FULL",
        guard: Callable[[], None] | None = None,
        key_file: str | os.PathLike[str] | None = None,
        create_key: bool = False,
    ):
        if synchronous not in ("FULL", "NORMAL"):
            raise ValueError(f"synchronous must be FULL or NORMAL, got {synchronous!r}")
        self.path = Path(folder) / JOURNAL_NAME
        self.existed = self.path.exists() and self.path.stat().st_size > 0
        self._high_water = HighWater(folder)
        # Read before the journal: the mark is written after each commit, so
        # read in this order it is never ahead of a journal that lost nothing.
        mark = self._high_water.read()
        # Unkeyed until the folder's record says otherwise (an upgrade from an
        # older format writes unkeyed digests).
        self.digests = RowDigests()
        opened: sqlite3.Connection | None = None
        try:
            self._db = opened = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False
            )
            # Small pages: a query touches a few rows, and WAL writes whole pages.
            self._db.execute("PRAGMA page_size=1024")
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute(f"PRAGMA synchronous={synchronous}")
            # Freed space is zeroed, so a deleted memory's bytes do not linger
            # in free pages or unused cell space.
            self._db.execute("PRAGMA secure_delete=ON")
            self._db.executescript(SCHEMA)
            self._scorer_ids: dict[str, int] = {}
            self._guard = guard
            # Score rows found damaged at a lookup: treated as unpaid (paid
            # again, then overwritten), counted here and reported by check.
            self.damaged_scores = 0
            self._migrate(key_file)
            self.digests = self._folder_digests(key_file, create_key)
            # The record of the scheme is itself a digested row.
            self.get_meta("digests")
            last = self.last_seq()
        except BaseException as error:
            # A journal that failed to open holds no handle: the same process
            # can open it again (once space is back, say).
            if opened is not None:
                opened.close()
            if isinstance(error, DiskFullError):
                raise
            if is_disk_full(error, self.path.parent):
                raise disk_full(
                    self.path.parent, error, "the journal was not opened"
                ) from error
            if isinstance(error, sqlite3.DatabaseError):
                raise CorruptFolderError(
                    f"{self.path}: not a readable SQLite journal ({error})"
                ) from error
            raise
        if mark is not None and last < mark:
            self._db.close()
            raise CorruptFolderError(behind_mark(self.path, last, mark))

    def _raw_meta(self, key: str) -> Any:
        """A setting read before the folder's digests are known (verified
        once they are)."""
        row = self._db.execute(
            "SELECT CAST(value AS BLOB) FROM meta WHERE key=?", (key,)
        ).fetchone()
        if row is None:
            return None
        try:
            return json.loads(row[0])
        except ValueError as error:
            raise CorruptFolderError(
                f"{self.path}: meta[{key!r}] is not JSON ({error})"
            ) from error

    def _folder_digests(
        self, key_file: str | os.PathLike[str] | None, create_key: bool
    ) -> RowDigests:
        """The digests this folder's rows carry, given the key file the
        caller passed (a one-line :class:`FolderKeyError` when it does not
        fit the folder)."""
        folder = self.path.parent
        if self._raw_meta("format") is None:
            # A new folder: keyed when given a key.
            if key_file is None:
                return RowDigests()
            return RowDigests(open_key(key_file, folder, create_key))
        stored = self._raw_meta("digests")
        keyed = isinstance(stored, dict) and stored.get("scheme") == KEYED_SCHEME
        if keyed and key_file is None:
            raise FolderKeyError(
                f"{folder} is keyed (its rows carry HMAC-SHA256 digests under a "
                "key kept outside it) and no key file was given: pass the key "
                "file it was created with (key_file=, --key-file)"
            )
        if not keyed and key_file is not None:
            # Never keyed after the fact: whoever can rewrite a keyed folder
            # without its key could then rewrite it as unkeyed and pass.
            raise FolderKeyError(
                f"{folder} has unkeyed digests, but a key file was given "
                f"({key_file}): it was created without a key (open it without "
                "one), or someone without the key rewrote it (restore it from "
                "a backup)"
            )
        if not keyed:
            return RowDigests()
        digests = RowDigests(open_key(key_file, folder, create=False))
        if digests.fingerprint() != stored.get("key"):
            raise FolderKeyError(
                f"{key_file} is not the key of {folder}: its meta['digests'] "
                f"records key fingerprint {stored.get('key')!r}, this key's is "
                f"{digests.fingerprint()!r}"
            )
        return digests

    def _migrate(self, key_file: str | os.PathLike[str] | None) -> None:
        """Upgrades a folder of an older format in one transaction: format 2
        rows (no checksums) are trusted as they are, format 3 rows are
        verified against their digests first (a damaged row is refused,
        never digested anew as sound); then every row gets place-bound
        digests, and every row a forget emptied a delete-log record."""
        stored = self._raw_meta("format")
        if stored not in MIGRATED_FORMATS:
            return
        if key_file is not None:
            raise FolderKeyError(
                f"{self.path.parent} was written in format {stored!r}, without a "
                "key: a key is never added to an existing folder; open it "
                "without key_file"
            )
        verify = stored != "earm-retriever/2"
        with self.transaction() as db:
            for table in LEGACY_TABLES:
                columns = {c[1] for c in db.execute(f"PRAGMA table_info({table})")}
                if "checksum" not in columns:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN checksum BLOB")
            for table, keys in _ROW_KEYS.items():
                selected = ", ".join(
                    [
                        *keys,
                        *(raw_column(table, name) for name in CHECKED_FIELDS[table]),
                        "checksum",
                    ]
                )
                rows = db.execute(f"SELECT {selected} FROM {table}").fetchall()
                updates = []
                for stored_row in rows:
                    fields = stored_row[len(keys) : -1]
                    damaged = legacy_damaged_fields(table, fields, stored_row[-1])
                    if verify and damaged:
                        raise CorruptFolderError(
                            f"{self.path}: {_row_name(table, fields)}: its "
                            f"{', '.join(damaged)} does not match its checksum "
                            f"(format {stored!r}; the folder was not upgraded: "
                            "restore the journal from a backup)"
                        )
                    updates.append(
                        (self.digests.row(table, fields), *stored_row[: len(keys)])
                    )
                marks = " AND ".join(f"{k}=?" for k in keys)
                db.executemany(f"UPDATE {table} SET checksum=? WHERE {marks}", updates)
            # The rows a forget emptied before the delete log existed (a live
            # text is never empty); the operation that emptied each is unknown.
            for row, checksum in db.execute(
                "SELECT row, checksum FROM memories WHERE CAST(text AS BLOB)=x'' "
                "AND retired_op IS NOT NULL ORDER BY row"
            ).fetchall():
                self.log_deletion(db, row, None, checksum)
            self.set_meta(db, "format", FORMAT)
            self.set_meta(db, "digests", self.digests.record())

    # ------------------------------------------------------------ transactions

    def transaction(self) -> Transaction:
        """``with journal.transaction() as db:`` one atomic, durable write."""
        return Transaction(self._db, self._guard, self.path, self.advance_high_water)

    def advance_high_water(self) -> None:
        """Records the last committed operation in the high-water mark
        (:mod:`earm_jax.store.high_water`); called after every commit."""
        self._high_water.advance(self.last_seq())

    def sync_high_water(self) -> None:
        """Makes the high-water mark survive a power cut."""
        self._high_water.sync()

    def close(self) -> None:
        try:
            self._high_water.close()
        finally:
            self._db.close()

    # -------------------------------------------------------------------- meta

    def get_meta(self, key: str, default: Any = None) -> Any:
        """A setting, verified against its checksum."""
        row = self._db.execute(
            "SELECT CAST(value AS BLOB), checksum FROM meta WHERE key=?", (key,)
        ).fetchone()
        if row is None:
            return default
        where = f"{self.path}: meta[{key!r}]"
        if self.digests.damaged("meta", (key, row[0]), row[1]):
            raise CorruptFolderError(f"{where} does not match its checksum")
        try:
            return json.loads(decoded_text(row[0], where))
        except ValueError as error:
            raise CorruptFolderError(f"{where} is not JSON ({error})") from error

    def set_meta(self, db: sqlite3.Connection, key: str, value: Any) -> None:
        text = json.dumps(value)
        db.execute(
            "INSERT OR REPLACE INTO meta VALUES (?, ?, ?)",
            (key, text, self.digests.row("meta", (key, text))),
        )

    # ---------------------------------------------------------------- the log

    def append_op(
        self,
        db: sqlite3.Connection,
        kind: str,
        payload: dict,
        data: bytes | None = None,
    ) -> int:
        (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM ops").fetchone()
        text = json.dumps(payload)
        db.execute(
            "INSERT INTO ops (seq, kind, payload, data, checksum) "
            "VALUES (?, ?, ?, ?, ?)",
            (seq, kind, text, data, self.digests.row("ops", (seq, kind, text, data))),
        )
        return int(seq)

    def _op(self, fields: tuple) -> tuple[int, str, dict, bytes | None]:
        """A verified, decoded ``ops`` row (read with :func:`_raw`)."""
        number, kind, payload, data, checksum = fields
        where = f"{self.path}: operation {number}"
        damaged = self.digests.damaged("ops", (number, kind, payload, data), checksum)
        if damaged:
            raise CorruptFolderError(
                f"{where}: its {', '.join(damaged)} does not match its checksum"
            )
        kind = decoded_text(kind, f"{where}: kind")
        try:
            decoded = json.loads(decoded_text(payload, f"{where} ({kind}): payload"))
        except ValueError as error:
            raise CorruptFolderError(
                f"{where} ({kind}) has a payload that is not JSON ({error})"
            ) from error
        if not isinstance(decoded, dict):
            raise CorruptFolderError(f"{where} ({kind}): payload is not an object")
        return int(number), kind, decoded, data

    def ops_after(self, seq: int) -> Iterator[tuple[int, str, dict, bytes | None]]:
        """The operations after ``seq`` in order, each verified."""
        rows = self._db.execute(
            f"SELECT {_OP_COLUMNS} FROM ops WHERE seq > ? ORDER BY seq", (seq,)
        )
        for fields in rows:
            yield self._op(fields)

    def missing_op(self) -> str | None:
        """The first gap in the operations' numbers (they run 1, 2, ... with
        none left out, so an operation removed from the middle is named; one
        removed from the end is the high-water mark's to name), or ``None``."""
        count, first, last = self._db.execute(
            "SELECT COUNT(*), MIN(seq), MAX(seq) FROM ops"
        ).fetchone()
        if count == 0 or (first == 1 and last == count):
            return None
        numbers = self._db.execute("SELECT seq FROM ops ORDER BY seq")
        for expected, (seq,) in enumerate(numbers, start=1):
            if seq != expected:
                return (
                    f"{self.path}: operation {expected} is missing (the next one "
                    f"stored is {seq}): an operation was removed"
                )
        return None

    def retire_payloads(self) -> Iterator[tuple[int, dict]]:
        """``(seq, payload)`` of every retire operation that passes its
        checks (a damaged one is named by the operations' own check)."""
        for fields in self._db.execute(
            f"SELECT {_OP_COLUMNS} FROM ops WHERE kind='retire' ORDER BY seq"
        ).fetchall():
            try:
                seq, _, payload, _ = self._op(fields)
            except CorruptFolderError:
                continue
            yield seq, payload

    def retired_rows(self) -> dict[int, int]:
        """``{memory row: seq of the operation that retired it}`` from the
        verified retire operations (what ``retired_op`` must agree with)."""
        retired = {}
        for fields in self._db.execute(
            f"SELECT {_OP_COLUMNS} FROM ops WHERE kind='retire' ORDER BY seq"
        ):
            seq, _, payload, _ = self._op(fields)
            for row in payload.get("rows", []):
                retired[int(row)] = seq
        return retired

    def rewrite_query_payloads(
        self, db: sqlite3.Connection, rewrite: Callable[[dict], dict]
    ) -> int:
        """Replaces each query operation's payload by ``rewrite(payload)``
        where that differs (each row verified first, then checksummed anew);
        returns how many changed. For redacting what a record keeps (its
        query text, failure reasons), never what replay reads."""
        changed = 0
        rows = db.execute(
            f"SELECT {_OP_COLUMNS} FROM ops WHERE kind='query' ORDER BY seq"
        ).fetchall()
        for fields in rows:
            seq, kind, payload, data = self._op(fields)
            new = rewrite(dict(payload))
            if new == payload:
                continue
            text = json.dumps(new)
            db.execute(
                "UPDATE ops SET payload=?, checksum=? WHERE seq=?",
                (text, self.digests.row("ops", (seq, kind, text, data)), seq),
            )
            changed += 1
        return changed

    def query_op(self, index: int) -> tuple[int, str, dict, bytes | None] | None:
        """The verified operation of query ``index`` (``None`` if absent)."""
        fields = self._db.execute(
            f"SELECT {_OP_COLUMNS} FROM ops WHERE kind='query' AND "
            "json_extract(payload, '$.index')=?",
            (int(index),),
        ).fetchone()
        return None if fields is None else self._op(fields)

    def last_seq(self) -> int:
        (seq,) = self._db.execute("SELECT COALESCE(MAX(seq), 0) FROM ops").fetchone()
        return int(seq)

    def flush_freed(self) -> bool:
        """Moves every committed page into the database file and truncates
        the WAL, so overwritten content survives in no file (with
        ``secure_delete`` the freed space was zeroed already); ``False`` when
        another connection's read kept the WAL from being truncated."""
        try:
            (busy, _, _) = self._db.execute(
                "PRAGMA wal_checkpoint(TRUNCATE)"
            ).fetchone()
        except sqlite3.Error:
            return False
        return not busy

    # -------------------------------------------------------------- integrity

    def findings(self) -> list[tuple[str, str]]:
        """Every damaged row of the journal as ``(kind, message)``, the message
        naming its table, row and what is wrong; ``kind`` is one of
        ``sqlite``, ``meta``, ``memory``, ``operation``, ``score``, ``chunk``,
        ``deletion`` (empty when every checksum, every text's UTF-8, the
        operations' numbering, the delete log and SQLite's own
        ``quick_check`` pass)."""
        found = [("sqlite", problem) for problem in self.integrity_problems()]
        for fields in self._memory_fields():
            try:
                self._memory(fields)
            except CorruptFolderError as error:
                found.append(("memory", str(error)))
        missing = self.missing_op()
        if missing is not None:
            found.append(("operation", missing))
        for fields in self._db.execute(f"SELECT {_OP_COLUMNS} FROM ops ORDER BY seq"):
            try:
                self._op(fields)
            except CorruptFolderError as error:
                found.append(("operation", str(error)))
        for key, value, checksum in self._db.execute(
            "SELECT CAST(key AS BLOB), CAST(value AS BLOB), checksum FROM meta"
        ):
            if self.digests.damaged("meta", (key, value), checksum):
                name = key.decode("utf-8", "replace")
                found.append(
                    ("meta", f"{self.path}: meta[{name!r}] does not match its checksum")
                )
        for fields in self._db.execute(
            "SELECT scorer, query_hash, memory_hash, value, query_index, checksum "
            "FROM scores"
        ):
            damaged = self.digests.damaged("scores", fields[:5], fields[5])
            if damaged:
                found.append(
                    (
                        "score",
                        f"{self.path}: paid score (query {bytes(fields[1]).hex()}, "
                        f"memory {bytes(fields[2]).hex()}): its "
                        f"{', '.join(damaged)} does not match its checksum",
                    )
                )
        for digest, data in self._db.execute("SELECT hash, data FROM chunks"):
            if chunk_hash(bytes(data)) != bytes(digest):
                found.append(
                    (
                        "chunk",
                        f"{self.path}: snapshot chunk {bytes(digest).hex()} does "
                        "not match its hash",
                    )
                )
        found += [("deletion", problem) for problem in self.deletion_problems()]
        return found

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


__all__ = [
    "CHUNK_BYTES",
    "FORMAT",
    "HIGH_WATER_NAME",
    "JOURNAL_NAME",
    "MARKER_NAME",
    "CorruptFolderError",
    "DiskFullError",
    "FolderKeyError",
    "Journal",
    "RowDigests",
    "lost_journal",
    "text_hash",
    "write_marker",
]
