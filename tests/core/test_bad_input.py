"""Bad input at the JAX API: refused on the host, naming the field, before any
state exists; what only a traced value shows is documented and tested as such."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import earm_jax as ej
from earm_jax.core.config import InputTypeError, check_observation_values

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
    # Also a ValueError: one ``except ValueError`` catches every bad input.
    assert issubclass(InputTypeError, ValueError)


def test_swapped_observe_arguments_raise_naming_the_argument():
    solver, state = _solver()
    observation = _observation(np.full(POOL, 0.5))
    with pytest.raises(TypeError, match=r"observe: state must be"):
        solver.observe(_query(), state, observation)
    with pytest.raises(
        TypeError, match=r"query must be an earm_jax\.Query, got Observation"
    ):
        solver.observe(state, observation, _query())
