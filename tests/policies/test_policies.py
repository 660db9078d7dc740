"""Budget schedules, anchor samplers and mixed reranking (property tests)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import earm_jax as ej
from earm_jax.policies import (
    constant_budget,
    mixed_scores,
    scaled_schedule,
    stage_schedule,
    stratified_anchors,
    top_k_context,
    top_similarity_anchors,
    uniform_anchors,
)

POOL = 40
_stratified = jax.jit(stratified_anchors(0.1))
_top = jax.jit(top_similarity_anchors())
_uniform = jax.jit(uniform_anchors())


def test_paper_stage_schedule_and_ratios_for_other_pool_sizes():
    schedule = stage_schedule(200)
    budgets = [int(schedule(t)) for t in range(0, 60)]
    assert budgets[:10] == [200] * 10 and budgets[10:20] == [80] * 10
    assert budgets[20:30] == [50] * 10 and budgets[30:40] == [40] * 10
    assert set(budgets[40:]) == {35}
    assert [int(stage_schedule(100)(t)) for t in (0, 10, 20, 30, 40)] == [
        100,
        40,
        25,
        20,
        18,
    ]
    assert int(constant_budget(7)(3)) == 7
    assert int(scaled_schedule(schedule, 2.0, 200)(15)) == 160


def test_schedule_rejects_bad_arguments_with_the_name():
    with pytest.raises(ValueError, match="pool_size"):
        stage_schedule(0)
    with pytest.raises(ValueError, match="stage_ratios"):
        stage_schedule(200, stage_ratios=(1.5,))
    with pytest.raises(ValueError, match="high_fraction"):
        stratified_anchors(2.0)


def _query(seed, num_valid):
    rng = np.random.default_rng(seed)
    valid = np.arange(POOL) < num_valid
    return ej.Query(
        jnp.arange(POOL, dtype=jnp.int32),
        jnp.asarray(rng.normal(size=POOL), jnp.float32),
        jnp.asarray(valid),
    )


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    num_valid=st.integers(0, POOL),
    budget=st.integers(0, 2 * POOL),
    unusable_seed=st.integers(0, 10_000),
)
def test_anchor_samplers_respect_budget_and_usable_mask(
    seed, num_valid, budget, unusable_seed
):
    query = _query(seed, num_valid)
    usable = np.asarray(query.valid) & (
        np.random.default_rng(unusable_seed).uniform(size=POOL) > 0.2
    )
    expected = min(budget, int(usable.sum()))
    key = jax.random.key(seed)
    for sampler in (_stratified, _top, _uniform):
        anchors = np.asarray(sampler(key, query, budget, jnp.asarray(usable)))
        assert anchors.shape == (POOL,) and anchors.dtype == bool
        assert not (anchors & ~usable).any()
        assert int(anchors.sum()) == expected


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), budget=st.integers(2, 30))
def test_stratified_anchors_split_between_the_top_stratum_and_the_rest(seed, budget):
    query = _query(seed, POOL)
    usable = jnp.ones(POOL, bool)
    anchors = np.asarray(_stratified(jax.random.key(seed), query, budget, usable))
    order = np.argsort(-np.asarray(query.similarity), kind="stable")
    high = np.zeros(POOL, bool)
    high[order[:4]] = True  # ceil(0.1 * 40)
    from_high = int((anchors & high).sum())
    assert from_high == min(4, (budget + 1) // 2)
    assert int((anchors & ~high).sum()) == budget - from_high


def test_stratified_sampling_is_uniform_within_strata():
    query = _query(0, POOL)
    keys = jax.random.split(jax.random.key(0), 4000)
    draws = jax.vmap(lambda k: _stratified(k, query, 10, jnp.ones(POOL, bool)))(keys)
    frequency = np.asarray(draws).mean(0)
    order = np.argsort(-np.asarray(query.similarity), kind="stable")
    rest = frequency[order[4:]]
    # The stratum (4) is smaller than half the budget (5): all of it is scored,
    # and the other 6 anchors are 6 of the 36 others; sd ~ 0.006 over 4000 draws.
    np.testing.assert_array_equal(frequency[order[:4]], 1.0)
    np.testing.assert_allclose(rest, 6 / 36, atol=0.03)


def test_top_similarity_anchors_are_the_most_similar():
    query = _query(3, POOL)
    anchors = np.asarray(_top(jax.random.key(0), query, 7, query.valid))
    order = np.argsort(-np.asarray(query.similarity), kind="stable")
    assert set(np.flatnonzero(anchors)) == set(order[:7])


def test_mixed_scores_and_chronological_context():
    completed = jnp.asarray([0.1, 0.9, 0.5, 0.3])
    values = jnp.asarray([1.0, 0.0, 0.0, 0.0])
    observed = jnp.asarray([True, True, False, False])
    usable = jnp.asarray([True, True, True, False])
    scores = mixed_scores(completed, values, observed, usable)
    np.testing.assert_array_equal(np.asarray(scores), [1.0, 0.0, 0.5, -np.inf])
    memories = jnp.asarray([30, 10, 20, 40], jnp.int32)
    inserted = jnp.asarray([3, 1, 2, 4], jnp.int32)
    ids, mask = top_k_context(scores, memories, inserted, k=2)
    assert list(np.asarray(ids)) == [20, 30] and bool(mask.all())
    ids, mask = top_k_context(scores, memories, inserted, k=4)
    assert list(np.asarray(ids)[np.asarray(mask)]) == [10, 20, 30]
    assert int(mask.sum()) == 3
