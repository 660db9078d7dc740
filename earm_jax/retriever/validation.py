"""Checks of the caller's input: each raises naming the field, before anything
is stored."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from earm_jax.retriever.config import MemoryId, is_int


def check_id(value: Any, where: str) -> MemoryId:
    if isinstance(value, bool) or not isinstance(value, int | str | np.integer):
        raise ValueError(f"{where} must be an int or a str, got {value!r}")
    if isinstance(value, str) and not value:
        raise ValueError(f"{where} must not be an empty string")
    return int(value) if isinstance(value, int | np.integer) else value


def check_text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
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


def metadata_json(value: Any, where: str) -> str:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a dict, got {type(value).__name__}")
    try:
        text = json.dumps(dict(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where} must be JSON-serialisable: {error}") from None
    return text
