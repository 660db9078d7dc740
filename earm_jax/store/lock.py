"""A single-writer lock on a folder that removing a file cannot bypass.

Three layers, each closing a gap the one before leaves open:

* an advisory ``flock`` on ``<folder>/lock``, which holds the owner's process id
  and host (what :class:`FolderLockedError` reports). The kernel drops it when
  the process dies (also on ``kill -9``), so a stale file never blocks a
  restart;
* a second ``flock`` on the files the store cannot run without (the journal):
  deleting ``lock`` lets a second process lock a *new* ``lock`` file, but the
  journal it must open is still locked by the first, so it is refused all the
  same. (``flock`` and SQLite's own ``fcntl`` byte-range locks are independent
  on Linux; the lock is taken before SQLite opens the file and dropped after
  SQLite closes it, and no second descriptor of a locked journal is ever opened
  and closed in the holding process, which would drop SQLite's locks);
* a table of the folders this process holds: a second opener in the same
  process (another thread, another ``TenantRetrievers`` entry) is refused
  before it opens any descriptor.

:meth:`FolderLock.verify`, called inside every write transaction, checks that
the guarded files this process locked are still the folder's (same device and
inode): if one was removed or replaced, the write is refused instead of going
to a file nobody will read again. (Removing only ``lock`` is harmless: the
guarded files stay locked, so no second writer gets in.)
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
import time
from collections.abc import Sequence
from pathlib import Path

from earm_jax.store.journal_format import FILE_MODE, disk_full

LOCK_NAME = "lock"

# Folders (resolved paths) held by this process, so a second opener in the
# same process is refused without touching the locked files.
_HELD: dict[str, dict] = {}
_HELD_LOCK = threading.Lock()


class FolderLockedError(RuntimeError):
    """The folder is locked: another retriever (process ``pid``) is using it."""

    def __init__(self, folder: Path, holder: dict, detail: str = "") -> None:
        self.folder = folder
        self.holder = holder
        pid = holder.get("pid", "unknown")
        host = holder.get("host", "?")
        super().__init__(
            f"{folder} is locked: in use by process {pid} on {host} "
            f"(since {holder.get('since', '?')}){detail}. One writer per folder: "
            "share that process's retriever, or pass lock_timeout to wait for it."
        )


class LockLostError(RuntimeError):
    """A file this process locked was removed or replaced while it held it:
    another process may be writing the folder now, so this one must stop."""


def read_holder(folder: str | os.PathLike[str]) -> dict:
    """What the lock file says about its holder (``{}`` if unreadable)."""
    try:
        return json.loads((Path(folder) / LOCK_NAME).read_text() or "{}")
    except (OSError, ValueError):
        return {}


def _flock_holders(path: Path) -> list[int]:
    """Pids holding a ``flock`` on ``path`` (from ``/proc/locks``; ``[]``
    where that is unavailable)."""
    try:
        status = os.stat(path)
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    wanted = f"{os.major(status.st_dev):02x}:{os.minor(status.st_dev):02x}:"
    wanted += str(status.st_ino)
    pids = []
    for line in lines:
        fields = line.split()
        if "FLOCK" in fields and len(fields) >= 6 and fields[5] == wanted:
            pids.append(int(fields[4]))
    return pids


def _identity(fd: int) -> tuple[int, int]:
    status = os.fstat(fd)
    return status.st_dev, status.st_ino


class FolderLock:
    """Holds ``flock(LOCK_EX)`` on ``<folder>/lock`` and on ``guarded`` files
    until :meth:`release`.

    Args:
      folder: the folder to lock (must exist).
      timeout: ``0`` fails at once when held; ``> 0`` waits that many seconds;
        ``None`` waits forever.
      guarded: names of files in ``folder`` the store needs (created empty if
        missing) that are locked too, so removing ``lock`` does not let a
        second writer in.
    Raises:
      FolderLockedError: held by another owner (after ``timeout``).
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        timeout: float | None = 0.0,
        guarded: Sequence[str] = (),
    ) -> None:
        if timeout is not None and (
            not isinstance(timeout, int | float) or timeout < 0
        ):
            raise ValueError(f"lock timeout must be None or >= 0, got {timeout!r}")
        self.folder = Path(folder)
        self._key = str(self.folder.resolve())
        self._fds: dict[str, int] = {}
        self._identities: dict[str, tuple[int, int]] = {}
        deadline = None if timeout is None else time.monotonic() + timeout
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        while True:
            with _HELD_LOCK:
                holder = _HELD.get(self._key)
                if holder is None:
                    try:
                        self._lock_files((LOCK_NAME, *guarded))
                    except BlockingIOError as error:
                        holder, detail = error.args[0], error.args[1]
                    else:
                        _HELD[self._key] = record
                        break
                else:
                    detail = ""
            if deadline is not None and time.monotonic() >= deadline:
                raise FolderLockedError(self.folder, holder, detail)
            time.sleep(0.05)
        fd = self._fds[LOCK_NAME]
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, json.dumps(record).encode(), 0)
        except BaseException as error:
            # A failed open must not leave the folder locked against this
            # very process: give back every lock and handle taken above.
            self.release()
            raise _disk_full(self.folder, error) from error

    def _lock_files(self, names: Sequence[str]) -> None:
        """Locks every file of ``names`` or none (raises ``BlockingIOError``
        with the holder and a detail)."""
        for name in names:
            path = self.folder / name
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, FILE_MODE)
            except OSError as error:
                self._unlock_all()
                raise _disk_full(self.folder, error) from error
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                self._unlock_all()
                holder = read_holder(self.folder)
                detail = ""
                if name != LOCK_NAME:
                    pids = _flock_holders(path)
                    holder = {"pid": pids[0]} if pids else {}
                    detail = f"; its {name} is locked although {LOCK_NAME} was not"
                raise BlockingIOError(holder, detail) from None
            self._fds[name] = fd
            # The lock file itself may be removed harmlessly while the guarded
            # files stay locked; where nothing is guarded, it is what to watch.
            if name != LOCK_NAME or len(names) == 1:
                self._identities[name] = _identity(fd)

    def _unlock_all(self) -> None:
        for fd in self._fds.values():
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
        self._fds.clear()
        self._identities.clear()

    @property
    def held(self) -> bool:
        return bool(self._fds)

    def verify(self) -> None:
        """Raises :class:`LockLostError` unless every guarded file (or the lock
        file, when nothing is guarded) is still the folder's: not removed, not
        replaced by another file."""
        if not self._fds:
            raise LockLostError(f"{self.folder}: this retriever's lock was released")
        for name, identity in self._identities.items():
            try:
                status = os.stat(self.folder / name)
                current = (status.st_dev, status.st_ino)
            except FileNotFoundError:
                current = None
            if current != identity:
                what = "removed" if current is None else "replaced"
                raise LockLostError(
                    f"{self.folder / name} was {what} while this process held the "
                    "folder, so another process may be writing it now: this call "
                    "stored nothing; close this retriever and reopen the folder"
                )

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        if not self._fds:
            return
        lock_fd = self._fds.get(LOCK_NAME)
        try:
            if lock_fd is not None and self._still_ours(LOCK_NAME):
                os.ftruncate(lock_fd, 0)
        finally:
            self._unlock_all()
            with _HELD_LOCK:
                _HELD.pop(self._key, None)

    def _still_ours(self, name: str) -> bool:
        try:
            status = os.stat(self.folder / name)
        except FileNotFoundError:
            return False
        return (status.st_dev, status.st_ino) == _identity(self._fds[name])


def _disk_full(folder: Path, error: BaseException) -> BaseException:
    """``error`` as a :class:`~earm_jax.store.journal_format.DiskFullError`
    naming the folder and its free
    bytes when it is one (ENOSPC, EDQUOT); otherwise ``error`` itself."""
    return disk_full(
        folder,
        error,
        "while taking the folder's lock; nothing was opened and the folder is "
        "not locked",
    )


__all__ = [
    "LOCK_NAME",
    "FolderLock",
    "FolderLockedError",
    "LockLostError",
    "read_holder",
]
