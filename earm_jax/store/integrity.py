"""Per-row digests of the retriever's journal.

Every row of ``meta``, ``memories``, ``ops``, ``scores`` and ``deletions``
carries a ``checksum``: one 8-byte digest per checksummed field, so a damaged
row is named with the field that no longer matches. A field's digest covers
the table, the field's name, the row's place (its primary key: a setting's
``key``, a memory's ``row``, an operation's ``seq``, a score's scorer and text
hashes, a delete-log record's ``number``) and the value, each part
length-prefixed (so ``("ab", "c")`` and ``("a", "bc")`` differ): a value
moved to another row or field together with its digest no longer matches.

Unkeyed folders digest with BLAKE2b. That catches damage and rows moved or
put back by hand, not someone who recomputes the digests on purpose: anyone
can. A keyed folder digests with HMAC-SHA256 under a key kept outside it
(:mod:`earm_jax.store.folder_key`): forging a digest needs the key.

Text columns are read as raw bytes (:func:`raw_column`), so invalid UTF-8 is
a finding too, never a decoding error inside SQLite's driver.
"""

from __future__ import annotations

import hashlib
import hmac
import struct
from collections.abc import Sequence
from typing import Any


class CorruptFolderError(ValueError):
    """A retriever folder fails its consistency check (the message names the
    file and what is wrong)."""


# The checksummed fields of each table, in checksum order (``retired_op``, set
# by a later delete or edit, is checked against the retire operations
# instead; a score's ``created_at`` is read by nothing).
CHECKED_FIELDS = {
    "meta": ("key", "value"),
    "memories": ("row", "id", "text", "metadata", "embedding", "origin", "op"),
    "ops": ("seq", "kind", "payload", "data"),
    "scores": ("scorer", "query_hash", "memory_hash", "value", "query_index"),
    "deletions": ("number", "row", "op", "tombstone", "previous"),
}
# How many of a table's leading checked fields are the row's place.
PLACE_FIELDS = {"meta": 1, "memories": 1, "ops": 1, "scores": 3, "deletions": 1}
DIGEST_BYTES = 8
KEYED_SCHEME = "hmac-sha256"
UNKEYED_SCHEME = "blake2b"
# Format 3 digested each field alone (4-byte BLAKE2b, no place, no name):
# read only to verify a folder before it is upgraded.
LEGACY_DIGEST_BYTES = 4
LEGACY_TABLES = ("meta", "memories", "ops", "scores")


def _canonical(value: Any) -> bytes:
    """Type-tagged bytes of a field (text is digested as its UTF-8 bytes)."""
    if value is None:
        return b"n"
    if isinstance(value, bool | int):
        return b"i" + str(int(value)).encode()
    if isinstance(value, float):
        return b"f" + struct.pack("<d", value)
    if isinstance(value, str):
        return b"s" + value.encode("utf-8", "surrogatepass")
    return b"s" + bytes(value)


def _framed(data: bytes) -> bytes:
    return struct.pack("<Q", len(data)) + data


_DOMAIN = b"earm-retriever row digest/4"
# The fixed start of each field's message: domain, table, field name.
_PREFIX = {
    table: {
        name: _framed(_DOMAIN) + _framed(table.encode()) + _framed(name.encode())
        for name in names
    }
    for table, names in CHECKED_FIELDS.items()
}


def field_message(table: str, name: str, place: Sequence[Any], value: Any) -> bytes:
    """The unambiguous bytes a field's digest covers.

    >>> message = field_message("meta", "value", ("ab",), "c")
    >>> message != field_message("meta", "value", ("a",), "bc")
    True
    >>> message != field_message("meta", "key", ("ab",), "c")
    True
    """
    framed_place = _framed(b"".join(_framed(_canonical(p)) for p in place))
    return _PREFIX[table][name] + framed_place + _framed(_canonical(value))


