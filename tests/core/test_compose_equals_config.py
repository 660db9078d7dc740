"""The composed solver is the config-built one: same config, same bits.

``compose_solver`` with a factory's algorithm and ``online_solver`` with a
``SolverConfig`` naming the registered algorithm, for the same
hyperparameters, must run the same computation: every output equal bit for
bit, and the composed solver's ``config`` equal to the hand-written one.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import optax
import pytest
from planted import config_for, planted_stream

import earm_jax as ej
from earm_jax.core.algorithms import bind

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow

NUM_QUERIES, POOL = 12, 20
LOG_ENTRIES = NUM_QUERIES * POOL

# (config fields, factory algorithm, history kind)
CASES = {
    "als": (dict(solver="als", l2=0.2, num_sweeps=2), lambda: ej.als(0.2, 2), "rows"),
    "als_tolerance": (
        dict(solver="als", num_sweeps=4, tolerance=1e-3),
        lambda: ej.als(sweeps=4, tolerance=1e-3),
        "rows",
    ),
    "incremental_rows": (
        dict(solver="incremental", l2=0.3, refresh_rows=3),
        lambda: ej.incremental(l2=0.3, refresh_rows=3),
        "rows",
    ),
    "incremental_log": (
        dict(solver="incremental", refresh_rows=3, entry_capacity=LOG_ENTRIES),
        lambda: ej.incremental(refresh_rows=3),
        "log",
    ),
    "incremental_log_bounded_block": (
        dict(
            solver="incremental",
            refresh_rows=3,
            entry_capacity=LOG_ENTRIES,
            block_entries=2 * POOL,
        ),
        lambda: ej.incremental(refresh_rows=3, block_entries=2 * POOL),
        "log",
    ),
    "gradient": (
        dict(solver="gradient", num_steps=5, learning_rate=0.02),
        lambda: ej.gradient(steps=5, learning_rate=0.02),
        "rows",
    ),
    # Adam passed by hand at the config's rate is the registered algorithm too;
    # the config then reports the default rate it does not read.
    "gradient_explicit_adam": (
        dict(solver="gradient", num_steps=5),
        lambda: ej.gradient(optax.adam(0.05), steps=5),
        "rows",
    ),
}


def _composed(stream: ej.Stream, algorithm, history_kind: str, policy):
    num_memories = int(stream.insert_time.shape[0])
    history = (
        ej.RowHistory(capacity=NUM_QUERIES, pool_size=POOL)
        if history_kind == "rows"
        else ej.LogHistory(
            capacity=NUM_QUERIES, pool_size=POOL, entry_capacity=LOG_ENTRIES
        )
    )
    return ej.compose_solver(
        model=ej.LowRankModel(num_memories=num_memories, rank=2),
        history=history,
        algorithm=algorithm,
        policy=policy,
    )


@pytest.mark.parametrize("case", sorted(CASES))
def test_composed_solver_equals_the_config_built_one_bitwise(case):
    fields, factory, history_kind = CASES[case]
    stream, _ = planted_stream(0, num_queries=NUM_QUERIES, pool_size=POOL, noise=0.05)
    policy = ej.paper_policy(pool_size=POOL, block_size=4)
    # config_for's test defaults (als, 5 sweeps) are replaced by the case's.
    config = config_for(stream, **{"num_sweeps": 3, **fields})
    by_config = ej.online_solver(config, policy)
    composed = _composed(stream, factory(), history_kind, policy)
    assert composed.config == config
    assert composed.algorithm.name == by_config.algorithm.name == config.solver
    key = jax.random.key(3)
    want = jax.jit(functools.partial(ej.run, by_config))(key, stream)
    got = jax.jit(functools.partial(ej.run, composed))(key, stream)
    want_leaves = jax.tree_util.tree_flatten_with_path(want)[0]
    for (path, leaf), other in zip(want_leaves, jax.tree.leaves(got), strict=True):
        np.testing.assert_array_equal(
            np.asarray(other), np.asarray(leaf), err_msg=jax.tree_util.keystr(path)
        )


def test_a_factorys_arguments_replace_the_config_fields_it_binds():
    stream, _ = planted_stream(0, num_queries=4, pool_size=POOL)
    config = config_for(stream, solver="incremental", l2=0.5, num_sweeps=9)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=POOL), ej.als())
    assert (solver.config.solver, solver.config.l2, solver.config.num_sweeps) == (
        "als",
        0.1,
        3,
    )
    # The bound functions read the bound values whatever config they are given.
    params = ej.Parameters(*(np.zeros(()) for _ in range(5)))
    seen = []
    inner = ej.SOLVERS["als"]._replace(
        init_extras=lambda config, params: seen.append(config.l2)
    )
    bind(inner, l2=0.7).init_extras(config, params)
    assert seen == [0.7]


@pytest.mark.parametrize(
    "build, message",
    [
        (lambda: ej.als(sweeps=-1), "als: sweeps"),
        (lambda: ej.als(l2=0.0), "als: l2"),
        (lambda: ej.incremental(refresh_rows=1.5), "incremental: refresh_rows"),
        (lambda: ej.gradient(steps=-2), "gradient: steps"),
        (lambda: ej.gradient(learning_rate=0.0), "gradient: learning_rate"),
        (lambda: ej.gradient(optax.sgd(0.1), learning_rate=0.1), "learning_rate"),
    ],
)
def test_factories_refuse_bad_arguments_naming_them(build, message):
    with pytest.raises(ValueError, match=message):
        build()


def test_an_optimizer_that_is_not_one_is_a_type_error():
    with pytest.raises(ej.InputTypeError, match="gradient: optimizer"):
        ej.gradient("adam")


@pytest.mark.parametrize(
    "parts, message",
    [
        (
            dict(history=ej.RowHistory(capacity=0, pool_size=POOL)),
            "RowHistory.capacity",
        ),
        (dict(model=ej.LowRankModel(num_memories=60, rank=-1)), "LowRankModel.rank"),
        (dict(history=ej.RowHistory(8, POOL, max_budget=POOL + 1)), "RowHistory"),
        (dict(history=ej.RowHistory(capacity=8, pool_size=10)), "RowHistory.pool_size"),
        (dict(algorithm=ej.incremental(block_entries=2 * POOL)), "LogHistory"),
        (dict(history=ej.LogHistory(8, POOL, entry_capacity=100)), "LogHistory"),
    ],
)
def test_compose_names_the_part_that_is_wrong(parts, message):
    arguments = dict(
        model=ej.LowRankModel(num_memories=60, rank=2),
        history=ej.RowHistory(capacity=8, pool_size=POOL),
        algorithm=ej.gradient(),
        policy=ej.paper_policy(pool_size=POOL),
    )
    arguments.update(parts)
    with pytest.raises(ValueError, match=message):
        ej.compose_solver(**arguments)


@pytest.mark.parametrize(
    "parts, message",
    [
        (
            dict(model=ej.SolverConfig(60, 8, POOL, POOL)),
            "model must be a LowRankModel",
        ),
        (dict(algorithm="als"), "algorithm must be a SolverAlgorithm"),
    ],
)
def test_compose_names_a_part_of_the_wrong_type(parts, message):
    arguments = dict(
        model=ej.LowRankModel(num_memories=60, rank=2),
        history=ej.RowHistory(capacity=8, pool_size=POOL),
        algorithm=ej.gradient(),
        policy=ej.paper_policy(pool_size=POOL),
    )
    arguments.update(parts)
    # A TypeError only: a wrong kind of part is not a wrong value.
    with pytest.raises(ej.InputTypeError, match=message) as raised:
        ej.compose_solver(**arguments)
    assert not isinstance(raised.value, ValueError)
