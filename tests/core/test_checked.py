"""``checked(solver)``: under ``jit`` a bad value raises a checkify error naming
the field; on good inputs the outputs are the unchecked solver's, bit for bit."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.experimental import checkify
from planted import config_for, planted_stream

import earm_jax as ej

POOL = 10


@functools.cache
def _setup():
    stream, _ = planted_stream(0, num_memories=30, num_queries=6, pool_size=POOL)
    config = config_for(stream, solver="incremental", refresh_rows=2)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=POOL, block_size=3))
    checked = ej.checked(solver)
    select = jax.jit(checkify.checkify(checked.select))
    observe = jax.jit(checkify.checkify(checked.observe))
    return stream, solver, checked, select, observe


def _query(stream: ej.Stream, t: int = 0) -> ej.Query:
    return jax.tree.map(lambda leaf: leaf[t], stream.queries)


def _error_message(error: checkify.Error) -> str:
    message = error.get()
    assert message is not None, "no check failed"
    with pytest.raises(checkify.JaxRuntimeError):
        error.throw()
    return message


@pytest.mark.parametrize("value", [-1, 30, 2**20])
def test_select_names_a_candidate_that_is_not_a_memory_id(value):
    stream, solver, _, select, _ = _setup()
    query = _query(stream)
    query = query._replace(candidates=query.candidates.at[4].set(value))
    error, _ = select(jax.random.key(0), solver.init(jax.random.key(0)), query)
    message = _error_message(error)
    assert f"query.candidates[4]={value} is not a memory id" in message
    assert "num_memories=30" in message


def test_select_names_a_non_finite_similarity():
    stream, solver, _, select, _ = _setup()
    query = _query(stream)
    query = query._replace(similarity=query.similarity.at[2].set(jnp.nan))
    error, _ = select(jax.random.key(0), solver.init(jax.random.key(0)), query)
    assert "query.similarity[2]=nan" in _error_message(error)


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1.5, -0.25])
def test_observe_names_an_observed_score_that_is_not_finite_or_in_range(bad):
    stream, solver, _, _, observe = _setup()
    values = np.asarray(stream.scores[0]).copy()
    values[7] = bad
    observation = ej.Observation(jnp.asarray(values), jnp.ones(POOL, bool))
    state = solver.init(jax.random.key(0))
    error, _ = observe(state, _query(stream), observation)
    assert f"observation.values[7]={bad}" in _error_message(error)


def test_a_bad_score_outside_the_mask_is_not_read():
    stream, solver, _, _, observe = _setup()
    values = np.asarray(stream.scores[0]).copy()
    values[7] = np.nan
    mask = np.arange(POOL) != 7
    observation = ej.Observation(jnp.asarray(values), jnp.asarray(mask))
    error, _ = observe(solver.init(jax.random.key(0)), _query(stream), observation)
    assert error.get() is None


def test_observe_names_a_mask_at_a_padding_candidate():
    stream, solver, _, _, observe = _setup()
    query = _query(stream)
    query = query._replace(valid=query.valid.at[9].set(False))
    observation = ej.Observation(stream.scores[0], jnp.ones(POOL, bool))
    error, _ = observe(solver.init(jax.random.key(0)), query, observation)
    assert "observation.mask[9] is True where query.valid is False" in (
        _error_message(error)
    )


def test_a_checked_run_under_jit_equals_the_unchecked_run_bitwise():
    stream, solver, checked, _, _ = _setup()
    key = jax.random.key(5)
    error, got = jax.jit(checkify.checkify(functools.partial(ej.run, checked)))(
        key, stream
    )
    want = jax.jit(functools.partial(ej.run, solver))(key, stream)
    assert error.get() is None
    for leaf, other in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        np.testing.assert_array_equal(np.asarray(other), np.asarray(leaf))
    # A bad score at an anchor of a later query fails the whole run, naming it.
    scores = np.asarray(stream.scores).copy()
    scores[4] = np.nan
    error, _ = jax.jit(checkify.checkify(functools.partial(ej.run, checked)))(
        key, stream._replace(scores=jnp.asarray(scores))
    )
    assert "observation.values[" in _error_message(error)


def test_checked_functions_refuse_jit_without_checkify():
    stream, solver, checked, _, _ = _setup()
    with pytest.raises(ValueError, match="checkify"):
        jax.jit(checked.select)(
            jax.random.key(0), solver.init(jax.random.key(0)), _query(stream)
        )


STREAMS = 5


def _streams_with_a_bad_id_in(bad_stream: int) -> ej.Stream:
    stream, _, _, _, _ = _setup()
    streams = jax.tree.map(lambda leaf: jnp.stack([leaf] * STREAMS), stream)
    candidates = streams.queries.candidates.at[bad_stream, 2, 4].set(99)
    return streams._replace(queries=streams.queries._replace(candidates=candidates))


def test_under_jit_of_vmap_the_message_names_the_failed_stream():
    # checkify outside the vmap keeps only the first failure, so without the
    # stream's index in the message the user could not tell which one it was.
    streams = _streams_with_a_bad_id_in(3)
    _, solver, checked, _, _ = _setup()
    keys = jax.random.split(jax.random.key(0), STREAMS)
    select = jax.vmap(checked.select, axis_name=ej.STREAM_AXIS)
    states = jax.vmap(solver.init)(keys)
    queries = jax.tree.map(lambda leaf: leaf[:, 2], streams.queries)
    error, _ = checkify.checkify(jax.jit(select))(keys, states, queries)
    message = _error_message(error)
    assert message.startswith("stream 3: query.candidates[4]=99 is not a memory id")


def test_run_batch_names_the_failed_stream():
    streams = _streams_with_a_bad_id_in(3)
    _, _, checked, _, _ = _setup()
    keys = jax.random.split(jax.random.key(0), STREAMS)
    run_batch = jax.jit(checkify.checkify(functools.partial(ej.run_batch, checked)))
    error, _ = run_batch(keys, streams)
    assert _error_message(error).startswith("stream 3: query.candidates[4]=99")
    # Good streams: no error, and the checked batch equals the unchecked one.
    stream, solver, _, _, _ = _setup()
    good = jax.tree.map(lambda leaf: jnp.stack([leaf] * STREAMS), stream)
    error, got = run_batch(keys, good)
    assert error.get() is None
    want = jax.jit(functools.partial(ej.run_batch, solver))(keys, good)
    for leaf, other in zip(jax.tree.leaves(want), jax.tree.leaves(got), strict=True):
        np.testing.assert_array_equal(np.asarray(other), np.asarray(leaf))


def test_outside_a_vmap_over_streams_the_message_names_no_stream():
    stream, solver, _, select, _ = _setup()
    query = _query(stream)
    query = query._replace(candidates=query.candidates.at[4].set(99))
    error, _ = select(jax.random.key(0), solver.init(jax.random.key(0)), query)
    assert _error_message(error).startswith("query.candidates[4]=99")


@settings(max_examples=25, deadline=None)
@given(pair=st.lists(st.integers(0, POOL - 1), min_size=2, max_size=2, unique=True))
def test_select_names_a_memory_listed_twice_under_jit(pair):
    first, second = sorted(pair)
    stream, solver, _, select, _ = _setup()
    query = _query(stream)._replace(valid=jnp.ones(POOL, bool))
    repeated = query.candidates[first]
    query = query._replace(candidates=query.candidates.at[second].set(repeated))
    state = solver.init(jax.random.key(0))
    error, _ = select(jax.random.key(0), state, query)
    assert _error_message(error).startswith(
        f"query.candidates holds memory {int(repeated)} twice (positions {first} "
        f"and {second}): a pool lists each memory once"
    )
    # At padding a repeat is no memory: allowed, as on the host.
    padded = query._replace(valid=query.valid.at[second].set(False))
    error, _ = select(jax.random.key(0), state, padded)
    assert error.get() is None


def test_a_repeat_under_a_vmap_over_streams_names_the_stream():
    stream, solver, checked, _, _ = _setup()
    streams = jax.tree.map(lambda leaf: jnp.stack([leaf] * STREAMS), stream)
    candidates = streams.queries.candidates
    candidates = candidates.at[1, 2, 6].set(candidates[1, 2, 0])
    queries = jax.tree.map(
        lambda leaf: leaf[:, 2], streams.queries._replace(candidates=candidates)
    )
    queries = queries._replace(valid=jnp.ones_like(queries.valid))
    keys = jax.random.split(jax.random.key(0), STREAMS)
    select = jax.vmap(checked.select, axis_name=ej.STREAM_AXIS)
    states = jax.vmap(solver.init)(keys)
    error, _ = checkify.checkify(jax.jit(select))(keys, states, queries)
    assert _error_message(error).startswith(
        f"stream 1: query.candidates holds memory {int(candidates[1, 2, 0])} "
        "twice (positions 0 and 6)"
    )
