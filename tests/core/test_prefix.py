"""``running_count`` (a matrix product) equals ``cumsum`` of the mask."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from earm_jax.core.prefix import running_count


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    shape=st.sampled_from([(1,), (5,), (200,), (3, 64), (2, 2, 17), (1025,)]),
    density=st.floats(0.0, 1.0),
)
def test_running_count_is_the_cumulative_sum(seed, shape, density):
    mask = np.random.default_rng(seed).uniform(size=shape) < density
    got = np.asarray(jax.jit(running_count)(mask))
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, np.cumsum(mask, axis=-1))


def test_running_count_is_exact_at_the_longest_matrix_length():
    # 1024 ones: every partial sum an integer well inside float32's range.
    mask = jnp.ones((2, 1024), bool)
    np.testing.assert_array_equal(
        np.asarray(running_count(mask)), np.broadcast_to(np.arange(1, 1025), (2, 1024))
    )
