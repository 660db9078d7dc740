"""Side-information completion: the fit against a float64 NumPy reference,
causality, vmap = loop, no retrace, recovery of a planted metric, and a new
tenant's start from other tenants' fits (shared part kept, private part zero)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from text_pools import random_text_pools

from earm_jax.base import Observation, Query
from earm_jax.core.side_information import shared_start, side_information

M, N, D, T = 40, 12, 6, 15


def _stream(seed=0, metric=None, noise=0.05):
    """Random embeddings; answers a planted diagonal metric plus noise."""
    rng = np.random.default_rng(seed)
    memories, queries, candidates, similarity = random_text_pools(rng, M, T, N, D)
    metric = np.ones(D) if metric is None else metric
    truth = np.einsum("d,td,tnd->tn", metric, queries, memories[candidates])
    values = np.clip(0.5 + truth + noise * rng.normal(size=(T, N)), 0, 1)
    mask = rng.random((T, N)) < 0.5
    mask[:, 0] = True
    return dict(
        memories=memories.astype(np.float32),
        queries=queries.astype(np.float32),
        candidates=candidates.astype(np.int32),
        similarity=similarity.astype(np.float32),
        values=values.astype(np.float32),
        mask=mask,
        truth=truth,
    )


def _run(model, stream, steps=T, initial=None):
    def step(state, t):
        query = Query(
            stream["candidates"][t], stream["similarity"][t], jnp.ones(N, bool)
        )
        obs = Observation(stream["values"][t], stream["mask"][t])
        completed, _ = model.predict(
            state, query, stream["queries"][t], stream["memories"], obs
        )
        state = model.update(
            state, query, stream["queries"][t], stream["memories"], obs
        )
        return state, completed

    state = model.init(M, D) if initial is None else initial
    return jax.lax.scan(step, state, jnp.arange(steps))


def _reference_normal_equations(stream, steps):
    """float64 NumPy: the within-query-centred normal equations of the anchors."""
    gram = np.zeros((D + 1, D + 1))
    moment = np.zeros(D + 1)
    for t in range(steps):
        sim = stream["similarity"][t].astype(np.float64)
        z = (sim - sim.mean()) / max(sim.std(), 1e-6)
        product = (
            np.sqrt(D)
            * stream["memories"][stream["candidates"][t]]
            * stream["queries"][t]
        )
        phi = np.concatenate([z[:, None], product], axis=1)
        anchored = stream["mask"][t]
        x = phi[anchored] - phi[anchored].mean(0)
        y = stream["values"][t][anchored] - stream["values"][t][anchored].mean()
        gram += x.T @ x
        moment += x.T @ y
    return gram, moment


def _reference_weights(stream, steps, l2):
    """float64 NumPy: the ridge fit on within-query-centred anchors."""
    gram, moment = _reference_normal_equations(stream, steps)
    return np.linalg.solve(gram + l2 * np.eye(D + 1), moment)


def test_weights_equal_the_float64_ridge_fit():
    stream = _stream()
    model = side_information(l2=0.5)
    state, _ = jax.jit(lambda s: _run(model, s))(stream)
    np.testing.assert_allclose(
        np.asarray(state.weights),
        _reference_weights(stream, T, 0.5),
        rtol=2e-3,
        atol=2e-4,
    )
    assert int(state.count) == T


def test_causal_a_later_query_changes_nothing_before_it():
    stream = _stream(1)
    model = side_information()
    _, completed = jax.jit(lambda s: _run(model, s))(stream)
    changed = {k: np.array(v) for k, v in stream.items()}
    changed["values"][9:] = 1.0 - changed["values"][9:]
    changed["candidates"][9:] = changed["candidates"][9:][:, ::-1]
    changed["queries"][9:] = -changed["queries"][9:]
    _, again = jax.jit(lambda s: _run(model, s))(changed)
    np.testing.assert_array_equal(np.asarray(completed)[:9], np.asarray(again)[:9])
    assert not np.allclose(np.asarray(completed)[9:], np.asarray(again)[9:])


def test_vmap_equals_a_loop_and_compiles_once():
    streams = [_stream(seed) for seed in range(3)]
    model = side_information()
    stacked = jax.tree.map(lambda *xs: np.stack(xs), *streams)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def batch(s):
        return jax.vmap(lambda one: _run(model, one))(s)

    states, completed = batch(stacked)
    batch(jax.tree.map(lambda x: x + 0 if x.dtype != bool else x, stacked))
    for index, stream in enumerate(streams):
        state, alone = jax.jit(lambda s: _run(model, s))(stream)
        np.testing.assert_allclose(
            np.asarray(completed[index]), np.asarray(alone), atol=1e-5
        )
        np.testing.assert_allclose(
            np.asarray(states.weights[index]), np.asarray(state.weights), atol=1e-5
        )


def test_recovers_a_planted_metric_that_similarity_misses():
    """Relevance weighs two of six dimensions: after enough queries the learned
    ranking of unscored candidates beats similarity order."""
    metric = np.array([3.0, 3.0, 0.0, 0.0, 0.0, 0.0])
    stream = _stream(2, metric=metric, noise=0.02)
    stream["mask"][:] = np.random.default_rng(0).random((T, N)) < 0.7
    model = side_information(l2=0.1)
    _, completed = jax.jit(lambda s: _run(model, s))(stream)
    late = slice(T // 2, T)

    def spearman(a, b):
        ra = np.argsort(np.argsort(a, axis=1), axis=1)
        rb = np.argsort(np.argsort(b, axis=1), axis=1)
        return np.mean([np.corrcoef(x, y)[0, 1] for x, y in zip(ra, rb, strict=True)])

    learned = spearman(np.asarray(completed)[late], stream["truth"][late])
    similarity = spearman(stream["similarity"][late], stream["truth"][late])
    assert learned > similarity + 0.2 and learned > 0.8


def test_bad_penalties_name_the_field():
    with pytest.raises(ValueError, match="l2"):
        side_information(l2=0.0)
    with pytest.raises(ValueError, match="memory_l2"):
        side_information(memory_l2=float("nan"))
    model = side_information()
    with pytest.raises(ValueError, match="query_embedding"):
        model.features(
            Query(jnp.arange(3, dtype=jnp.int32), jnp.ones(3), jnp.ones(3, bool)),
            jnp.ones(4),
            jnp.ones((5, 3)),
        )


def test_shared_start_keeps_the_shared_arrays_and_zeros_the_private_ones():
    model = side_information()
    source, _ = jax.jit(lambda s: _run(model, s))(_stream(4))
    assert float(jnp.sum(source.memory_count)) > 0 and int(source.count) == T
    start = shared_start(source, 25)
    for name in ("gram", "moment", "weights"):
        np.testing.assert_array_equal(
            np.asarray(getattr(start, name)), np.asarray(getattr(source, name))
        )
    assert start.memory_residual.shape == start.memory_count.shape == (25,)
    assert not np.any(np.asarray(start.memory_residual))
    assert not np.any(np.asarray(start.memory_count))
    assert float(start.offset_sum) == 0.0 and int(start.count) == 0
    assert jax.tree.map(lambda x: x.dtype, start) == jax.tree.map(
        lambda x: x.dtype, model.init(25, D)
    )
    # A pool of one source is that source's fit.
    pooled = model.pooled_start([source], 25)
    np.testing.assert_allclose(
        np.asarray(pooled.weights), np.asarray(source.weights), rtol=1e-6, atol=1e-7
    )


def test_pooling_two_sources_is_the_fit_of_one_stream_made_of_both():
    first, second = _stream(5), _stream(6)
    model = side_information(l2=0.5)
    run = jax.jit(lambda s, initial=None: _run(model, s, initial=initial))
    state_a, _ = run(first)
    state_b, _ = run(second)
    pooled = model.pooled_start([state_a, state_b], M)
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), state_a, state_b)
    np.testing.assert_array_equal(
        np.asarray(model.pooled_start(stacked, M).weights), np.asarray(pooled.weights)
    )
    gram_a, moment_a = _reference_normal_equations(first, T)
    gram_b, moment_b = _reference_normal_equations(second, T)
    gram, moment = gram_a + gram_b, moment_a + moment_b
    np.testing.assert_allclose(np.asarray(pooled.gram), gram, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.asarray(pooled.moment), moment, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(
        np.asarray(pooled.weights),
        np.linalg.solve(gram + 0.5 * np.eye(D + 1), moment),
        rtol=2e-3,
        atol=2e-4,
    )
    # The same as one scan over both streams, the second started from the first.
    chained, _ = run(second, shared_start(state_a, M))
    np.testing.assert_allclose(
        np.asarray(pooled.weights), np.asarray(chained.weights), rtol=1e-4, atol=1e-5
    )
    assert int(pooled.count) == 0 and not np.any(np.asarray(pooled.memory_count))


def test_a_shared_start_is_jittable_and_misuse_names_the_argument():
    model = side_information()
    sources = jax.vmap(lambda s: _run(model, s)[0])(
        jax.tree.map(lambda *xs: np.stack(xs), _stream(7), _stream(8))
    )
    start = jax.jit(model.pooled_start, static_argnums=1)(sources, 9)
    assert start.memory_count.shape == (9,)
    assert shared_start(model.init(M, D), np.int64(3)).memory_count.shape == (3,)
    with pytest.raises(ValueError, match="num_memories"):
        shared_start(model.init(M, D), 0)
    with pytest.raises(ValueError, match="num_memories"):
        shared_start(model.init(M, D), 2.5)
    with pytest.raises(ValueError, match="pooled_start"):
        shared_start(sources, M)
    with pytest.raises(ValueError, match="leading source axis"):
        model.pooled_start(model.init(M, D), M)
    with pytest.raises(ValueError, match="at least one"):
        model.pooled_start([], M)
