"""The contract every factory-built algorithm keeps, in one parametrised suite.

Causality, ``run_batch`` equal to a loop of ``run``, no retrace on a second
call, and the completion of a query equal to the float64 NumPy fold-in on the
algorithm's refit parameters (tests/reference_numpy.py).
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import optax
import pytest
import reference_numpy as ref
from planted import perturb_future, planted_stream, stack_streams

import earm_jax as ej
from earm_jax.core.model import effective_memory_factors, parameters
from earm_jax.core.online import usable_candidates

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow

NUM_QUERIES = 14

# Few sweeps/steps: the contract does not depend on how far a refit goes. The
# custom optimizer's step stays below 2 / curvature of the loss (a sum over a
# few hundred entries): a larger plain SGD step oscillates and amplifies the
# rounding that differs between vmap and a loop far beyond any tolerance.
CLIPPED_SGD = optax.chain(optax.clip_by_global_norm(1.0), optax.sgd(2e-3, momentum=0.5))
ALGORITHMS = {
    "als": lambda: ej.als(sweeps=2),
    "incremental": lambda: ej.incremental(refresh_rows=3),
    "gradient_adam": lambda: ej.gradient(steps=4),
    "gradient_clipped_sgd": lambda: ej.gradient(CLIPPED_SGD, steps=4),
}


def _stream(seed: int) -> ej.Stream:
    return planted_stream(seed, num_queries=NUM_QUERIES, noise=0.05)[0]


@functools.cache
def _solver(name: str) -> ej.OnlineSolver:
    stream = _stream(0)
    num_memories = int(stream.insert_time.shape[0])
    pool_size = int(stream.scores.shape[1])
    return ej.compose_solver(
        model=ej.LowRankModel(num_memories=num_memories, rank=2),
        history=ej.RowHistory(capacity=NUM_QUERIES, pool_size=pool_size),
        algorithm=ALGORITHMS[name](),
        policy=ej.paper_policy(pool_size=pool_size, block_size=4),
    )


@functools.cache
def _jitted(name: str):
    """One compiled ``run`` and ``step`` per algorithm, shared by the tests."""
    solver = _solver(name)
    return jax.jit(functools.partial(ej.run, solver)), jax.jit(solver.step)


@pytest.fixture(params=sorted(ALGORITHMS))
def name(request) -> str:
    return request.param


@pytest.mark.parametrize("cut", [3, 9])
def test_later_queries_never_change_earlier_step_infos(name, cut):
    run, _ = _jitted(name)
    stream = _stream(0)
    _, infos = run(jax.random.key(0), stream)
    _, perturbed = run(jax.random.key(0), perturb_future(stream, cut, seed=cut))
    for field in infos._fields:
        np.testing.assert_array_equal(
            np.asarray(getattr(infos, field))[: cut + 1],
            np.asarray(getattr(perturbed, field))[: cut + 1],
            err_msg=field,
        )
    assert not np.array_equal(
        np.asarray(infos.scores)[cut + 1 :], np.asarray(perturbed.scores)[cut + 1 :]
    )


def test_run_batch_equals_a_loop_of_run(name):
    run, _ = _jitted(name)
    streams = [_stream(seed) for seed in range(3)]
    keys = jax.random.split(jax.random.key(1), len(streams))
    batch = jax.jit(functools.partial(ej.run_batch, _solver(name)))
    batch_outputs = batch(keys, stack_streams(streams))
    for i, stream in enumerate(streams):
        one = run(keys[i], stream)
        for got, want in zip(
            jax.tree.leaves(batch_outputs), jax.tree.leaves(one), strict=True
        ):
            np.testing.assert_allclose(np.asarray(got)[i], np.asarray(want), atol=2e-5)


def test_second_call_with_new_data_does_not_retrace(name):
    run, step = _jitted(name)
    solver = _solver(name)
    first, second = _stream(0), _stream(1)
    run(jax.random.key(0), first)
    run(jax.random.key(1), second)
    assert run._cache_size() == 1
    state = solver.init(jax.random.key(0))
    for t in range(3):
        stream = first if t % 2 else second
        query = jax.tree.map(lambda leaf, t=t: leaf[t], stream.queries)
        state, _ = step(jax.random.key(t), state, query, stream.scores[t])
    assert step._cache_size() == 1


def test_completion_is_the_float64_fold_in_on_the_refit_parameters(name):
    """Query ``t``'s completion: the reference ridge fold-in of its anchors on
    the parameters the algorithm's ``refit`` returns for the history ``< t``."""
    _, step = _jitted(name)
    solver = _solver(name)
    config, algorithm = solver.config, solver.algorithm
    stream = _stream(2)
    state = solver.init(jax.random.key(0))
    for t in range(NUM_QUERIES):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], stream.queries)
        before = state
        state, info = step(jax.random.key(t), state, query, stream.scores[t])
    params, _ = jax.jit(algorithm.refit, static_argnums=3)(
        parameters(before), before.solver_extras, before, config
    )
    factors = effective_memory_factors(params.memory_factors, before.memory_count)
    mean = float(params.global_mean)
    bias = np.asarray(params.memory_bias, np.float64)
    factors = np.asarray(factors, np.float64)
    candidates = np.asarray(query.candidates)
    observed = np.asarray(info.anchors)
    assert 0 < observed.sum() < observed.size  # a budget below the pool
    scores = np.asarray(stream.scores[-1], np.float64)
    anchors = [(int(candidates[i]), scores[i]) for i in np.flatnonzero(observed)]
    query_bias, query_factors = ref.fold_in(mean, bias, factors, anchors, config.l2)
    expected = (
        mean + bias[candidates] + query_bias + factors[candidates] @ query_factors
    )
    usable = np.asarray(usable_candidates(before, query))
    np.testing.assert_allclose(
        np.asarray(info.completed)[usable], expected[usable], atol=1e-4
    )
