"""A single-writer lock on a folder (``fcntl.flock``), naming its holder.

The lock is an advisory ``flock`` on ``<folder>/lock``, which holds the owner's
process id and host. The kernel drops it when the process dies (also on
``kill -9``), so a stale file never blocks a restart. A second opener, in this
or another process, gets :class:`FolderLockedError` naming the holder, or waits
up to ``timeout`` seconds for it to go.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

LOCK_NAME = "lock"


class FolderLockedError(RuntimeError):
    """The folder is locked: another retriever (process ``pid``) is using it."""

    def __init__(self, folder: Path, holder: dict) -> None:
        self.folder = folder
        self.holder = holder
        pid = holder.get("pid", "unknown")
        host = holder.get("host", "?")
        super().__init__(
            f"{folder} is locked: in use by process {pid} on {host} "
            f"(since {holder.get('since', '?')}). One writer per folder: share "
            "that process's retriever, or pass lock_timeout to wait for it."
        )


def read_holder(folder: str | os.PathLike[str]) -> dict:
    """What the lock file says about its holder (``{}`` if unreadable)."""
    try:
        return json.loads((Path(folder) / LOCK_NAME).read_text() or "{}")
    except (OSError, ValueError):
        return {}


class FolderLock:
    """Holds ``flock(LOCK_EX)`` on ``<folder>/lock`` until :meth:`release`.

    Args:
      folder: the folder to lock (must exist).
      timeout: ``0`` fails at once when held; ``> 0`` waits that many seconds;
        ``None`` waits forever.
    Raises:
      FolderLockedError: held by another owner (after ``timeout``).
    """

    def __init__(
        self, folder: str | os.PathLike[str], timeout: float | None = 0.0
    ) -> None:
        if timeout is not None and (
            not isinstance(timeout, int | float) or timeout < 0
        ):
            raise ValueError(f"lock timeout must be None or >= 0, got {timeout!r}")
        self.folder = Path(folder)
        path = self.folder / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if deadline is not None and time.monotonic() >= deadline:
                    holder = read_holder(self.folder)
                    os.close(fd)
                    raise FolderLockedError(self.folder, holder) from None
                time.sleep(0.05)
        self._fd: int | None = fd
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps(record).encode(), 0)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def __enter__(self) -> FolderLock:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.release()

    def release(self) -> None:
        if self._fd is not None:
            fd, self._fd = self._fd, None
            try:
                os.ftruncate(fd, 0)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


__all__ = ["LOCK_NAME", "FolderLock", "FolderLockedError", "read_holder"]
