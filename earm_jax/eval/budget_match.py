"""The budget scale that puts the anchored policies at a call cap.

``best`` is held to a hard cap (``call_budget``: a fraction of Full's calls);
the anchored policies (Top-similarity, Mixed, ...) pay the paper's stage
schedule times ``budget_scale``. Comparing them at a cap needs the scale at
which they pay the same share of Full's calls, and that share depends on the
data: an early question whose pool holds fewer usable memories than its budget
pays only what is there. So the scale is solved for on the streams themselves
(``--budget-scale auto``), exactly as the step computes a query's calls:
``min(clip(round(schedule(t) * scale), 0, N), usable_t)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

AUTO = "auto"
"""The option value that asks for the matched scale."""


@dataclasses.dataclass(frozen=True)
class MatchedScale:
    """The scale found and the share of Full's calls it pays.

    Attributes:
      scale: the budget scale.
      share: the anchored policies' calls over Full's at that scale.
      target: the cap asked for.
    """

    scale: float
    share: float
    target: float


def usable_counts(
    candidates: np.ndarray, valid: np.ndarray, insert_time: np.ndarray
) -> np.ndarray:
    """``int[T]``: per query, the valid candidates whose memory exists by then
    (the solver's ``usable_candidates``; Full pays exactly these)."""
    candidates = np.asarray(candidates)
    t = np.arange(candidates.shape[0])[:, None]
    in_range = (candidates >= 0) & (candidates < insert_time.shape[0])
    inserted = np.asarray(insert_time)[np.clip(candidates, 0, None)] <= t
    return (np.asarray(valid, bool) & in_range & inserted).sum(axis=1)


def stage_budgets(
    num_queries: int,
    pool_size: int,
    block_size: int,
    stage_ratios: Sequence[float],
) -> np.ndarray:
    """``int[T]``: the unscaled stage schedule per query index."""
    budgets = np.asarray([round(r * pool_size) for r in stage_ratios], np.int64)
    stage = np.minimum(np.arange(num_queries) // block_size, len(budgets) - 1)
    return budgets[stage]


def anchored_share(
    scale: float,
    usable: Sequence[np.ndarray],
    pool_size: int,
    block_size: int,
    stage_ratios: Sequence[float],
) -> float:
    """The anchored policies' calls over Full's at ``scale`` (float32 products
    and half-to-even rounding, as the traced schedule computes them)."""
    paid = full = 0
    for counts in usable:
        counts = np.asarray(counts, np.int64)
        base = stage_budgets(counts.shape[0], pool_size, block_size, stage_ratios)
        scaled = np.round(base.astype(np.float32) * np.float32(scale))
        budget = np.clip(scaled, 0, pool_size).astype(np.int64)
        paid += int(np.minimum(budget, counts).sum())
        full += int(counts.sum())
    if full == 0:
        raise ValueError("usable: no query has a usable candidate")
    return paid / full


def match_budget_scale(
    target: float,
    usable: Sequence[np.ndarray],
    pool_size: int,
    block_size: int,
    stage_ratios: Sequence[float],
    iterations: int = 60,
) -> MatchedScale:
    """The scale whose anchored share of Full's calls is nearest ``target``.

    The share is a non-decreasing step function of the scale: bisection finds
    the step that crosses ``target``, and the nearer side of it is returned.

    Raises:
      ValueError: ``target`` outside [0, 1], or no usable candidate at all.
    """
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"call_budget must be in [0, 1], got {target!r}")

    def share(scale: float) -> float:
        return anchored_share(scale, usable, pool_size, block_size, stage_ratios)

    low = 0.0
    high = 1.0
    while share(high) < target and high < 1e6:
        high *= 2.0
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        if share(middle) < target:
            low = middle
        else:
            high = middle
    below, above = share(low), share(high)
    if abs(below - target) < abs(above - target):
        return MatchedScale(float(low), below, target)
    return MatchedScale(float(high), above, target)


__all__ = [
    "AUTO",
    "MatchedScale",
    "anchored_share",
    "match_budget_scale",
    "stage_budgets",
    "usable_counts",
]
