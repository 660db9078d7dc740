"""Which training groups the model still ranks worst: the material of the
passes after the first when training focuses on hard questions.

A group's hardness is the listwise loss of its positive among *all* its hard
negatives (the pool's most similar non-evidence), measured in one inference
pass with the model as it stands. The losses seen during the first pass
cannot serve: each was taken at a different point of training, and every group
met during warm-up looks hard.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from .listwise_groups import TrainingGroup

PairLogits = Callable[[list[tuple[str, str]]], np.ndarray]
"""``(query, memory)`` pairs -> the model's logits, without gradient."""


def group_losses(
    logits: np.ndarray, sizes: Sequence[int], offsets: np.ndarray | None = None
) -> np.ndarray:
    """``float64[len(sizes)]``: ``-log softmax(logits + offsets)[first]`` of each
    group (``sizes`` consecutive entries, its positive first); 0 for a group
    with nothing to rank against."""
    ranked = np.asarray(logits, np.float64)
    if offsets is not None:
        ranked = ranked + np.asarray(offsets, np.float64)
    out = np.zeros(len(sizes))
    start = 0
    for index, size in enumerate(sizes):
        part = ranked[start : start + size]
        peak = part.max()
        out[index] = peak + math.log(np.exp(part - peak).sum()) - part[0]
        start += size
    return out


def hardest_groups(
    logits_of: PairLogits,
    groups: Sequence[TrainingGroup],
    share: float,
    residual_weight: float = 0.0,
) -> np.ndarray:
    """Indices (ascending) of the ``ceil(share * len(groups))`` groups whose
    positive ``logits_of`` ranks worst among the group's hard negatives, ties
    to the earlier group. With ``residual_weight`` the loss is the one
    training minimises (``logit + w * cosine``).

    Raises:
      ValueError: ``share`` not in (0, 1].
    """
    if not (math.isfinite(share) and 0 < share <= 1):
        raise ValueError(f"share must be in (0, 1], got {share!r}")
    sizes = [1 + len(group.hard_negatives) for group in groups]
    pairs = [
        (group.query, memory)
        for group, size in zip(groups, sizes, strict=True)
        for memory in group.memories[:size]
    ]
    offsets = None
    if residual_weight:
        offsets = residual_weight * np.array(
            [
                cosine
                for group, size in zip(groups, sizes, strict=True)
                for cosine in group.similarities[:size]
            ]
        )
    losses = group_losses(logits_of(pairs), sizes, offsets)
    kept = math.ceil(share * len(groups))
    # A stable sort of -loss keeps the earlier group first among equals.
    return np.sort(np.argsort(-losses, kind="stable")[:kept])


__all__ = ["PairLogits", "group_losses", "hardest_groups"]
