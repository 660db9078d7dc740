"""The journal's on-disk format: its file names, version and SQLite schema, the
marker that tells a lost journal from a new folder, and its transactions."""

from __future__ import annotations

import errno
import json
import os
import shutil
import sqlite3
from collections.abc import Callable
from pathlib import Path

JOURNAL_NAME = "journal.sqlite"
# Written once the journal holds its settings: a folder with this file and an
# empty or missing journal lost its journal, and is refused rather than
# opened as a new, empty retriever.
MARKER_NAME = "retriever.json"
FORMAT = "earm-retriever/4"
# Folders of these formats are upgraded on open: format 2 had no checksums
# (its rows are trusted as they are), format 3 digested each field alone
# (its rows are verified first); both get place-bound digests and a delete
# log.
MIGRATED_FORMATS = ("earm-retriever/2", "earm-retriever/3")

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (
  key TEXT PRIMARY KEY, value TEXT NOT NULL, checksum BLOB
);
CREATE TABLE IF NOT EXISTS memories (
  row INTEGER PRIMARY KEY,
  id NOT NULL,
  text TEXT NOT NULL,
  metadata TEXT NOT NULL,
  embedding BLOB NOT NULL,
  origin INTEGER NOT NULL,
  op INTEGER NOT NULL,
  retired_op INTEGER,
  checksum BLOB
);
CREATE UNIQUE INDEX IF NOT EXISTS live_ids ON memories(id) WHERE retired_op IS NULL;
CREATE INDEX IF NOT EXISTS memory_ids ON memories(id);
CREATE TABLE IF NOT EXISTS ops (
  seq INTEGER PRIMARY KEY,
  kind TEXT NOT NULL,
  payload TEXT NOT NULL,
  data BLOB,
  checksum BLOB
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
  checksum BLOB,
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
CREATE TABLE IF NOT EXISTS deletions (
  number INTEGER PRIMARY KEY,
  row INTEGER NOT NULL,
  op INTEGER,
  tombstone BLOB NOT NULL,
  previous BLOB NOT NULL,
  checksum BLOB
);
"""


class DiskFullError(OSError):
    """A write found the disk (or the journal's size limit) full: that call
    stored nothing and changed nothing; every call acknowledged before it is
    stored."""


# An open folder's files are its owner's alone: memories are private data.
FOLDER_MODE = 0o700
FILE_MODE = 0o600


def free_bytes(folder: str | os.PathLike[str]) -> str:
    """``"<n> bytes free"`` on ``folder``'s file system (or that it is unknown)."""
    try:
        return f"{shutil.disk_usage(folder).free:,} bytes free"
    except OSError:
        return "free space unknown"


# SQLite reports some writes that found the disk full as an I/O error rather
# than SQLITE_FULL: creating or growing the WAL's shared-memory index (the
# ``-shm`` file) writes each new page to allocate it, and a failure there is
# SQLITE_IOERR_SHMSIZE ("disk I/O error") whatever the system said. Such an
# error means a full disk when the folder's file system has less than this
# free (or no free inodes); with more, it is a real I/O fault and stays one.
LOW_SPACE_BYTES = 1 << 20


def out_of_space(folder: str | os.PathLike[str]) -> bool:
    """Whether ``folder``'s file system has less than :data:`LOW_SPACE_BYTES`
    free, or no free inodes (``False`` when that cannot be told)."""
    try:
        status = os.statvfs(folder)
    except OSError:
        return False
    if status.f_bavail * status.f_frsize < LOW_SPACE_BYTES:
        return True
    # A file system without an inode count reports zero of them.
    return status.f_files > 0 and status.f_favail == 0


def _is_io_error(error: sqlite3.Error) -> bool:
    code = getattr(error, "sqlite_errorcode", None)
    if code is None:
        return "disk i/o error" in str(error).lower()
    return code & 0xFF == sqlite3.SQLITE_IOERR


def is_disk_full(
    error: BaseException, folder: str | os.PathLike[str] | None = None
) -> bool:
    """Whether ``error`` says the disk (or a quota, or SQLite's size limit) is
    full. Given the ``folder`` written to, a SQLite I/O error counts too when
    its file system is out of space (see :data:`LOW_SPACE_BYTES`)."""
    if isinstance(error, OSError):
        return error.errno in (errno.ENOSPC, errno.EDQUOT)
    if isinstance(error, sqlite3.Error):
        code = getattr(error, "sqlite_errorcode", None)
        if code == sqlite3.SQLITE_FULL or "full" in str(error).lower():
            return True
        return folder is not None and _is_io_error(error) and out_of_space(folder)
    return False


def disk_full(
    folder: str | os.PathLike[str], error: BaseException, consequence: str
) -> BaseException:
    """``error`` as a :class:`DiskFullError` naming ``folder``, its free bytes
    and ``consequence`` (what the failed call left) when it says the disk is
    full (:func:`is_disk_full` of ``folder``); otherwise ``error`` itself."""
    if not is_disk_full(error, folder):
        return error
    number = error.errno if isinstance(error, OSError) else errno.ENOSPC
    return DiskFullError(
        number,
        f"{folder}: the disk is full ({free_bytes(folder)}): {consequence}. "
        "Free some space and retry.",
    )


def lost_journal(folder: str | os.PathLike[str]) -> str | None:
    """Why ``folder`` cannot be opened as a retriever although it held one
    (its marker is there, its journal missing or empty), or ``None``."""
    folder = Path(folder)
    if not (folder / MARKER_NAME).exists():
        return None
    path = folder / JOURNAL_NAME
    if not path.exists():
        state = "is missing"
    elif path.stat().st_size == 0:
        state = "is empty"
    else:
        return None
    return (
        f"{path} {state}, but {folder} held a retriever ({MARKER_NAME} is "
        f"there): refusing to start an empty one over it; restore {JOURNAL_NAME} "
        "(and its -wal file, if any) from a backup"
    )


def write_marker(folder: str | os.PathLike[str]) -> None:
    """Marks ``folder`` as holding a retriever (see :data:`MARKER_NAME`)."""
    path = Path(folder) / MARKER_NAME
    if path.exists():
        return
    temporary = path.with_name(MARKER_NAME + ".tmp")
    data = json.dumps({"format": FORMAT, "journal": JOURNAL_NAME}).encode()
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except OSError as error:
        temporary.unlink(missing_ok=True)
        raise disk_full(
            path.parent, error, f"{MARKER_NAME} was not written; retry the open"
        ) from error


class Transaction:
    """``with transaction as db:`` one atomic, durable write: ``BEGIN IMMEDIATE``,
    the guard, then ``COMMIT`` and ``committed()`` (or ``ROLLBACK`` and the
    error; a full disk raises :class:`DiskFullError`)."""

    def __init__(
        self,
        db: sqlite3.Connection,
        guard: Callable[[], None] | None = None,
        path: Path | None = None,
        committed: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.guard = guard
        self.path = path
        self.committed = committed

    def __enter__(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        if self.guard is not None:
            try:
                self.guard()
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return self.db

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            try:
                self.db.execute("COMMIT")
            except sqlite3.Error as error:
                value = error
            else:
                if self.committed is not None:
                    self.committed()
                return
        if self.db.in_transaction:
            self.db.execute("ROLLBACK")
        folder = self.path.parent if self.path is not None else Path(".")
        if isinstance(value, sqlite3.Error) and is_disk_full(value, folder):
            raise disk_full(
                folder,
                value,
                f"{self.path} stored nothing and changed nothing in this call; "
                "every call acknowledged before it is stored",
            ) from value
        if kind is None:
            raise value


__all__ = [
    "FILE_MODE",
    "FOLDER_MODE",
    "FORMAT",
    "JOURNAL_NAME",
    "LOW_SPACE_BYTES",
    "MARKER_NAME",
    "MIGRATED_FORMATS",
    "SCHEMA",
    "DiskFullError",
    "Transaction",
    "disk_full",
    "free_bytes",
    "is_disk_full",
    "lost_journal",
    "out_of_space",
    "write_marker",
]
