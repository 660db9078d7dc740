"""Per-row checksums of the retriever's journal.

Every row of ``meta``, ``memories``, ``ops`` and ``scores`` carries a
``checksum``: a 4-byte BLAKE2b digest of each of its checksummed fields, so a
damaged row is named with the field that no longer matches. Text columns are
read as raw bytes (:func:`raw_column`), so invalid UTF-8 is a finding too,
never a decoding error inside SQLite's driver.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from typing import Any


class CorruptFolderError(ValueError):
    """A retriever folder fails its consistency check (the message names the
    file and what is wrong)."""


# The checksummed fields of each table, in checksum order (``retired_op`` and
# ``created_at`` are left out: see the module docstring).
CHECKED_FIELDS = {
    "meta": ("key", "value"),
    "memories": ("row", "id", "text", "metadata", "embedding", "origin", "op"),
    "ops": ("seq", "kind", "payload", "data"),
    "scores": ("scorer", "query_hash", "memory_hash", "value", "query_index"),
}
DIGEST_BYTES = 4


def _canonical(value: Any) -> bytes:
    """Type-tagged bytes of a field (text is checksummed as its UTF-8 bytes)."""
    if value is None:
        return b"n"
    if isinstance(value, bool | int):
        return b"i" + str(int(value)).encode()
    if isinstance(value, float):
        return b"f" + struct.pack("<d", value)
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogatepass")
    return b"s" + bytes(value)


def row_checksum(*fields: Any) -> bytes:
    """One 4-byte BLAKE2b digest per field, concatenated."""
    return b"".join(
        hashlib.blake2b(_canonical(field), digest_size=DIGEST_BYTES).digest()
        for field in fields
    )


def damaged_fields(table: str, fields: Sequence[Any], checksum: Any) -> list[str]:
    """The names of the fields of a ``table`` row that do not match its
    checksum (every field when the checksum itself is missing or damaged)."""
    names = CHECKED_FIELDS[table]
    if not isinstance(checksum, bytes) or len(checksum) != DIGEST_BYTES * len(names):
        return ["checksum"]
    expected = row_checksum(*fields)
    return [
        name
        for number, name in enumerate(names)
        if expected[DIGEST_BYTES * number : DIGEST_BYTES * (number + 1)]
        != checksum[DIGEST_BYTES * number : DIGEST_BYTES * (number + 1)]
    ]


def decoded_text(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorruptFolderError(f"{where} is not valid UTF-8 ({error})") from None


TEXT_COLUMNS = {
    "meta": ("key", "value"),
    "memories": ("text", "metadata"),
    "ops": ("kind", "payload"),
}


def raw_column(table: str, column: str) -> str:
    """A column read as stored bytes (text as raw bytes, so invalid UTF-8 is
    checked, not a decoding error inside SQLite's driver)."""
    if column in TEXT_COLUMNS.get(table, ()):
        return f"CAST({column} AS BLOB)"
    return column


__all__ = [
    "CHECKED_FIELDS",
    "CorruptFolderError",
    "damaged_fields",
    "decoded_text",
    "raw_column",
    "row_checksum",
]
