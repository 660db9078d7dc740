r"""Ranking metrics for one query's pool: pure ``jnp``, usable inside jit and vmap.

All functions take the pool on the last axis (``[..., N]``); leading axes (e.g.
``T`` queries, ``S`` streams) are batch axes, so the same call works on one
query, a stream or a batch of streams, and under ``jax.vmap`` too.

Ranking rule (shared by every metric): eligible items (``where``) ordered by
score, descending; ties broken by position, lower index first; NaN scores rank
after every other eligible item; ineligible items never appear in the ranking,
so a top ``K`` may hold fewer than ``K`` items.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp

from earm_jax.types import Array, ArrayLike


class RankingMetrics(NamedTuple):
    """Per-query ranking quality at a cutoff ``K`` (``float32[...]`` each).

    Attributes:
      recall: relevant items in the top ``K`` / ``num_relevant``.
      hit: 1 if any relevant item is in the top ``K``, else 0.
      ndcg: binary-gain nDCG@K, ideal DCG over ``min(num_relevant, K)`` gains.
      mrr: 1 / rank of the first relevant item in the whole eligible ranking
        (0 if no relevant item is eligible).
      has_relevant: ``bool[...]`` whether ``num_relevant > 0``. Where False all
        four metrics are 0 (never NaN); exclude those queries when averaging.
    """

    recall: Array
    hit: Array
    ndcg: Array
    mrr: Array
    has_relevant: Array


def ranking_positions(scores: ArrayLike, *, where: ArrayLike | None = None) -> Array:
    """0-based position of each item in the eligible ranking.

    Args:
      scores: ``float[..., N]`` higher is better.
      where: ``bool[..., N]`` eligible items; ``None`` means all.

    Returns:
      ``int32[..., N]``: the rank of each eligible item (0 = best); ineligible
      items get positions after every eligible one (``>= where.sum(-1)``).
    """
    scores = jnp.asarray(scores, dtype=jnp.float32)
    eligible = (
        jnp.ones(scores.shape, dtype=bool)
        if where is None
        else jnp.broadcast_to(jnp.asarray(where, dtype=bool), scores.shape)
    )
    # + 0.0 maps -0.0 to +0.0 so that the two tie.
    descending = -(scores + 0.0)
    is_nan = jnp.isnan(scores)
    # Keys, most significant last: ineligible after eligible, NaN after numbers,
    # then descending score; jnp.lexsort is stable, so ties keep index order.
    order = jnp.lexsort((jnp.where(is_nan, 0.0, descending), is_nan, ~eligible))
    return jnp.argsort(order, axis=-1).astype(jnp.int32)  # inverse permutation


def ranking_metrics(
    scores: ArrayLike,
    relevant: ArrayLike,
    *,
    k: int,
    where: ArrayLike | None = None,
    num_relevant: ArrayLike | None = None,
) -> RankingMetrics:
    r"""Recall@K, Hit@K, nDCG@K and MRR of ranking a pool by ``scores``.

    .. math::
       \mathrm{nDCG@K} = \frac{\sum_{i \in \mathrm{top}K,\ \mathrm{rel}_i}
       1/\log_2(\mathrm{pos}_i + 2)}{\sum_{j < \min(R, K)} 1/\log_2(j + 2)}

    with 0-based positions and :math:`R` = ``num_relevant``.

    Args:
      scores: ``float[..., N]`` ranking scores, higher is better.
      relevant: ``bool[..., N]`` ground truth.
      k: the cutoff ``K`` (a Python int; ``K > N`` is allowed).
      where: ``bool[..., N]`` items eligible for the ranking (e.g. ``valid``, or
        the anchors for an observed-only ranking). Relevant but ineligible items
        still count in the recall denominator. ``None`` means all.
      num_relevant: ``int[...]`` recall denominator including relevant items
        outside the pool (must be ``>= relevant.sum(-1)``); ``None`` means
        ``relevant.sum(-1)``.

    Returns:
      :class:`RankingMetrics` of ``float32[...]`` (``has_relevant`` is bool).

    Raises:
      ValueError: if ``k < 1`` or the shapes disagree (at trace time).

    Example:
      >>> import jax.numpy as jnp
      >>> m = ranking_metrics(jnp.array([0.9, 0.8, 0.1]),
      ...                     jnp.array([False, True, True]), k=2)
      >>> float(m.recall), float(m.hit), float(m.mrr)
      (0.5, 1.0, 0.5)
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    scores = jnp.asarray(scores, dtype=jnp.float32)
    relevant = jnp.asarray(relevant, dtype=bool)
    if scores.shape != relevant.shape:
        raise ValueError(
            f"scores {scores.shape} and relevant {relevant.shape} must match"
        )
    eligible = (
        jnp.ones(scores.shape, dtype=bool)
        if where is None
        else jnp.broadcast_to(jnp.asarray(where, dtype=bool), scores.shape)
    )
    positions = ranking_positions(scores, where=eligible)
    if num_relevant is None:
        denominator = relevant.sum(axis=-1, dtype=jnp.int32)
    else:
        denominator = jnp.asarray(num_relevant, dtype=jnp.int32)
        if denominator.shape != scores.shape[:-1]:
            raise ValueError(
                f"num_relevant {denominator.shape} must have shape {scores.shape[:-1]}"
            )
    has_relevant = denominator > 0
    safe_denominator = jnp.maximum(denominator, 1).astype(jnp.float32)

    ranked_relevant = relevant & eligible
    in_top = ranked_relevant & (positions < k)
    hits = in_top.sum(axis=-1, dtype=jnp.int32)
    recall = jnp.where(has_relevant, hits.astype(jnp.float32) / safe_denominator, 0.0)
    hit = (hits > 0).astype(jnp.float32)

    discount = 1.0 / jnp.log2(positions.astype(jnp.float32) + 2.0)
    dcg = jnp.where(in_top, discount, 0.0).sum(axis=-1)
    ideal_slots = jnp.arange(k, dtype=jnp.int32)
    ideal_discount = 1.0 / jnp.log2(ideal_slots.astype(jnp.float32) + 2.0)
    ideal_slots = ideal_slots.reshape((1,) * denominator.ndim + (k,))
    ideal_gain = ideal_slots < denominator[..., None]
    ideal_discount = jnp.broadcast_to(ideal_discount, ideal_gain.shape)
    idcg = jnp.where(ideal_gain, ideal_discount, 0.0).sum(axis=-1)
    ndcg = jnp.where(has_relevant, dcg / jnp.maximum(idcg, 1e-12), 0.0)

    num_items = scores.shape[-1]
    first = jnp.where(ranked_relevant, positions, num_items).min(axis=-1)
    mrr = jnp.where(first < num_items, 1.0 / (first.astype(jnp.float32) + 1.0), 0.0)
    return RankingMetrics(
        recall=recall.astype(jnp.float32),
        hit=hit,
        ndcg=ndcg.astype(jnp.float32),
        mrr=mrr.astype(jnp.float32),
        has_relevant=has_relevant,
    )


def masked_mean(values: ArrayLike, *, where: ArrayLike, axis=None) -> Array:
    """Mean of ``values`` over the entries where ``where`` (0 if there are none).

    Args:
      values: ``float[...]`` e.g. a :class:`RankingMetrics` field.
      where: ``bool[...]`` broadcastable to ``values``, e.g. ``has_relevant``.
      axis: axes to reduce (``None`` = all).

    Returns:
      ``float32`` array with ``axis`` reduced.
    """
    values = jnp.asarray(values, dtype=jnp.float32)
    mask = jnp.broadcast_to(jnp.asarray(where, dtype=bool), values.shape)
    total = jnp.where(mask, values, 0.0).sum(axis=axis)
    count = mask.sum(axis=axis, dtype=jnp.int32)
    return jnp.where(count > 0, total / jnp.maximum(count, 1).astype(jnp.float32), 0.0)


__all__ = ["RankingMetrics", "masked_mean", "ranking_metrics", "ranking_positions"]
