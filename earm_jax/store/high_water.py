"""The journal's high-water mark: the sequence number of the last operation it
committed, kept in a small file beside it, so a journal that lost committed
operations is refused at open instead of opening silently older.

Why a file of its own. SQLite in WAL mode commits into ``journal.sqlite-wal``
and copies pages into ``journal.sqlite`` only at checkpoints. Removing the
``-wal`` file after a crash (or emptying it, or cutting it short, or putting
back an older copy of the main file) leaves a journal that is consistent but
older: every check inside the journal passes. Only a record kept outside it
can tell that operations are missing.

Why it is cheap. The mark is advanced after each commit that appended an
operation, by one ``pwrite`` of 24 bytes at offset 0 of an open file, without
``fsync``: a process crash (``kill -9``) cannot lose a write that reached the
kernel, so after a crash the mark holds the last committed operation (except
one killed in the instant between its commit and the mark's write). The file
is fsynced when it is created, at each snapshot and at close, so after a power
cut it is at least as recent as the last of those. Since it is written only
after SQLite's commit returned, it is never ahead of what SQLite made durable
(with ``synchronous=FULL``; with ``NORMAL`` a power cut may lose acknowledged
commits, and then the mark is ahead and the folder is refused, which is what
happened: acknowledged operations are gone).

Layout: 8 bytes of magic, the sequence number as a little-endian ``uint64``,
an 8-byte BLAKE2b digest of those 16 bytes (a damaged mark is named, never
read as a smaller number).
"""

from __future__ import annotations

import hashlib
import os
import struct
import threading
from pathlib import Path

from earm_jax.store.integrity import CorruptFolderError
from earm_jax.store.journal_format import FILE_MODE, disk_full

HIGH_WATER_NAME = "high_water"
_MAGIC = b"EARMHW01"
_SIZE = 24


def _encode(seq: int) -> bytes:
    body = _MAGIC + struct.pack("<Q", seq)
    return body + hashlib.blake2b(body, digest_size=8).digest()


def _decode(data: bytes, path: Path) -> int:
    body, digest = data[:16], data[16:]
    if (
        len(data) != _SIZE
        or body[:8] != _MAGIC
        or hashlib.blake2b(body, digest_size=8).digest() != digest
    ):
        raise CorruptFolderError(
            f"{path}: the journal's high-water mark is damaged ({len(data)} "
            f"bytes that are not a mark); remove {path.name} to open the journal "
            "as it is (the next write records a new mark)"
        )
    return struct.unpack("<Q", body[8:16])[0]


class HighWater:
    """The high-water mark of the journal in ``folder``.

    Args:
      folder: the retriever's folder.
    """

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.path = Path(folder) / HIGH_WATER_NAME
        self._fd: int | None = None
        self._seq = -1
        # Commits of several threads may advance the mark; it only moves up.
        self._lock = threading.Lock()

    def read(self) -> int | None:
        """The recorded sequence number, or ``None`` when there is no mark
        (a new folder, one made before the mark existed, or one whose mark
        was removed).

        Raises:
          CorruptFolderError: the file is not a mark.
        """
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        # Empty: created, and the process stopped before the first write.
        return None if not data else _decode(data, self.path)

    def advance(self, seq: int) -> None:
        """Records ``seq`` (committed already) unless the mark is at it or past."""
        with self._lock:
            if seq <= self._seq:
                return
            try:
                if self._fd is None:
                    self._open()
                    if seq <= self._seq:
                        return
                os.pwrite(self._fd, _encode(seq), 0)
            except OSError as error:
                raise disk_full(
                    self.path.parent,
                    error,
                    f"{self.path.name} was not advanced (the journal's commits "
                    "are stored)",
                ) from error
            self._seq = seq

    def _open(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        try:
            if os.fstat(fd).st_size == 0:
                # The file itself must survive a power cut: it is what says a
                # mark exists. Its later updates need not (module docstring).
                os.pwrite(fd, _encode(0), 0)
                os.fsync(fd)
                directory = os.open(self.path.parent, os.O_RDONLY)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
                seq = 0
            else:
                seq = _decode(os.pread(fd, _SIZE + 1, 0), self.path)
        except BaseException:
            # A mark left empty reads as no mark; the handle must not leak.
            os.close(fd)
            raise
        self._fd, self._seq = fd, seq

    def sync(self) -> None:
        """Makes the mark survive a power cut (called at snapshots and close)."""
        with self._lock:
            if self._fd is not None:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                try:
                    os.fsync(self._fd)
                finally:
                    os.close(self._fd)
                    self._fd = None


def behind_mark(journal: Path, last_seq: int, mark: int) -> str:
    """Why a journal whose last operation is ``last_seq`` is refused when its
    mark records ``mark`` (the message names both files and the way out)."""
    high_water = journal.with_name(HIGH_WATER_NAME)
    return (
        f"{journal}: holds operations up to {last_seq}, but {high_water} "
        f"records that operations up to {mark} were committed: "
        f"{mark - last_seq} committed operation(s) are missing (its -wal file "
        "was removed, emptied or cut short after a crash, or the journal was "
        "replaced by an older copy). Put the journal's -wal file back (refusing "
        "changed nothing), or restore the folder from a backup; to open the "
        f"journal as it is on purpose, remove {high_water.name}"
    )


__all__ = ["HIGH_WATER_NAME", "HighWater", "behind_mark"]
