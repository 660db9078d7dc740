"""Checks of the caller's input: each raises ``ValueError`` or ``TypeError``
naming the field, before anything is stored; and the ``where=`` filter.

Limits (what the journal and every later reader can hold):

* ids: an ``int`` in the signed 64-bit range (SQLite's integers), or a
  non-empty ``str``;
* texts, ids and metadata strings: valid Unicode (no lone surrogates, which
  have no UTF-8 encoding);
* metadata: a JSON object with string keys, nested at most
  :data:`MAX_METADATA_DEPTH` containers deep and at most
  :data:`MAX_METADATA_BYTES` bytes as JSON.

``where=`` semantics: a memory matches when, for every key of ``where``, its
metadata has that key and the two values are equal *and of the same JSON
type*: ``True`` matches only ``true`` (never ``1``), ``1`` only an integer
``1`` (never ``1.0``), ``None`` only a stored ``null`` (never a missing key);
lists and objects compare element by element under the same rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from earm_jax.retriever.config import MemoryId, is_int

MAX_METADATA_DEPTH = 32
MAX_METADATA_BYTES = 64 * 1024
_INT64 = (-(2**63), 2**63 - 1)
_MISSING = object()


def _unicode_problem(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        return (
            f"is not valid Unicode (a lone surrogate {text[error.start]!r} at "
            f"position {error.start})"
        )
    return None


def check_id(value: Any, where: str) -> MemoryId:
    if isinstance(value, bool) or not isinstance(value, int | str | np.integer):
        raise ValueError(f"{where} must be an int or a str, got {value!r}")
    if isinstance(value, str):
        if not value:
            raise ValueError(f"{where} must not be an empty string")
        problem = _unicode_problem(value)
        if problem:
            raise ValueError(f"{where} {problem}")
        return value
    number = int(value)
    if not _INT64[0] <= number <= _INT64[1]:
        raise ValueError(
            f"{where} must fit in a signed 64-bit integer "
            f"[-2**63, 2**63 - 1], got {number}"
        )
    return number


def check_text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    problem = _unicode_problem(value)
    if problem:
        raise ValueError(f"{where} {problem}")
    return value


def check_texts(texts: Any, name: str = "texts") -> list[str]:
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise ValueError(
            f"{name} must be a list of strings, got {type(texts).__name__} "
            f"(wrap a single text in a list)"
        )
    return [check_text(t, f"{name}[{i}]") for i, t in enumerate(texts)]


def check_k(k: Any, default: int) -> int:
    if k is None:
        return default
    if not is_int(k) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    return int(k)


def _check_json_value(value: Any, where: str) -> None:
    """Walks a JSON value without recursion (so no depth overflows Python's
    stack): refuses non-string keys, strings that are not valid Unicode, and
    nesting deeper than :data:`MAX_METADATA_DEPTH`."""
    stack = [(value, where, 0)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, Mapping | list | tuple):
            if depth >= MAX_METADATA_DEPTH:
                raise ValueError(
                    f"{where} is nested deeper than {MAX_METADATA_DEPTH} levels "
                    f"(at {path})"
                )
            if isinstance(item, Mapping):
                for key, inner in item.items():
                    if not isinstance(key, str):
                        raise TypeError(
                            f"{path} has a key {key!r} of type "
                            f"{type(key).__name__}; metadata keys must be strings"
                        )
                    problem = _unicode_problem(key)
                    if problem:
                        raise ValueError(f"{path} key {key!r} {problem}")
                    stack.append((inner, f"{path}[{key!r}]", depth + 1))
            else:
                stack.extend(
                    (inner, f"{path}[{i}]", depth + 1) for i, inner in enumerate(item)
                )
        elif isinstance(item, str):
            problem = _unicode_problem(item)
            if problem:
                raise ValueError(f"{path} {problem}")
        elif item is not None and not isinstance(item, bool | int | float):
            raise TypeError(
                f"{path} must be a JSON value (str, int, float, bool, None, list "
                f"or dict), got {type(item).__name__}"
            )


def metadata_json(value: Any, where: str) -> str:
    """The canonical JSON of a memory's metadata (refused, naming the field,
    unless it is a dict within the limits of this module's docstring)."""
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a dict, got {type(value).__name__}")
    try:
        _check_json_value(value, where)
    except TypeError as error:
        raise ValueError(f"{where} must be JSON-serialisable: {error}") from None
    try:
        text = json.dumps(dict(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where} must be JSON-serialisable: {error}") from None
    if len(text) > MAX_METADATA_BYTES:
        raise ValueError(
            f"{where} is {len(text)} bytes as JSON, more than the "
            f"{MAX_METADATA_BYTES} allowed"
        )
    return text


def check_where(where: Any) -> dict[str, Any] | None:
    """The ``where=`` filter, checked (``TypeError`` naming the key)."""
    if where is None:
        return None
    if not isinstance(where, Mapping):
        raise ValueError(f"where must be a dict, got {type(where).__name__}")
    _check_json_value(where, "where")
    for key, value in where.items():
        if isinstance(value, float) and not np.isfinite(value):
            raise ValueError(f"where[{key!r}] must be finite, got {value!r}")
    return dict(where)


def same_json(stored: Any, wanted: Any) -> bool:
    """Type-strict equality of two JSON values (``True`` is not ``1``, ``1`` is
    not ``1.0``); the ``where=`` rule."""
    if type(stored) is not type(wanted):
        return False
    if isinstance(wanted, dict):
        return stored.keys() == wanted.keys() and all(
            same_json(stored[k], wanted[k]) for k in wanted
        )
    if isinstance(wanted, list):
        return len(stored) == len(wanted) and all(
            same_json(a, b) for a, b in zip(stored, wanted, strict=True)
        )
    return stored == wanted


def matches(metadata: Mapping, where: Mapping) -> bool:
    """Whether a memory's metadata passes ``where`` (every key present, every
    value equal and of the same type)."""
    return all(
        same_json(metadata.get(key, _MISSING), value) for key, value in where.items()
    )


__all__ = [
    "MAX_METADATA_BYTES",
    "MAX_METADATA_DEPTH",
    "check_id",
    "check_k",
    "check_text",
    "check_texts",
    "check_where",
    "matches",
    "metadata_json",
    "same_json",
]
