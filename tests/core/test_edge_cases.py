"""Edge cases: no NaN anywhere, and bad input rejected before any state exists."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from planted import config_for, planted_stream

import earm_jax as ej
from earm_jax.core import model as solver_model
from earm_jax.policies import constant_budget, stratified_anchors


def _policy(budget: int) -> ej.Policy:
    return ej.AnchorPolicy(
        budget=constant_budget(budget), anchors=stratified_anchors(0.1)
    )


def _run(stream, policy, **overrides):
    config = config_for(stream, **overrides)
    solver = ej.online_solver(config, policy)
    return jax.jit(functools.partial(ej.run, solver))(jax.random.key(0), stream)


def _all_finite(tree) -> bool:
    return all(
        bool(np.all(np.isfinite(np.asarray(leaf))))
        for leaf in jax.tree.leaves(tree)
        if jnp.issubdtype(jnp.result_type(leaf), jnp.floating)
    )


def test_zero_anchors_predict_from_biases_with_prior_query_bias():
    stream, _ = planted_stream(0, num_queries=12)
    config = config_for(stream)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
    state, _ = jax.jit(functools.partial(ej.run, solver))(
        jax.random.key(0),
        jax.tree.map(lambda x: x[:6], stream)._replace(insert_time=stream.insert_time),
    )
    query = jax.tree.map(lambda leaf: leaf[6], stream.queries)
    nothing = ej.Observation(
        jnp.zeros(config.pool_size), jnp.zeros(config.pool_size, bool)
    )
    new_state, info = jax.jit(solver.observe)(state, query, nothing)
    params = solver_model.parameters(new_state)
    expected = (
        params.global_mean + params.memory_bias[query.candidates]
    )  # c_t = 0, v_t = 0
    np.testing.assert_allclose(
        np.asarray(info.completed), np.asarray(expected), atol=1e-6
    )
    assert float(new_state.query_bias[6]) == 0.0
    assert not bool(info.anchors.any()) and int(info.dropped) == 0
    assert _all_finite(new_state) and _all_finite(info.completed)


def test_semantic_policy_runs_with_no_observation_at_all():
    stream, _ = planted_stream(1, num_queries=10)
    state, infos = _run(stream, ej.semantic_policy())
    assert int(infos.anchors.sum()) == 0 and _all_finite(state)
    np.testing.assert_allclose(np.asarray(infos.completed), 0.0)


def test_every_candidate_anchored():
    stream, _ = planted_stream(2, num_queries=10)
    _, infos = _run(stream, ej.full_policy(pool_size=20))
    assert bool(infos.anchors.all())
    np.testing.assert_array_equal(np.asarray(infos.scores), np.asarray(stream.scores))


def test_padding_candidates_are_never_selected_scored_or_used():
    stream, _ = planted_stream(3, num_queries=12)
    valid = np.asarray(stream.queries.valid).copy()
    valid[:, -5:] = False
    scores = np.asarray(stream.scores).copy()
    scores[:, -5:] = np.nan  # would poison the fit if it were ever read
    padded = stream._replace(
        queries=stream.queries._replace(valid=jnp.asarray(valid)),
        scores=jnp.asarray(scores),
    )
    state, infos = _run(padded, ej.full_policy(pool_size=20))
    assert not bool(infos.anchors[:, -5:].any())
    assert bool(np.all(np.isneginf(np.asarray(infos.scores)[:, -5:])))
    assert _all_finite(state) and _all_finite(infos.completed)
    assert int(state.memory_count.sum()) == 12 * 15


def test_memories_not_yet_inserted_are_unusable():
    stream, _ = planted_stream(4, num_queries=20, insert_spread=True)
    # Offer every candidate, including ones not inserted yet at that query.
    everything = np.ones_like(np.asarray(stream.queries.valid))
    stream = stream._replace(
        queries=stream.queries._replace(valid=jnp.asarray(everything))
    )
    num_memories = stream.insert_time.shape[0]
    late = np.zeros(num_memories, np.int32)
    late[:] = 15
    rng = np.random.default_rng(0)
    candidates = np.stack(
        [rng.choice(num_memories, 20, replace=False) for _ in range(20)]
    )
    stream = stream._replace(
        insert_time=jnp.asarray(late),
        queries=stream.queries._replace(candidates=jnp.asarray(candidates, jnp.int32)),
    )
    state, infos = _run(stream, ej.full_policy(pool_size=20))
    anchors = np.asarray(infos.anchors)
    assert not anchors[:15].any() and anchors[15:].all()
    assert bool(np.all(np.isneginf(np.asarray(infos.scores)[:15])))
    assert _all_finite(state)


def test_budget_larger_than_the_pool_scores_each_candidate_once():
    stream, _ = planted_stream(5, num_queries=8)
    _, infos = _run(stream, _policy(1000), max_budget=20)
    assert bool(infos.anchors.all())
    assert np.asarray(infos.budget).max() == 20


def test_rank_zero_is_the_bias_only_model():
    stream, _ = planted_stream(6, num_queries=20, noise=0.1)
    state, infos = _run(stream, ej.paper_policy(pool_size=20), rank=0)
    assert state.memory_factors.shape == (stream.insert_time.shape[0], 0)
    assert _all_finite(state) and _all_finite(infos.completed)


def test_memory_never_observed_keeps_the_bias_only_prediction():
    stream, _ = planted_stream(7, num_queries=15)
    state, infos = _run(stream, ej.paper_policy(pool_size=20))
    never = np.asarray(state.memory_count) == 0
    assert never.any()
    assert np.all(np.asarray(state.memory_bias)[never] == 0.0)
    assert _all_finite(state)


def test_observations_beyond_capacity_are_counted_as_dropped_not_hidden():
    stream, _ = planted_stream(8, num_queries=4)
    config = config_for(stream, capacity=2)
    solver = ej.online_solver(config, ej.full_policy(pool_size=20))
    state = solver.init(jax.random.key(0))
    step = jax.jit(solver.step)
    dropped = []
    for t in range(4):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], stream.queries)
        state, info = step(jax.random.key(t), state, query, stream.scores[t])
        dropped.append(int(info.dropped))
    assert dropped == [0, 0, 20, 20]
    assert _all_finite(state)


@pytest.mark.parametrize(
    "field,bad,match",
    [
        (
            "candidates",
            jnp.zeros(19, jnp.int32),
            r"query\.candidates must have shape \(20,\)",
        ),
        (
            "candidates",
            jnp.zeros(20, jnp.float32),
            r"query\.candidates must have a integer",
        ),
        (
            "similarity",
            jnp.zeros(20, jnp.int32),
            r"query\.similarity must have a floating",
        ),
        ("valid", jnp.ones(20, jnp.int32), r"query\.valid must have a bool"),
    ],
)
def test_wrong_query_shapes_and_dtypes_raise_naming_the_field(field, bad, match):
    stream, _ = planted_stream(9, num_queries=3)
    config = config_for(stream)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=20))
    state = solver.init(jax.random.key(0))
    query = jax.tree.map(lambda leaf: leaf[0], stream.queries)._replace(**{field: bad})
    with pytest.raises(ValueError, match=match):
        jax.jit(solver.select)(jax.random.key(0), state, query)
    with pytest.raises(ValueError, match=match):
        solver.observe(state, query, ej.Observation(jnp.zeros(20), jnp.zeros(20, bool)))


def test_wrong_observation_and_stream_raise_naming_the_field():
    stream, _ = planted_stream(9, num_queries=3)
    config = config_for(stream)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=20))
    state = solver.init(jax.random.key(0))
    query = jax.tree.map(lambda leaf: leaf[0], stream.queries)
    with pytest.raises(ValueError, match=r"observation\.values must have shape"):
        solver.observe(state, query, ej.Observation(jnp.zeros(7), jnp.zeros(20, bool)))
    with pytest.raises(ValueError, match=r"observation\.mask must have a bool"):
        solver.observe(state, query, ej.Observation(jnp.zeros(20), jnp.zeros(20)))
    with pytest.raises(ValueError, match=r"capacity"):
        ej.run(
            solver,
            jax.random.key(0),
            jax.tree.map(lambda x: np.concatenate([x] * 2), stream),
        )
    with pytest.raises(ValueError, match=r"stream\.insert_time must have shape"):
        ej.run(
            solver,
            jax.random.key(0),
            stream._replace(insert_time=jnp.zeros(3, jnp.int32)),
        )
    with pytest.raises(ValueError, match=r"insert_time must have shape"):
        solver.init(jax.random.key(0), jnp.zeros(3, jnp.int32))


def test_a_query_of_the_wrong_type_names_the_type_it_must_be():
    stream, _ = planted_stream(9, num_queries=3)
    solver = ej.online_solver(config_for(stream), ej.paper_policy(pool_size=20))
    state = solver.init(jax.random.key(0))
    query = jax.tree.map(lambda leaf: leaf[0], stream.queries)
    as_dict = query._asdict()
    with pytest.raises(TypeError, match=r"query must be an earm_jax\.Query, got dict"):
        solver.select(jax.random.key(0), state, as_dict)
    with pytest.raises(
        TypeError, match=r"observation must be an earm_jax\.Observation, got tuple"
    ):
        solver.observe(state, query, (jnp.zeros(20), jnp.zeros(20, bool)))


@pytest.mark.parametrize(
    "overrides,match",
    [
        ({"rank": -1}, "SolverConfig.rank"),
        ({"max_budget": 21}, "SolverConfig.max_budget"),
        ({"l2": 0.0}, "SolverConfig.l2"),
        ({"solver": "sgd"}, "SolverConfig.solver"),
        ({"capacity": 0}, "SolverConfig.capacity"),
        ({"num_memories": 2.5}, "SolverConfig.num_memories"),
    ],
)
def test_bad_config_raises_naming_the_field(overrides, match):
    stream, _ = planted_stream(9, num_queries=3)
    with pytest.raises(ValueError, match=match):
        ej.online_solver(config_for(stream, **overrides), ej.paper_policy(pool_size=20))
