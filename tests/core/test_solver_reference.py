"""The JAX solver's math against the independent float64 NumPy reference."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference_numpy as ref
from planted import config_for, planted_stream

import earm_jax as ej
from earm_jax.core import model as solver_model
from earm_jax.core.solvers import als as als_solver


def _state_after(stream, config, num_queries, seed=0):
    """Runs the first ``num_queries`` queries and returns the state (the history)."""
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
    head = jax.tree.map(lambda leaf: leaf[:num_queries], stream)
    head = head._replace(insert_time=stream.insert_time)
    state, _ = jax.jit(functools.partial(ej.run, solver))(jax.random.key(seed), head)
    return state


def _triples(state):
    rows = np.arange(state.obs_mask.shape[0]) < int(state.count)
    mask = np.asarray(state.obs_mask) & rows[:, None]
    q, k = np.nonzero(mask)
    index = np.asarray(state.obs_index)
    value = np.asarray(state.obs_value, np.float64)
    return [
        (int(a), int(index[a, b]), float(value[a, b]))
        for a, b in zip(q, k, strict=False)
    ]


def _params64(params):
    return tuple(np.asarray(p, np.float64) for p in params)


@pytest.mark.parametrize("seed,rank", [(0, 2), (1, 3), (2, 0), (3, 1)])
def test_loss_matches_reference(seed, rank):
    stream, _ = planted_stream(seed, rank=max(rank, 1), noise=0.05)
    config = config_for(stream, rank=rank)
    state = _state_after(stream, config, 15, seed)
    triples = _triples(state)
    seen = {m for _, m, _ in triples}
    past = set(range(int(state.count)))
    # Memories without history contribute only their (masked) init to the state.
    params = solver_model.parameters(state)
    params = params._replace(
        memory_factors=solver_model.effective_memory_factors(
            params.memory_factors, state.memory_count
        )
    )
    expected = ref.loss(_params64(params), triples, seen, past, config.l2)
    actual = float(solver_model.loss(solver_model.parameters(state), state, config.l2))
    np.testing.assert_allclose(actual, expected, rtol=1e-4)


@pytest.mark.parametrize("seed,rank", [(0, 2), (4, 3), (5, 0)])
def test_als_sweep_matches_reference(seed, rank):
    stream, _ = planted_stream(seed, rank=max(rank, 1), noise=0.05)
    config = config_for(stream, rank=rank)
    state = _state_after(stream, config, 12, seed)
    triples = _triples(state)
    params = solver_model.parameters(state)
    params = params._replace(
        memory_factors=solver_model.effective_memory_factors(
            params.memory_factors, state.memory_count
        )
    )
    expected = ref.als_sweep(_params64(params), triples, config.l2)
    actual = jax.jit(als_solver.als_sweep, static_argnums=2)(params, state, config.l2)
    seen = np.asarray(state.memory_count) > 0
    past = np.arange(config.capacity) < int(state.count)
    np.testing.assert_allclose(float(actual.global_mean), expected[0], atol=1e-5)
    np.testing.assert_allclose(
        np.asarray(actual.memory_bias)[seen], expected[1][seen], atol=1e-4
    )
    np.testing.assert_allclose(
        np.asarray(actual.memory_factors)[seen], expected[2][seen], atol=1e-4
    )
    np.testing.assert_allclose(
        np.asarray(actual.query_bias)[past], expected[3][past], atol=1e-4
    )
    np.testing.assert_allclose(
        np.asarray(actual.query_factors)[past], expected[4][past], atol=1e-4
    )


@pytest.mark.parametrize(
    "seed,rank,num_anchors", [(0, 2, 7), (1, 4, 20), (2, 0, 3), (3, 2, 0)]
)
def test_fold_in_matches_reference(seed, rank, num_anchors):
    rng = np.random.default_rng(seed)
    num_memories, pool = 40, 20
    params = ej.Parameters(
        global_mean=jnp.float32(rng.normal()),
        memory_bias=jnp.asarray(rng.normal(size=num_memories), jnp.float32),
        memory_factors=jnp.asarray(rng.normal(size=(num_memories, rank)), jnp.float32),
        query_bias=jnp.zeros(5, jnp.float32),
        query_factors=jnp.zeros((5, rank), jnp.float32),
    )
    memory_count = jnp.ones(num_memories, jnp.int32)
    candidates = rng.choice(num_memories, pool, replace=False).astype(np.int32)
    values = rng.uniform(size=pool).astype(np.float32)
    mask = np.zeros(pool, bool)
    mask[rng.choice(pool, num_anchors, replace=False)] = True
    bias, factors = solver_model.fold_in(
        params, memory_count, candidates, values, mask, 0.1
    )
    anchors = [(int(candidates[i]), float(values[i])) for i in np.flatnonzero(mask)]
    expected_bias, expected_factors = ref.fold_in(
        float(params.global_mean),
        np.asarray(params.memory_bias, np.float64),
        np.asarray(params.memory_factors, np.float64),
        anchors,
        0.1,
    )
    np.testing.assert_allclose(float(bias), expected_bias, atol=1e-4)
    np.testing.assert_allclose(np.asarray(factors), expected_factors, atol=1e-4)


def test_als_sweeps_never_increase_the_loss():
    stream, _ = planted_stream(7, rank=2, noise=0.1)
    config = config_for(stream, rank=2)
    state = _state_after(stream, config, 20)
    params = solver_model.parameters(state)
    sweep = jax.jit(als_solver.als_sweep, static_argnums=2)
    losses = []
    for _ in range(8):
        params = sweep(params, state, config.l2)
        losses.append(float(solver_model.loss(params, state, config.l2)))
    assert all(b <= a * (1 + 1e-5) for a, b in zip(losses, losses[1:], strict=False)), (
        losses
    )
