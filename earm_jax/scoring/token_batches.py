"""Batches of (query, memory) pairs sorted by their token count.

A cross-encoder pads each batch to its longest pair, so the arithmetic a pool
costs depends on which pairs share a batch. Sorting by tokens, longest first,
puts pairs of nearly the same length together. sentence-transformers sorts by
characters instead, which on LoCoMo's pools pads about four times as much
(``benchmarks/scorer_roofline.py``: +23% FLOPs over the pairs' own lengths,
against +6% sorted by tokens).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np


def encode_pairs(
    tokenizer: Any, pairs: Sequence[tuple[str, str]], max_length: int
) -> Any:
    """The pairs' token ids as the model reads them: query as text A, memory
    as text B, longest-first truncation at ``max_length``, no padding."""
    return tokenizer(
        [query for query, _ in pairs],
        [memory for _, memory in pairs],
        truncation="longest_first",
        max_length=max_length,
        padding=False,
    )


def longest_first_batches(
    lengths: Sequence[int] | np.ndarray, batch_size: int
) -> Iterator[np.ndarray]:
    """Positions of the pairs, batch by batch: sorted by ``lengths``
    (tokens), longest first, ties in their given order."""
    order = np.argsort(-np.asarray(lengths), kind="stable")
    for start in range(0, len(order), batch_size):
        yield order[start : start + batch_size]


__all__ = ["encode_pairs", "longest_first_batches"]
