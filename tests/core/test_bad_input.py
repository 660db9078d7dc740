"""Bad input at the JAX API: refused on the host, naming the field, before any
state exists; what only a traced value shows is documented and tested as such."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from planted import config_for, planted_stream, stack_streams

import earm_jax as ej
from earm_jax.core.config import (
    InputTypeError,
    InputValueError,
    check_observation_values,
)

POOL = 8


def _solver(**overrides):
    config = ej.SolverConfig(
        num_memories=30,
        capacity=4,
        pool_size=POOL,
        max_budget=POOL,
        rank=2,
        **overrides,
    )
    solver = ej.online_solver(config, ej.paper_policy(pool_size=POOL))
    return solver, solver.init(jax.random.key(0))


def _query(candidates=None):
    if candidates is None:
        candidates = np.arange(POOL)
    return ej.Query(
        jnp.asarray(candidates, jnp.int32),
        jnp.linspace(1, 0, POOL),
        jnp.ones(POOL, bool),
    )


def _observation(values):
    return ej.Observation(jnp.asarray(values, jnp.float32), jnp.ones(POOL, bool))


def test_a_candidate_id_beyond_the_memories_is_refused_naming_it():
    solver, state = _solver()
    ids = np.arange(POOL)
    ids[3] = 30  # num_memories = 30: one past the last row
    query = _query(ids)
    with pytest.raises(
        ValueError, match=r"query\.candidates\[3\]=30 .*num_memories=30"
    ):
        solver.select(jax.random.key(1), state, query)
    with pytest.raises(ValueError, match=r"query\.candidates\[3\]=30"):
        solver.observe(state, query, _observation(np.full(POOL, 0.5)))


def test_an_out_of_range_id_at_padding_is_allowed():
    solver, state = _solver()
    ids = np.arange(POOL)
    ids[-1] = -1
    query = _query(ids)._replace(valid=jnp.arange(POOL) < POOL - 1)
    state, info = solver.observe(state, query, _observation(np.full(POOL, 0.5)))
    assert int(state.count) == 1
    assert np.isneginf(np.asarray(info.scores)[-1])


@pytest.mark.parametrize("bad", [5.0, -0.5, np.nan, np.inf])
def test_an_observed_score_outside_zero_one_or_not_finite_is_refused(bad):
    solver, state = _solver()
    values = np.full(POOL, 0.5)
    values[2] = bad
    with pytest.raises(ValueError, match=r"observation\.values\[2\]=.*\[0, 1\]"):
        solver.observe(state, _query(), _observation(values))


def test_a_bad_value_outside_the_mask_is_not_read():
    solver, state = _solver()
    values = np.full(POOL, 0.5)
    values[2] = np.nan  # a failed pair, left out of the mask
    mask = np.arange(POOL) != 2
    state, info = solver.observe(
        state, _query(), ej.Observation(jnp.asarray(values, jnp.float32), mask)
    )
    assert not bool(info.anchors[2])
    assert np.isfinite(np.asarray(info.scores)).all()


def test_under_jit_values_are_not_checked_but_the_host_check_can_be_called():
    solver, state = _solver()
    values = np.full(POOL, 0.5)
    values[2] = np.nan
    observation = _observation(values)
    # Traced values cannot raise: a non-finite score is treated as unobserved.
    _, info = jax.jit(solver.observe)(state, _query(), observation)
    assert not bool(info.anchors[2])
    with pytest.raises(ValueError, match=r"observation\.values\[2\]=nan"):
        check_observation_values(observation)


def test_a_policy_built_for_another_pool_size_is_refused():
    config = ej.SolverConfig(num_memories=30, capacity=4, pool_size=20, max_budget=20)
    with pytest.raises(ValueError, match=r"Policy\.pool_size=50 .*pool_size=20"):
        ej.online_solver(config, ej.paper_policy(pool_size=50))
    with pytest.raises(ValueError, match=r"Policy\.pool_size=50"):
        ej.online_solver(config, ej.EarmSettings().policy(pool_size=50))
    # A schedule of the caller's own is not tied to a pool size.
    own = ej.paper_policy(pool_size=50, budget=lambda count: jnp.int32(5))
    ej.online_solver(config, own)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_swapped_select_arguments_raise_a_type_error_naming_the_argument(jit):
    solver, state = _solver()
    select = jax.jit(solver.select) if jit else solver.select
    with pytest.raises(TypeError, match=r"select: key must be a PRNG key"):
        select(state, jax.random.key(1), _query())
    with pytest.raises(
        TypeError, match=r"select: state must be an earm_jax\.SolverState"
    ):
        select(jax.random.key(1), _query(), state)


def test_a_wrong_type_and_a_wrong_value_are_different_exceptions():
    solver, state = _solver()
    with pytest.raises(InputTypeError) as wrong_type:
        solver.select(state, jax.random.key(1), _query())
    ids = np.arange(POOL)
    ids[3] = 30
    with pytest.raises(InputValueError) as wrong_value:
        solver.select(jax.random.key(1), state, _query(ids))
    # One kind each: ``except ValueError`` no longer catches a swapped argument.
    assert not isinstance(wrong_type.value, ValueError)
    assert not isinstance(wrong_value.value, TypeError)
    # Both are refusals of input: one ``except ej.InputError`` catches them.
    assert isinstance(wrong_type.value, ej.InputError)
    assert isinstance(wrong_value.value, ej.InputError)


def test_swapped_observe_arguments_raise_naming_the_argument():
    solver, state = _solver()
    observation = _observation(np.full(POOL, 0.5))
    with pytest.raises(TypeError, match=r"observe: state must be"):
        solver.observe(_query(), state, observation)
    with pytest.raises(
        TypeError, match=r"query must be an earm_jax\.Query, got Observation"
    ):
        solver.observe(state, observation, _query())


def test_a_memory_twice_in_one_pool_is_refused_naming_the_positions():
    solver, state = _solver()
    ids = np.arange(POOL)
    ids[5] = 2
    with pytest.raises(ValueError, match=r"memory 2 twice \(positions 2 and 5\)"):
        solver.select(jax.random.key(1), state, _query(ids))
    # At padding a repeat is allowed: padding is not a memory.
    valid = np.ones(POOL, bool)
    valid[5] = False
    padded = ej.Query(jnp.asarray(ids, jnp.int32), jnp.linspace(1, 0, POOL), valid)
    solver.select(jax.random.key(1), state, padded)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_similarity_is_refused_naming_it(bad):
    solver, state = _solver()
    similarity = np.linspace(1, 0, POOL)
    similarity[4] = bad
    query = ej.Query(
        jnp.arange(POOL, dtype=jnp.int32),
        jnp.asarray(similarity, jnp.float32),
        jnp.ones(POOL, bool),
    )
    with pytest.raises(ValueError, match=r"query\.similarity\[4\]=.* not finite"):
        solver.select(jax.random.key(1), state, query)
    with pytest.raises(ValueError, match=r"query\.similarity\[4\]"):
        solver.observe(state, query, _observation(np.full(POOL, 0.5)))
    # -inf at padding is how LoCoMo's pools are padded: allowed.
    valid = np.ones(POOL, bool)
    valid[4] = False
    solver.select(jax.random.key(1), state, query._replace(valid=jnp.asarray(valid)))


def test_python_lists_in_a_query_are_refused_with_the_fix():
    solver, state = _solver()
    query = ej.Query(list(range(POOL)), jnp.linspace(1, 0, POOL), jnp.ones(POOL, bool))
    with pytest.raises(TypeError, match=r"query\.candidates must be an array.*list"):
        solver.select(jax.random.key(1), state, query)


def test_an_int_budget_is_a_constant_budget_and_refused_above_the_pool():
    policy = ej.paper_policy(pool_size=POOL, budget=3)
    assert int(policy.budget(0)) == int(policy.budget(500)) == 3
    assert policy.pool_size == POOL
    solver = ej.online_solver(
        ej.SolverConfig(
            num_memories=30, capacity=4, pool_size=POOL, max_budget=POOL, rank=2
        ),
        policy,
    )
    state = solver.init(jax.random.key(0))
    assert int(solver.select(jax.random.key(1), state, _query()).sum()) == 3
    with pytest.raises(ValueError, match=r"budget must be in \[0, pool_size=8\]"):
        ej.top_similarity_policy(pool_size=POOL, budget=POOL + 1)
    with pytest.raises(TypeError, match="budget must be a schedule"):
        ej.paper_policy(pool_size=POOL, budget="ten")
    with pytest.raises(TypeError, match="Policy.budget must be a function"):
        ej.online_solver(
            ej.SolverConfig(
                num_memories=30, capacity=4, pool_size=POOL, max_budget=POOL
            ),
            ej.AnchorPolicy(budget=10, anchors=policy.anchors),
        )


@settings(max_examples=25, deadline=None)
@given(pair=st.lists(st.integers(0, POOL - 1), min_size=2, max_size=2, unique=True))
def test_a_memory_twice_anywhere_in_the_pool_is_refused_before_select(pair):
    first, second = sorted(pair)
    solver, state = _solver()
    ids = np.arange(POOL)
    ids[second] = ids[first]
    with pytest.raises(
        InputValueError,
        match=rf"memory {first} twice \(positions {first} and {second}\)",
    ):
        solver.step(jax.random.key(1), state, _query(ids), np.full(POOL, 0.5))


def _stream(num_queries=3):
    stream, _ = planted_stream(4, num_memories=30, num_queries=num_queries)
    return stream, ej.online_solver(
        config_for(stream), ej.paper_policy(pool_size=stream.scores.shape[1])
    )


def _spoil(stream, field, t, position, value):
    leaf = np.asarray(getattr(stream.queries, field)).copy()
    leaf[(..., t, position)] = value
    return stream._replace(queries=stream.queries._replace(**{field: leaf}))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_an_eager_run_refuses_a_non_finite_similarity_naming_the_query(bad):
    stream, solver = _stream()
    spoiled = _spoil(stream, "similarity", 2, 5, bad)
    with pytest.raises(
        InputValueError, match=r"^query 2: query\.similarity\[5\]=.* not finite"
    ):
        ej.run(solver, jax.random.key(0), spoiled)


def test_an_eager_run_batch_refuses_a_repeat_naming_the_stream_and_query():
    stream, solver = _stream()
    other = _spoil(
        stream, "candidates", 1, 7, np.asarray(stream.queries.candidates)[1, 3]
    )
    streams = stack_streams([stream, other])
    with pytest.raises(
        InputValueError,
        match=r"^stream 1, query 1: query\.candidates holds memory \d+ twice "
        r"\(positions 3 and 7\)",
    ):
        ej.run_batch(solver, jax.random.split(jax.random.key(0), 2), streams)
    # Under jit the values are tracers: the host check stands aside
    # (checked() is the traced check).
    jax.jit(lambda keys, s: ej.run_batch(solver, keys, s))(
        jax.random.split(jax.random.key(0), 2), streams
    )


def test_a_numpy_integer_budget_is_a_constant_budget_too():
    policy = ej.paper_policy(pool_size=POOL, budget=np.int64(3))
    assert int(policy.budget(0)) == int(policy.budget(500)) == 3
    assert int(ej.policies.constant_budget(np.int32(4))(7)) == 4
    with pytest.raises(InputValueError, match=r"budget must be in \[0, pool_size=8\]"):
        ej.paper_policy(pool_size=POOL, budget=np.int64(POOL + 1))
    with pytest.raises(InputValueError, match="budget must be an int >= 0"):
        ej.policies.constant_budget(True)


def test_a_schedule_above_the_pool_is_clipped_to_max_budget_and_reported():
    # A schedule (unlike an int budget) is not refused: the solver clips it to
    # max_budget at every query, StepInfo.budget says so, and the anchors are
    # further limited to the usable candidates.
    config = ej.SolverConfig(
        num_memories=30, capacity=4, pool_size=POOL, max_budget=5, rank=2
    )
    policy = ej.paper_policy(pool_size=POOL, budget=ej.policies.constant_budget(50))
    solver = ej.online_solver(config, policy)
    state = solver.init(jax.random.key(0))
    _, info = solver.step(jax.random.key(1), state, _query(), np.full(POOL, 0.5))
    assert int(info.budget) == 5
    assert int(info.anchors.sum()) == 5
    few = _query()._replace(valid=jnp.arange(POOL) < 3)
    _, info = solver.step(jax.random.key(1), state, few, np.full(POOL, 0.5))
    assert int(info.budget) == 5
    assert int(info.anchors.sum()) == 3
