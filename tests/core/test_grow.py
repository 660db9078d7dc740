"""Growing the fixed buffers changes nothing about what the solver computes."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from planted import config_for, planted_stream

import earm_jax as ej
from earm_jax.core.grow import NOT_INSERTED, grow_state

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow


@pytest.mark.parametrize("solver_name", ["als", "incremental", "gradient"])
def test_grown_state_continues_exactly_like_the_original(solver_name):
    stream, _ = planted_stream(4, num_queries=16, noise=0.05)
    config = config_for(stream, solver=solver_name, num_steps=5)
    policy = ej.paper_policy(pool_size=config.pool_size, block_size=4)
    solver = ej.online_solver(config, policy)
    head = jax.tree.map(lambda leaf: leaf[:12], stream)._replace(
        insert_time=stream.insert_time
    )
    state, _ = jax.jit(functools.partial(ej.run, solver))(jax.random.key(0), head)

    grown, grown_config = grow_state(
        state,
        config,
        jax.random.key(9),
        num_memories=2 * config.num_memories,
        capacity=3 * config.capacity,
    )
    assert grown_config.num_memories == 2 * config.num_memories
    assert np.all(np.asarray(grown.insert_time)[config.num_memories :] == NOT_INSERTED)
    bigger = ej.online_solver(grown_config, policy)
    step, big_step = jax.jit(solver.step), jax.jit(bigger.step)
    # Adam divides by the root of tiny second moments, which turns the
    # different summation order over a wider memory axis into differences of
    # a few thousandths on some CPUs (AVX2-only ones); the closed-form solvers
    # stay exact.
    tolerance = 1e-2 if solver_name == "gradient" else 1e-5
    for t in range(12, 16):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], stream.queries)
        key = jax.random.key(t)
        state, info = step(key, state, query, stream.scores[t])
        grown, grown_info = big_step(key, grown, query, stream.scores[t])
        np.testing.assert_array_equal(info.anchors, grown_info.anchors)
        np.testing.assert_allclose(info.scores, grown_info.scores, atol=tolerance)
        np.testing.assert_allclose(info.completed, grown_info.completed, atol=tolerance)


def test_shrinking_is_refused():
    stream, _ = planted_stream(4, num_queries=4)
    config = config_for(stream)
    state = ej.online_solver(config, ej.paper_policy(pool_size=20)).init(
        jax.random.key(0)
    )
    with pytest.raises(ValueError, match="num_memories"):
        grow_state(state, config, jax.random.key(0), num_memories=3)
    with pytest.raises(ValueError, match="capacity"):
        grow_state(state, config, jax.random.key(0), capacity=1)
    assert jnp.shape(state.memory_bias) == (config.num_memories,)


def test_every_registered_solver_grows_and_keeps_its_extras_structure():
    # Growth is generic over the registry: each algorithm pads its own extras.
    for name in ej.SOLVERS:
        stream, _ = planted_stream(3, num_memories=20, num_queries=6, pool_size=8)
        config = config_for(stream, rank=2)._replace(solver=name)
        solver = ej.online_solver(config, ej.paper_policy(pool_size=8))
        state, _ = jax.jit(functools.partial(ej.run, solver))(jax.random.key(0), stream)
        grown, grown_config = grow_state(
            state, config, jax.random.key(1), num_memories=40, capacity=12
        )
        fresh = ej.online_solver(grown_config, ej.paper_policy(pool_size=8)).init(
            jax.random.key(2)
        )
        assert jax.tree.structure(grown) == jax.tree.structure(fresh), name
        for got, want in zip(
            jax.tree.leaves(grown), jax.tree.leaves(fresh), strict=True
        ):
            assert got.shape == want.shape and got.dtype == want.dtype, name
