"""One query's training material for the cross-encoder and the listwise loss
that ranks its relevant memory above its negatives."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from .cross_encoder_training import TrainingSettings


@dataclasses.dataclass(frozen=True)
class TrainingGroup:
    """One query's training material: a relevant memory and its negatives.

    Attributes:
      query: the query text.
      positive: a relevant memory's text.
      hard_negatives: the most similar non-relevant candidates (most similar
        first).
      other_negatives: the rest of the pool's non-relevant candidates.
      similarities: the retriever's cosine of each memory with the query, in
        the order positive, hard negatives, other negatives (empty: not
        known; needed only to train on similarity's residual).
    """

    query: str
    positive: str
    hard_negatives: tuple[str, ...]
    other_negatives: tuple[str, ...]
    similarities: tuple[float, ...] = ()

    def __post_init__(self) -> None:
        size = 1 + len(self.hard_negatives) + len(self.other_negatives)
        if self.similarities and len(self.similarities) != size:
            raise ValueError(
                f"similarities must have one cosine per memory ({size}), got "
                f"{len(self.similarities)}"
            )

    @property
    def memories(self) -> tuple[str, ...]:
        """Every memory of the group: positive, hard, then other negatives."""
        return (self.positive, *self.hard_negatives, *self.other_negatives)


def sample_group_indices(
    group: TrainingGroup, settings: TrainingSettings, rng: np.random.Generator
) -> list[int]:
    """Indices into ``group.memories`` of one use of ``group``: the positive
    (0) first, then negatives drawn without replacement (hard ones from
    ``hard_negatives``, the rest uniformly from ``other_negatives``; whichever
    side runs short is filled from the other)."""
    wanted = settings.group_size - 1
    hard_count = min(settings.hard_negatives, len(group.hard_negatives))
    other_count = min(wanted - hard_count, len(group.other_negatives))
    hard_count = min(wanted - other_count, len(group.hard_negatives))
    hard = rng.choice(len(group.hard_negatives), hard_count, replace=False)
    other = rng.choice(len(group.other_negatives), other_count, replace=False)
    first_other = 1 + len(group.hard_negatives)
    return (
        [0] + [1 + int(i) for i in sorted(hard)] + [first_other + int(i) for i in other]
    )


def sample_group(
    group: TrainingGroup, settings: TrainingSettings, rng: np.random.Generator
) -> list[str]:
    """The memories of one use of ``group`` (:func:`sample_group_indices`)."""
    memories = group.memories
    return [memories[i] for i in sample_group_indices(group, settings, rng)]


def listwise_loss(logits: Any, sizes: Sequence[int], offsets: Any = None) -> Any:
    """Mean over groups of ``-log softmax(logits + offsets)[first]``: each group
    (``sizes`` consecutive entries, its positive first) ranks its positive
    above its negatives. ``offsets`` (e.g. ``w * cosine``) are added to the
    logits and get no gradient: the network learns what they leave."""
    import torch

    ranked = logits if offsets is None else logits + offsets
    loss = ranked.new_zeros(())
    start = 0
    for size in sizes:
        loss = loss - torch.log_softmax(ranked[start : start + size], dim=0)[0]
        start += size
    return loss / len(sizes)


__all__ = ["TrainingGroup", "listwise_loss", "sample_group", "sample_group_indices"]
