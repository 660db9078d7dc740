"""Ranking metrics against an independent float64 pure-Python reference."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from earm_jax.eval.metrics import (
    RankingMetrics,
    masked_mean,
    ranking_metrics,
    ranking_positions,
)

# One compile per (k, shapes, which optional arguments) instead of op-by-op eager.
jit_metrics = jax.jit(ranking_metrics, static_argnames=("k",))
PROPERTY_POOL = 16


def reference_metrics(scores, relevant, k, where=None, num_relevant=None):
    """Pure-Python float64 reference: sort eligible items, read the metrics off."""
    num_items = len(scores)
    eligible = [True] * num_items if where is None else [bool(w) for w in where]

    def sort_key(i):
        value = float(scores[i])
        return (math.isnan(value), 0.0 if math.isnan(value) else -value, i)

    ranking = sorted((i for i in range(num_items) if eligible[i]), key=sort_key)
    total = (
        int(sum(bool(r) for r in relevant)) if num_relevant is None else num_relevant
    )
    top = ranking[:k]
    hits = sum(bool(relevant[i]) for i in top)
    dcg = sum(1 / math.log2(p + 2) for p, i in enumerate(top) if relevant[i])
    idcg = sum(1 / math.log2(j + 2) for j in range(min(total, k)))
    first = next((p for p, i in enumerate(ranking) if relevant[i]), None)
    return {
        "recall": hits / total if total > 0 else 0.0,
        "hit": 1.0 if hits > 0 else 0.0,
        "ndcg": dcg / idcg if total > 0 else 0.0,
        "mrr": 0.0 if first is None else 1 / (first + 1),
        "has_relevant": total > 0,
    }


def random_case(rng, num_items):
    """Scores from a coarse grid (many ties) plus the odd -inf, NaN and -0.0."""
    scores = rng.integers(0, 4, size=num_items).astype(np.float32) / 4
    special = rng.uniform(size=num_items)
    scores[special < 0.05] = -np.inf
    scores[(special >= 0.05) & (special < 0.08)] = np.nan
    scores[(special >= 0.08) & (special < 0.12)] = -0.0
    relevant = rng.uniform(size=num_items) < rng.uniform(0.0, 0.4)
    where = rng.uniform(size=num_items) < rng.uniform(0.3, 1.0)
    return scores, relevant, where


def assert_matches(result, expected, atol=1e-6):
    for name in ("recall", "hit", "ndcg", "mrr"):
        np.testing.assert_allclose(
            np.asarray(getattr(result, name), dtype=np.float64),
            expected[name],
            atol=atol,
            err_msg=name,
        )
    assert bool(result.has_relevant) == expected["has_relevant"]


@pytest.mark.parametrize("k", [1, 3, 10, 25])
def test_matches_reference_on_random_cases(k):
    rng = np.random.default_rng(k)
    num_items = 20
    metrics = jax.jit(
        lambda s, r, w, n: ranking_metrics(s, r, k=k, where=w, num_relevant=n)
    )
    for _ in range(60):
        scores, relevant, where = random_case(rng, num_items)
        extra = int(rng.integers(0, 3))  # relevant memories outside the pool
        num_relevant = int(relevant.sum()) + extra
        result = metrics(scores, relevant, where, num_relevant)
        assert_matches(
            result, reference_metrics(scores, relevant, k, where, num_relevant)
        )


def test_hand_computed_example():
    scores = jnp.array([0.5, 0.9, 0.5, 0.1, 0.7])
    relevant = jnp.array([False, False, True, True, False])
    # Ranking: 1 (0.9), 4 (0.7), 0 (0.5, lower index), 2 (0.5), 3 (0.1).
    result = jit_metrics(scores, relevant, k=4, num_relevant=3)
    assert float(result.recall) == pytest.approx(1 / 3)
    assert float(result.hit) == 1.0
    assert float(result.mrr) == pytest.approx(1 / 4)
    idcg = 1 + 1 / math.log2(3) + 1 / math.log2(4)
    assert float(result.ndcg) == pytest.approx((1 / math.log2(5)) / idcg, rel=1e-6)


def test_ties_break_by_lower_index():
    positions = ranking_positions(jnp.array([1.0, 2.0, 1.0, 2.0, -0.0, 0.0]))
    np.testing.assert_array_equal(positions, [2, 0, 3, 1, 4, 5])


def test_ineligible_items_never_ranked():
    scores = jnp.array([0.9, 0.8, 0.1, 0.0])
    relevant = jnp.array([True, False, False, True])
    where = jnp.array([False, True, True, True])
    result = jit_metrics(scores, relevant, k=2, where=where)
    # Item 0 is relevant but not eligible: a miss in recall, absent from MRR.
    assert float(result.recall) == 0.0
    assert float(result.hit) == 0.0
    assert float(result.mrr) == pytest.approx(1 / 3)
    # Only two eligible items: the top 3 holds 2 items.
    result3 = jit_metrics(scores, relevant, k=3, where=where)
    assert float(result3.recall) == pytest.approx(0.5)


def test_zero_relevant_is_nan_free():
    scores = jnp.array([0.3, jnp.nan, -jnp.inf])
    relevant = jnp.zeros(3, dtype=bool)
    result = jit_metrics(scores, relevant, k=2)
    assert not bool(result.has_relevant)
    for value in result[:4]:
        assert float(value) == 0.0
    # Relevant in the pool but a zero denominator is still flagged, never NaN.
    forced = jit_metrics(scores, ~relevant, k=2, num_relevant=jnp.int32(0))
    assert not bool(forced.has_relevant)
    assert np.all(np.isfinite(np.asarray(forced[:4])))


def test_k_larger_than_pool():
    scores = jnp.array([0.1, 0.2, 0.3])
    relevant = jnp.array([True, False, True])
    result = jit_metrics(scores, relevant, k=50, num_relevant=4)
    expected = reference_metrics(np.asarray(scores), np.asarray(relevant), 50, None, 4)
    assert_matches(result, expected)
    assert float(result.recall) == pytest.approx(0.5)


def test_vmap_and_batch_axes_agree_with_reference():
    rng = np.random.default_rng(7)
    num_streams, num_queries, num_items = 3, 5, 12
    cases = [random_case(rng, num_items) for _ in range(num_streams * num_queries)]
    scores = np.stack([c[0] for c in cases]).reshape(num_streams, num_queries, -1)
    relevant = np.stack([c[1] for c in cases]).reshape(scores.shape)
    where = np.stack([c[2] for c in cases]).reshape(scores.shape)
    num_relevant = relevant.sum(-1) + rng.integers(0, 2, size=relevant.shape[:-1])

    def one(s, r, w, n):
        return ranking_metrics(s, r, k=4, where=w, num_relevant=n)

    vmapped = jax.jit(jax.vmap(jax.vmap(one)))(scores, relevant, where, num_relevant)
    batched = jax.jit(one)(scores, relevant, where, num_relevant)
    assert vmapped.recall.shape == (num_streams, num_queries)
    for a, b in zip(vmapped, batched, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    for s in range(num_streams):
        for t in range(num_queries):
            expected = reference_metrics(
                scores[s, t], relevant[s, t], 4, where[s, t], int(num_relevant[s, t])
            )
            assert_matches(jax.tree.map(lambda x, s=s, t=t: x[s, t], vmapped), expected)


def test_dtypes_and_type():
    result = ranking_metrics(jnp.zeros(5), jnp.ones(5, dtype=bool), k=2)
    assert isinstance(result, RankingMetrics)
    for value in result[:4]:
        assert value.dtype == jnp.float32 and value.shape == ()
    assert result.has_relevant.dtype == jnp.bool_


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="k must be"):
        ranking_metrics(jnp.zeros(3), jnp.zeros(3, dtype=bool), k=0)
    with pytest.raises(ValueError, match="must match"):
        ranking_metrics(jnp.zeros(3), jnp.zeros(4, dtype=bool), k=1)
    with pytest.raises(ValueError, match="num_relevant"):
        ranking_metrics(
            jnp.zeros(3), jnp.zeros(3, dtype=bool), k=1, num_relevant=jnp.zeros(2)
        )


def test_masked_mean():
    values = jnp.array([[1.0, 2.0, 100.0], [3.0, 4.0, 5.0]])
    where = jnp.array([[True, True, False], [True, False, False]])
    assert float(masked_mean(values, where=where)) == pytest.approx(2.0)
    np.testing.assert_allclose(masked_mean(values, where=where, axis=-1), [1.5, 3.0])
    assert float(masked_mean(values, where=jnp.zeros_like(where))) == 0.0


@settings(max_examples=40, deadline=None)
@given(
    num_items=st.integers(1, PROPERTY_POOL),
    k=st.sampled_from([1, 2, 5, 16, 20]),
    seed=st.integers(0, 2**31 - 1),
    use_where=st.booleans(),
    use_num_relevant=st.booleans(),
)
def test_property_matches_reference(num_items, k, seed, use_where, use_num_relevant):
    rng = np.random.default_rng(seed)
    scores, relevant, where = random_case(rng, num_items)
    where = where if use_where else np.ones(num_items, dtype=bool)
    num_relevant = (
        int(relevant.sum()) + int(rng.integers(0, 3)) if use_num_relevant else None
    )
    expected = reference_metrics(scores, relevant, k, where, num_relevant)
    # Pad to a fixed pool (one compile per k): padding is ineligible and
    # irrelevant, so it must not change any metric.
    pad = PROPERTY_POOL - num_items
    padded_scores = np.concatenate([scores, rng.uniform(size=pad).astype(np.float32)])
    padded_relevant = np.concatenate([relevant, np.zeros(pad, dtype=bool)])
    padded_where = np.concatenate([where, np.zeros(pad, dtype=bool)])
    denominator = int(relevant.sum()) if num_relevant is None else num_relevant
    result = jit_metrics(
        padded_scores,
        padded_relevant,
        k=k,
        where=padded_where,
        num_relevant=denominator,
    )
    assert_matches(result, expected)
    assert 0.0 <= float(result.ndcg) <= 1.0 + 1e-6
    assert 0.0 <= float(result.recall) <= 1.0


@pytest.mark.parametrize("shape", [(), (3,), (2, 3)])
def test_batch_shapes(shape):
    num_items = 7
    rng = np.random.default_rng(len(shape))
    full_shape = (*shape, num_items)
    scores = rng.normal(size=full_shape).astype(np.float32)
    relevant = rng.uniform(size=full_shape) < 0.3
    where = rng.uniform(size=full_shape) < 0.8
    result = jit_metrics(scores, relevant, k=3, where=where)
    for value in result:
        assert value.shape == tuple(shape)
    flat = result.recall.reshape(-1)
    for i, (s, r, w) in enumerate(
        zip(
            scores.reshape(-1, num_items),
            relevant.reshape(-1, num_items),
            where.reshape(-1, num_items),
            strict=True,
        )
    ):
        expected = reference_metrics(s, r, 3, w)
        assert float(flat[i]) == pytest.approx(expected["recall"], abs=1e-6)
