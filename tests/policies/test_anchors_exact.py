"""The sort-free samplers choose exactly the anchors of the argsort ones.

The reference below is the argsort formulation of the samplers (two stable
argsorts per rank), kept here as a private oracle.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import earm_jax as ej
from earm_jax.policies import (
    stratified_anchors,
    top_similarity_anchors,
    uniform_anchors,
)
from earm_jax.policies.anchors import _first_members

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow


def _reference_ranks(priority, eligible):
    priority = jnp.where(eligible, priority, -jnp.inf)
    order = jnp.argsort(-priority, stable=True)
    return jnp.argsort(order, stable=True)


def _reference_top(key, query, budget, usable):
    return (_reference_ranks(query.similarity, usable) < budget) & usable


def _reference_uniform(key, query, budget, usable):
    priority = jax.random.uniform(key, jnp.shape(query.similarity))
    return (_reference_ranks(priority, usable) < budget) & usable


def _reference_stratified(high_fraction):
    def anchors(key, query, budget, usable):
        usable = jnp.asarray(usable, bool)
        num_usable = jnp.sum(usable)
        budget = jnp.minimum(jnp.asarray(budget, jnp.int32), num_usable)
        num_high = jnp.ceil(high_fraction * num_usable.astype(jnp.float32))
        num_high = num_high.astype(jnp.int32)
        in_high = (_reference_ranks(query.similarity, usable) < num_high) & usable
        in_rest = usable & ~in_high
        size_high, size_rest = jnp.sum(in_high), jnp.sum(in_rest)
        take_high = jnp.minimum(size_high, (budget + 1) // 2)
        take_rest = jnp.minimum(size_rest, budget - take_high)
        take_high = jnp.minimum(size_high, budget - take_rest)
        priority = jax.random.uniform(key, jnp.shape(query.similarity))
        chosen_high = (_reference_ranks(priority, in_high) < take_high) & in_high
        chosen_rest = (_reference_ranks(priority, in_rest) < take_rest) & in_rest
        return chosen_high | chosen_rest

    return anchors


PAIRS = {
    "top": (jax.jit(top_similarity_anchors()), jax.jit(_reference_top)),
    "uniform": (jax.jit(uniform_anchors()), jax.jit(_reference_uniform)),
    "stratified": (
        jax.jit(stratified_anchors(0.1)),
        jax.jit(_reference_stratified(0.1)),
    ),
    "stratified_0.3": (
        jax.jit(stratified_anchors(0.3)),
        jax.jit(_reference_stratified(0.3)),
    ),
}
# Similarities with ties, signed zeros, infinities and NaN.
_SPECIAL = np.array([0.0, -0.0, 0.5, 0.5, -1.0, np.inf, -np.inf, np.nan], np.float32)


@settings(max_examples=80, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    pool=st.sampled_from([1, 7, 40, 200]),
    budget=st.integers(0, 220),
    usable_fraction=st.floats(0.0, 1.0),
    special=st.floats(0.0, 1.0),
)
def test_anchors_identical_to_the_argsort_reference(
    seed, pool, budget, usable_fraction, special
):
    rng = np.random.default_rng(seed)
    similarity = np.round(rng.normal(size=pool), 1).astype(np.float32)  # ties
    replace = rng.uniform(size=pool) < special
    similarity[replace] = rng.choice(_SPECIAL, size=int(replace.sum()))
    usable = rng.uniform(size=pool) < usable_fraction
    query = ej.Query(
        jnp.arange(pool, dtype=jnp.int32), jnp.asarray(similarity), jnp.asarray(usable)
    )
    key = jax.random.key(seed)
    for name, (new, reference) in PAIRS.items():
        got = np.asarray(new(key, query, budget, jnp.asarray(usable)))
        want = np.asarray(reference(key, query, budget, jnp.asarray(usable)))
        np.testing.assert_array_equal(got, want, err_msg=name)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    pool=st.sampled_from([1, 5, 64, 200]),
    count=st.integers(-2, 210),
)
def test_first_members_equal_the_double_argsort(seed, pool, count):
    rng = np.random.default_rng(seed)
    special = rng.choice(_SPECIAL, size=pool)
    priority = np.where(rng.uniform(size=pool) < 0.5, special, rng.normal(size=pool))
    priority = jnp.asarray(priority, jnp.float32)
    eligible = jnp.asarray(rng.uniform(size=pool) < 0.7)
    got = np.asarray(jax.jit(_first_members)(priority, eligible, count))
    want = np.asarray((_reference_ranks(priority, eligible) < count) & eligible)
    np.testing.assert_array_equal(got, want)


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    pool=st.sampled_from([1, 7, 200]),
    rows=st.integers(1, 3),
)
def test_stacked_selections_equal_one_call_per_row(seed, pool, rows):
    # The stratified sampler draws both strata in one stacked call.
    rng = np.random.default_rng(seed)
    special = rng.choice(_SPECIAL, size=pool)
    priority = np.where(rng.uniform(size=pool) < 0.3, special, rng.normal(size=pool))
    priority = jnp.asarray(priority, jnp.float32)
    members = jnp.asarray(rng.uniform(size=(rows, pool)) < 0.6)
    counts = jnp.asarray(rng.integers(-1, pool + 2, size=rows), jnp.int32)
    stacked = np.asarray(jax.jit(_first_members)(priority, members, counts))
    for row in range(rows):
        alone = np.asarray(_first_members(priority, members[row], counts[row]))
        np.testing.assert_array_equal(stacked[row], alone)
