"""The optional key of a retriever folder: 32 random bytes in a file of its
own, kept outside the folder.

A keyed folder's row digests are HMAC-SHA256 under this key
(:mod:`earm_jax.store.integrity`), so whoever can rewrite the folder but not
read the key cannot forge a row that passes. The key file is refused inside
the folder (a copy or a backup of the folder must not carry its key), and
when anyone but its owner may read or write it (it is created ``0600``).
Lose it and the folder cannot be opened: keep a copy where the folder's
backups are not.

Layout: one line of 64 hex digits.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from earm_jax.store.journal_format import FILE_MODE, disk_full, is_disk_full

KEY_BYTES = 32


class FolderKeyError(ValueError):
    """A folder's key is missing, wrong, unreadable or kept where it must not
    be (the message names the file and what to pass)."""


def _checked_place(path: Path, folder: Path) -> None:
    resolved = path.resolve()
    if resolved == folder.resolve() or folder.resolve() in resolved.parents:
        raise FolderKeyError(
            f"key file {path} is inside the folder {folder}: keep it outside (a "
            "copy of the folder must not carry the key that guards it)"
        )


def create_key_file(
    path: str | os.PathLike[str], folder: str | os.PathLike[str]
) -> bytes:
    """Writes a new random key to ``path`` (mode ``0600``, never over an
    existing file) and returns it."""
    path, folder = Path(path), Path(folder)
    _checked_place(path, folder)
    key = secrets.token_bytes(KEY_BYTES)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        raise
    except OSError as error:
        if is_disk_full(error):
            raise disk_full(path.parent, error, "no key file was written") from error
        raise FolderKeyError(f"cannot create key file {path} ({error})") from error
    try:
        os.fchmod(fd, FILE_MODE)  # exactly 0600, whatever the umask
        os.write(fd, (key.hex() + "\n").encode())
        os.fsync(fd)
    except OSError as error:
        os.close(fd)
        path.unlink(missing_ok=True)
        raise disk_full(path.parent, error, "no key file was written") from error
    os.close(fd)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the key must outlive a power cut with the folder
    finally:
        os.close(directory)
    return key


def read_key_file(
    path: str | os.PathLike[str], folder: str | os.PathLike[str]
) -> bytes:
    """The key in ``path``.

    Raises:
      FolderKeyError: the file is missing, inside ``folder``, open to others,
        or not a key file.
    """
    path, folder = Path(path), Path(folder)
    _checked_place(path, folder)
    try:
        mode = path.stat().st_mode
        text = path.read_bytes()
    except FileNotFoundError:
        raise FolderKeyError(
            f"key file {path} does not exist ({folder} was created with a key: "
            "restore the key file it was created with)"
        ) from None
    except OSError as error:
        raise FolderKeyError(f"cannot read key file {path} ({error})") from error
    if mode & 0o077:
        raise FolderKeyError(
            f"key file {path} can be read or written by others (mode "
            f"{mode & 0o777:04o}): chmod 600 {path}"
        )
    try:
        key = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        key = b""
    if len(key) != KEY_BYTES:
        raise FolderKeyError(
            f"{path} is not a key file (one line of {2 * KEY_BYTES} hex digits)"
        )
    return key


def open_key(
    path: str | os.PathLike[str], folder: str | os.PathLike[str], create: bool
) -> bytes:
    """The key in ``path``; with ``create``, a missing file is created."""
    if create and not Path(path).exists():
        try:
            return create_key_file(path, folder)
        except FileExistsError:
            pass  # created meanwhile by another opener: read it
    return read_key_file(path, folder)


__all__ = [
    "KEY_BYTES",
    "FolderKeyError",
    "create_key_file",
    "open_key",
    "read_key_file",
]
