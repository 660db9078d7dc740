"""run_batch equals a Python loop of run; second calls do not recompile."""

from __future__ import annotations

import functools

import chex
import jax
import numpy as np
import pytest
from planted import config_for, planted_stream, stack_streams

import earm_jax as ej

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow


def test_run_batch_equals_loop_of_run():
    streams = [planted_stream(seed, num_queries=20, noise=0.05)[0] for seed in range(4)]
    config = config_for(streams[0])
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
    keys = jax.random.split(jax.random.key(0), len(streams))
    batch_states, batch_infos = jax.jit(functools.partial(ej.run_batch, solver))(
        keys, stack_streams(streams)
    )
    run = jax.jit(functools.partial(ej.run, solver))
    for i, stream in enumerate(streams):
        state, infos = run(keys[i], stream)
        for got, want in zip(
            jax.tree.leaves(batch_infos), jax.tree.leaves(infos), strict=False
        ):
            np.testing.assert_allclose(np.asarray(got)[i], np.asarray(want), atol=2e-5)
        for got, want in zip(
            jax.tree.leaves(batch_states), jax.tree.leaves(state), strict=False
        ):
            np.testing.assert_allclose(np.asarray(got)[i], np.asarray(want), atol=2e-5)


def test_second_call_with_new_data_does_not_recompile():
    first, _ = planted_stream(0, num_queries=12)
    second, _ = planted_stream(1, num_queries=12)
    config = config_for(first)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(key, stream):
        return ej.run(solver, key, stream)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def run_batch(keys, streams):
        return ej.run_batch(solver, keys, streams)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(key, state, query, scores_row):
        return solver.step(key, state, query, scores_row)

    run(jax.random.key(0), first)
    run(jax.random.key(1), second)  # raises if traced again
    keys = jax.random.split(jax.random.key(0), 2)
    run_batch(keys, stack_streams([first, second]))
    run_batch(keys, stack_streams([second, first]))
    state = solver.init(jax.random.key(0))
    for t in range(3):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], first.queries)
        state, _ = step(jax.random.key(t), state, query, first.scores[t])
    chex.clear_trace_counter()


def test_chunked_run_batch_equals_one_batch_and_a_loop_of_chunks():
    """Chunks of 2 over 5 streams (two whole chunks and a last one of 1)."""
    streams = [planted_stream(seed, num_queries=12, noise=0.05)[0] for seed in range(5)]
    config = config_for(streams[0])
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
    keys = jax.random.split(jax.random.key(3), len(streams))
    stacked = stack_streams(streams)
    batch = jax.jit(functools.partial(ej.run_batch, solver))
    chunked = jax.jit(functools.partial(ej.run_batch, solver, streams_per_chunk=2))
    whole_states, whole_infos = batch(keys, stacked)
    chunk_states, chunk_infos = chunked(keys, stacked)
    # Each chunk is the vmap of its own streams: equal to batching them alone.
    parts = [
        batch(keys[i : i + 2], stack_streams(streams[i : i + 2])) for i in (0, 2, 4)
    ]
    looped = jax.tree.map(lambda *leaves: np.concatenate(leaves), *parts)
    for got, want in zip(
        jax.tree.leaves((chunk_states, chunk_infos)),
        jax.tree.leaves(looped),
        strict=True,
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    for got, want in zip(
        jax.tree.leaves((chunk_states, chunk_infos)),
        jax.tree.leaves((whole_states, whole_infos)),
        strict=True,
    ):
        assert np.shape(got) == np.shape(want)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), atol=2e-5)


def test_streams_per_chunk_is_checked():
    stream, _ = planted_stream(0, num_queries=4)
    config = config_for(stream)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
    keys = jax.random.split(jax.random.key(0), 2)
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="streams_per_chunk"):
            ej.run_batch(
                solver, keys, stack_streams([stream, stream]), streams_per_chunk=bad
            )
    # Any integer type will do (traced shapes only, nothing compiled).
    shapes = jax.eval_shape(
        functools.partial(ej.run_batch, solver, streams_per_chunk=np.int64(1)),
        keys,
        stack_streams([stream, stream]),
    )
    assert shapes[1].scores.shape[0] == 2