class RowDigests:
    """The digests of one folder's rows: HMAC-SHA256 under ``key``, or
    BLAKE2b when ``key`` is ``None``.

    >>> digests = RowDigests()
    >>> checksum = digests.row("meta", ("format", '"x"'))
    >>> len(checksum)
    16
    >>> digests.damaged("meta", ("format", '"y"'), checksum)
    ['value']
    >>> digests.damaged("meta", ("other", '"x"'), checksum)  # moved: both fail
    ['key', 'value']
    >>> RowDigests(b"k" * 32).row("meta", ("format", '"x"')) != checksum
    True
    """

    def __init__(self, key: bytes | None = None) -> None:
        if key is not None and len(key) < 16:
            raise ValueError(f"a folder key needs 16 bytes or more, got {len(key)}")
        self._key = key

    @property
    def keyed(self) -> bool:
        return self._key is not None

    def record(self) -> dict[str, Any]:
        """What the folder's ``meta['digests']`` holds: the scheme, and a
        fingerprint of the key (which tells a wrong key from damage, and
        says nothing of the key)."""
        if self._key is None:
            return {"scheme": UNKEYED_SCHEME}
        return {"scheme": KEYED_SCHEME, "key": self.fingerprint()}

    def fingerprint(self) -> str | None:
        if self._key is None:
            return None
        return hmac.digest(self._key, b"earm-retriever key fingerprint", "sha256")[
            :8
        ].hex()

    def _digest(self, message: bytes) -> bytes:
        if self._key is None:
            return hashlib.blake2b(message, digest_size=DIGEST_BYTES).digest()
        return hmac.digest(self._key, message, "sha256")[:DIGEST_BYTES]

    def row(self, table: str, fields: Sequence[Any]) -> bytes:
        """The checksum of a ``table`` row: one digest per field, in
        :data:`CHECKED_FIELDS` order, each bound to the row's place."""
        names = CHECKED_FIELDS[table]
        if len(fields) != len(names):
            raise ValueError(
                f"{table} rows have {len(names)} fields, got {len(fields)}"
            )
        prefixes = _PREFIX[table]
        place = _framed(
            b"".join(_framed(_canonical(p)) for p in fields[: PLACE_FIELDS[table]])
        )
        return b"".join(
            self._digest(prefixes[name] + place + _framed(_canonical(value)))
            for name, value in zip(names, fields, strict=True)
        )

    def damaged(self, table: str, fields: Sequence[Any], checksum: Any) -> list[str]:
        """The names of the fields of a ``table`` row that do not match its
        checksum (``["checksum"]`` when the checksum itself is missing or of
        the wrong length)."""
        return _mismatches(
            CHECKED_FIELDS[table], self.row(table, fields), checksum, DIGEST_BYTES
        )


def _mismatches(
    names: Sequence[str], expected: bytes, checksum: Any, width: int
) -> list[str]:
    if not isinstance(checksum, bytes) or len(checksum) != width * len(names):
        return ["checksum"]
    return [
        name
        for number, name in enumerate(names)
        if expected[width * number : width * (number + 1)]
        != checksum[width * number : width * (number + 1)]
    ]


def legacy_damaged_fields(
    table: str, fields: Sequence[Any], checksum: Any
) -> list[str]:
    """:meth:`RowDigests.damaged` as format 3 digested rows (each field
    alone), for verifying a folder before it is upgraded."""
    expected = b"".join(
        hashlib.blake2b(_canonical(field), digest_size=LEGACY_DIGEST_BYTES).digest()
        for field in fields
    )
    return _mismatches(CHECKED_FIELDS[table], expected, checksum, LEGACY_DIGEST_BYTES)


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
    checked, not a decoding error inside SQLite's driver; a memory's id as an
    integer or as the bytes of its text)."""
    if column in TEXT_COLUMNS.get(table, ()):
        return f"CAST({column} AS BLOB)"
    if (table, column) == ("memories", "id"):
        return "CASE typeof(id) WHEN 'text' THEN CAST(id AS BLOB) ELSE id END"
    return column


__all__ = [
    "CHECKED_FIELDS",
    "DIGEST_BYTES",
    "CorruptFolderError",
    "RowDigests",
    "decoded_text",
    "field_message",
    "legacy_damaged_fields",
    "raw_column",
]
