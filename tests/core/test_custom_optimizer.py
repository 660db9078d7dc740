"""A custom optax optimizer given to ``gradient`` is the one that runs.

Its result differs from the default Adam's, one query's refit equals one step
of that optimizer taken by hand, and its state is the solver's carry.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import optax
import pytest
from planted import planted_stream

import earm_jax as ej
from earm_jax.core.model import loss, parameters

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow

POOL = 20
# Momentum, so the optimizer has a state worth carrying; a step within the
# loss's curvature (see test_algorithm_contract.py).
CLIPPED_SGD = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(2e-3, momentum=0.5))


def _solver(algorithm: ej.SolverAlgorithm, capacity: int) -> ej.OnlineSolver:
    return ej.compose_solver(
        model=ej.LowRankModel(num_memories=60, rank=2),
        history=ej.RowHistory(capacity=capacity, pool_size=POOL),
        algorithm=algorithm,
        policy=ej.paper_policy(pool_size=POOL, block_size=4),
    )


def test_a_custom_optimizer_changes_the_result_against_adam():
    stream, _ = planted_stream(0, num_queries=8, pool_size=POOL, noise=0.05)
    key = jax.random.key(0)
    outputs = {}
    for name, algorithm in (
        ("adam", ej.gradient(steps=3)),
        ("clipped_sgd", ej.gradient(CLIPPED_SGD, steps=3)),
    ):
        solver = _solver(algorithm, capacity=8)
        outputs[name] = jax.jit(functools.partial(ej.run, solver))(key, stream)
    adam_state, adam_infos = outputs["adam"]
    sgd_state, sgd_infos = outputs["clipped_sgd"]
    # The first query has no history: nothing to fit, the same completion.
    np.testing.assert_array_equal(adam_infos.completed[0], sgd_infos.completed[0])
    assert not np.allclose(adam_infos.completed[1:], sgd_infos.completed[1:])
    # Each carries its own optimizer's state.
    params = parameters(adam_state)
    assert jax.tree.structure(sgd_state.solver_extras.optimizer_state) == (
        jax.tree.structure(CLIPPED_SGD.init(params))
    )
    assert jax.tree.structure(adam_state.solver_extras.optimizer_state) == (
        jax.tree.structure(optax.adam(0.05).init(params))
    )


def test_one_refit_is_one_step_of_the_optimizer_by_hand():
    stream, _ = planted_stream(1, num_queries=3, pool_size=POOL, noise=0.05)
    solver = _solver(ej.gradient(CLIPPED_SGD, steps=1), capacity=3)
    step = jax.jit(solver.step)
    state = solver.init(jax.random.key(0))
    for t in range(2):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], stream.queries)
        state, _ = step(jax.random.key(t), state, query, stream.scores[t])
    l2 = solver.config.l2

    @jax.jit
    def by_hand(state):
        params = parameters(state)
        grads = jax.grad(loss)(params, state, l2)
        opt_state = state.solver_extras.optimizer_state
        updates, opt_state = CLIPPED_SGD.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state

    want_params, want_opt_state = by_hand(state)
    query = jax.tree.map(lambda leaf: leaf[2], stream.queries)
    new_state, _ = step(jax.random.key(2), state, query, stream.scores[2])
    # The momentum is carried: after two refits it is not zero.
    assert np.abs(np.asarray(want_opt_state[1][0].trace.memory_bias)).max() > 0
    tight = dict(rtol=1e-6, atol=1e-7)
    for field in ("global_mean", "memory_bias", "memory_factors"):
        np.testing.assert_allclose(
            getattr(new_state, field), getattr(want_params, field), **tight
        )
    # Past query slots are refit too; slot 2 is the new query's fold-in.
    np.testing.assert_allclose(
        new_state.query_bias[:2], want_params.query_bias[:2], **tight
    )
    for got, want in zip(
        jax.tree.leaves(new_state.solver_extras.optimizer_state),
        jax.tree.leaves(want_opt_state),
        strict=True,
    ):
        np.testing.assert_allclose(got, want, **tight)
