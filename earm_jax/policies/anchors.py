"""Anchor samplers: ``(key, query, budget, usable) -> bool[N]``.

Each returns at most ``budget`` anchors among the ``usable`` candidates, with
fixed shapes whatever the budget (ranks + a comparison, never boolean indexing).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.base import AnchorFn, Query
from earm_jax.types import Array, ArrayLike, PRNGKey


def _before(priority: ArrayLike, eligible: ArrayLike) -> Array:
    """``bool[N, N]``: ``[i, j]`` when item ``j`` ranks ahead of item ``i``.

    The order of a stable descending sort of ``priority`` with ineligible items
    at ``-inf``: higher priority first, ties (``-0.0 == 0.0``) by index, NaN
    last (as ``jnp.argsort`` places it). One comparison matrix instead of two
    sorts: ``N^2`` elementwise comparisons that fuse into one reduction, much
    faster than a sort for pool sizes of a few hundred, on CPU and GPU.
    """
    priority = jnp.where(jnp.asarray(eligible), jnp.asarray(priority), -jnp.inf)
    nan = jnp.isnan(priority)
    value = jnp.where(nan, 0.0, priority)
    index = jnp.arange(priority.shape[-1])
    ahead = (value[None, :] > value[:, None]) | (
        (value[None, :] == value[:, None]) & (index[None, :] < index[:, None])
    )
    return (nan[None, :] < nan[:, None]) | ((nan[None, :] == nan[:, None]) & ahead)


def _ranks_among(before: Array, members: ArrayLike) -> Array:
    """Rank (0 = first) of each item among the ``members`` ahead of it."""
    return jnp.sum(before & jnp.asarray(members, bool)[None, :], axis=-1)


def _ranks(priority: ArrayLike, eligible: ArrayLike) -> Array:
    """Rank (0 = best, descending priority) of each eligible item; ineligible last.

    Equal to ``argsort(argsort(-priority, stable))`` with ineligible items at
    ``-inf`` (the rank of an ineligible item is only ever compared after
    masking it out).
    """
    return _ranks_among(_before(priority, eligible), jnp.ones_like(eligible, bool))


def top_similarity_anchors() -> AnchorFn:
    """The ``budget`` most similar usable candidates (no exploration)."""

    def anchors(
        key: PRNGKey, query: Query, budget: ArrayLike, usable: ArrayLike
    ) -> Array:
        del key
        ranks = _ranks(query.similarity, usable)
        return (ranks < budget) & usable

    return anchors


def uniform_anchors() -> AnchorFn:
    """``budget`` usable candidates uniformly at random."""

    def anchors(
        key: PRNGKey, query: Query, budget: ArrayLike, usable: ArrayLike
    ) -> Array:
        priority = jax.random.uniform(key, jnp.shape(query.similarity))
        return (_ranks(priority, usable) < budget) & usable

    return anchors


def stratified_anchors(high_fraction: float = 0.1) -> AnchorFn:
    """Half the budget from the high-similarity stratum, half from the rest.

    DESIGN §2.3.

    The stratum ``H`` is the top ``ceil(high_fraction * n)`` usable candidates by
    similarity (``n`` usable). ``ceil(budget / 2)`` anchors are drawn uniformly
    from ``H`` and the rest uniformly from the others; when one side has too few
    candidates the other side makes up the difference, so exactly
    ``min(budget, n)`` anchors are chosen.

    Args:
      high_fraction: size of the stratum as a fraction of the usable pool. 0.1 is
        the measured default (DESIGN §2.3): a larger stratum leaves much of the
        semantic top unscored.
    """
    if not 0.0 <= high_fraction <= 1.0:
        raise ValueError(f"high_fraction must be in [0, 1], got {high_fraction!r}")

    def anchors(
        key: PRNGKey, query: Query, budget: ArrayLike, usable: ArrayLike
    ) -> Array:
        usable = jnp.asarray(usable, bool)
        num_usable = jnp.sum(usable)
        budget = jnp.minimum(jnp.asarray(budget, jnp.int32), num_usable)
        num_high = jnp.ceil(high_fraction * num_usable).astype(jnp.int32)
        in_high = (_ranks(query.similarity, usable) < num_high) & usable
        in_rest = usable & ~in_high
        size_high, size_rest = jnp.sum(in_high), jnp.sum(in_rest)
        take_high = jnp.minimum(size_high, (budget + 1) // 2)
        take_rest = jnp.minimum(size_rest, budget - take_high)
        take_high = jnp.minimum(size_high, budget - take_rest)
        priority = jax.random.uniform(key, jnp.shape(query.similarity))
        # One comparison matrix serves both strata: an item's rank within a
        # stratum counts the stratum's members ahead of it.
        before = _before(priority, usable)
        chosen_high = (_ranks_among(before, in_high) < take_high) & in_high
        chosen_rest = (_ranks_among(before, in_rest) < take_rest) & in_rest
        return chosen_high | chosen_rest

    return anchors


__all__ = ["stratified_anchors", "top_similarity_anchors", "uniform_anchors"]
