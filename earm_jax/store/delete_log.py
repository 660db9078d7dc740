"""The delete log: one chained record per memory row a forget emptied, so a
deleted row put back (from a backup, say) or a record removed or edited is
named. The delete-log half of :class:`~earm_jax.store.journal.Journal`."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from earm_jax.store.integrity import CHECKED_FIELDS, RowDigests

DELETION_COLUMNS = ", ".join((*CHECKED_FIELDS["deletions"], "checksum"))


class DeleteLog:
    """Appends and checks the delete log (``_db``, ``path``, ``digests`` and
    ``retire_payloads`` come from the journal)."""

    _db: sqlite3.Connection
    path: Path
    digests: RowDigests
    retire_payloads: Any

    def log_deletion(
        self, db: sqlite3.Connection, row: int, seq: int | None, tombstone: bytes
    ) -> None:
        """Appends a delete-log record: memory ``row`` was emptied by
        operation ``seq`` and holds ``tombstone`` (its checksum), chained to
        the record before it by that record's checksum."""
        last = db.execute(
            "SELECT number, checksum FROM deletions ORDER BY number DESC LIMIT 1"
        ).fetchone()
        if last is None:
            number, previous = 1, b""
        else:
            number, previous = int(last[0]) + 1, bytes(last[1] or b"")
        fields = (number, int(row), seq, bytes(tombstone), previous)
        db.execute(
            f"INSERT INTO deletions ({DELETION_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
            (*fields, self.digests.row("deletions", fields)),
        )

    def deletion_problems(self) -> list[str]:
        """What is wrong with the delete log, each naming the record or the
        memory row (empty when fine): a record that fails its checksum, a
        broken chain (a record removed or edited), a row a forget emptied
        that holds something else again (put back from a backup), a forget
        an operation records with no record, or a record no operation
        accounts for."""
        problems = []
        logged: set[tuple[int, int]] = set()
        expected, previous = 1, b""
        for fields in self._db.execute(
            f"SELECT {DELETION_COLUMNS} FROM deletions ORDER BY number"
        ).fetchall():
            number, row, op, tombstone, link, checksum = fields
            where = f"{self.path}: delete log record {number}"
            damaged = self.digests.damaged("deletions", fields[:5], checksum)
            if damaged:
                problems.append(
                    f"{where}: its {', '.join(damaged)} does not match its checksum"
                )
            elif number != expected:
                problems.append(
                    f"{where}: record {expected} before it is missing (the delete "
                    "log's chain is broken)"
                )
            elif link != previous:
                problems.append(
                    f"{where}: does not carry the checksum of record {number - 1} "
                    "(the delete log's chain is broken: a record was removed or "
                    "edited)"
                )
            expected = number + 1
            previous = checksum if isinstance(checksum, bytes) else b""
            if damaged:
                continue
            if op is not None:
                logged.add((op, row))
            memory = self._db.execute(
                "SELECT typeof(id), CAST(id AS BLOB), checksum, retired_op "
                "FROM memories WHERE row=?",
                (row,),
            ).fetchone()
            if memory is None:
                problems.append(f"{where}: the memory row {row} it emptied is missing")
                continue
            id_type, raw_id, stored, retired = memory
            if stored != tombstone or retired is None:
                mid: Any = (
                    int(raw_id)
                    if id_type == "integer"
                    else bytes(raw_id).decode("utf-8", "replace")
                )
                # Records an upgrade made for older forgets name no operation.
                by = "before the delete log" if op is None else f"operation {op}"
                problems.append(
                    f"{self.path}: memory row {row} (id {mid!r}) was deleted "
                    f"({by}, delete log record {number}) but no longer holds "
                    "what the delete left: a deleted row was put back"
                )
        scrubbed = set()
        for seq, payload in self.retire_payloads():
            for row in payload.get("scrubbed", []):
                if isinstance(row, int):
                    scrubbed.add((seq, row))
        for seq, row in sorted(scrubbed - logged):
            problems.append(
                f"{self.path}: operation {seq} deleted memory row {row}, but the "
                "delete log holds no record of it (a record was removed)"
            )
        for op, row in sorted(logged - scrubbed):
            problems.append(
                f"{self.path}: the delete log says operation {op} emptied memory "
                f"row {row}, but that operation emptied no such row"
            )
        return problems


__all__ = ["DELETION_COLUMNS", "DeleteLog"]
