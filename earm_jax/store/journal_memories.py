"""Memory versions in the journal: ``memories(row, id, text, metadata,
embedding, origin, op, retired_op, checksum)``, one row per version of a
memory, each verified against its checksum when read; a forget empties a row
to a tombstone and logs it in the delete log. The memory half of
:class:`~earm_jax.store.journal.Journal`."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from earm_jax.store.integrity import CorruptFolderError, RowDigests, decoded_text

# A memory row as :meth:`MemoryTable._memory` reads it: the id's type, and the
# text columns as raw bytes (invalid UTF-8 is a finding, not a decoding error).
MEMORY_COLUMNS = (
    "row, typeof(id), CAST(id AS BLOB), CAST(text AS BLOB), "
    "CAST(metadata AS BLOB), embedding, origin, op, retired_op, checksum"
)


class MemoryTable:
    """Reads and writes memory rows (``_db``, ``path``, ``digests`` and
    ``log_deletion`` come from the journal)."""

    _db: sqlite3.Connection
    path: Path
    digests: RowDigests
    log_deletion: Any

    def memory_rows(self) -> list[tuple]:
        """``(row, id, text, metadata, embedding, origin, op, retired_op)`` by
        row, each verified against its checksum.

        Raises:
          CorruptFolderError: naming the first damaged row and field.
        """
        rows = []
        for fields in self._memory_fields():
            rows.append(self._memory(fields))
        return rows

    def _memory_fields(self) -> Iterator[tuple]:
        return iter(
            self._db.execute(f"SELECT {MEMORY_COLUMNS} FROM memories ORDER BY row")
        )

    def _memory(self, fields: tuple) -> tuple:
        row, id_type, raw_id, text, meta, blob, origin, op, retired, checksum = fields
        where = f"{self.path}: memory row {row}"
        if id_type == "integer":
            mid: Any = int(raw_id)
        elif id_type == "text":
            mid = decoded_text(raw_id, f"{where}: id")
        else:
            raise CorruptFolderError(f"{where}: id is a {id_type}, not an int or text")
        checked = (row, mid, text, meta, blob, origin, op)
        damaged = self.digests.damaged("memories", checked, checksum)
        if damaged:
            raise CorruptFolderError(
                f"{where} (id {mid!r}): its {', '.join(damaged)} does not match "
                "its checksum"
            )
        return (
            row,
            mid,
            decoded_text(text, f"{where}: text"),
            decoded_text(meta, f"{where}: metadata"),
            blob,
            origin,
            op,
            retired,
        )

    def insert_memories(self, db: sqlite3.Connection, rows: Sequence[tuple]) -> None:
        """Stores ``(row, id, text, metadata, embedding, origin, op)`` rows."""
        db.executemany(
            "INSERT INTO memories VALUES (?, ?, ?, ?, ?, ?, ?, NULL, ?)",
            [(*fields, self.digests.row("memories", fields)) for fields in rows],
        )

    def replace_metadata(self, db: sqlite3.Connection, row: int, meta: str) -> None:
        """Stores new metadata for memory ``row`` (the row's other fields are
        verified first, so a damaged row is never re-checksummed as sound)."""
        fields = db.execute(
            f"SELECT {MEMORY_COLUMNS} FROM memories WHERE row=?", (row,)
        ).fetchone()
        stored = self._memory(fields)
        checked = (row, stored[1], stored[2], meta, stored[4], stored[5], stored[6])
        db.execute(
            "UPDATE memories SET metadata=?, checksum=? WHERE row=?",
            (meta, self.digests.row("memories", checked), row),
        )

    def scrub_memories(
        self, db: sqlite3.Connection, rows: Sequence[int], width: int, seq: int
    ) -> None:
        """Overwrites the text, metadata and embedding of memory ``rows`` with
        an empty placeholder (the row number and id stay: a tombstone), and
        logs each in the delete log as emptied by operation ``seq``."""
        blank = np.zeros(width, np.float32).tobytes()
        for row in rows:
            fields = db.execute(
                f"SELECT {MEMORY_COLUMNS} FROM memories WHERE row=?", (row,)
            ).fetchone()
            stored = self._memory(fields)
            checked = (row, stored[1], "", "{}", blank, stored[5], stored[6])
            tombstone = self.digests.row("memories", checked)
            db.execute(
                "UPDATE memories SET text='', metadata='{}', embedding=?, "
                "checksum=? WHERE row=?",
                (blank, tombstone, row),
            )
            self.log_deletion(db, row, seq, tombstone)

    @staticmethod
    def retire_memories(db: sqlite3.Connection, rows: Sequence[int], seq: int) -> None:
        db.executemany(
            "UPDATE memories SET retired_op=? WHERE row=?", [(seq, r) for r in rows]
        )

    def max_int_id(self) -> int:
        (value,) = self._db.execute(
            "SELECT MAX(id) FROM memories WHERE typeof(id)='integer'"
        ).fetchone()
        return -1 if value is None else int(value)


__all__ = ["MEMORY_COLUMNS", "MemoryTable"]
