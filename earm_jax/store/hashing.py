"""The content key of a text, shared by every on-disk cache (scores, embeddings)."""

from __future__ import annotations

import hashlib


def text_sha256(text: str) -> str:
    """Hex SHA-256 of a text's UTF-8 bytes.

    >>> text_sha256("abc")[:16]
    'ba7816bf8f01cfea'
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


__all__ = ["text_sha256"]
