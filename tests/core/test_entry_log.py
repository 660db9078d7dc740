"""The history as an entry log: same solver, storage sized by calls."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from planted import config_for, planted_stream
from test_step_hlo import _WHILE, _large_copies

import earm_jax as ej
from earm_jax.core import entry_log
from earm_jax.core.grow import grow_state
from earm_jax.core.solvers import incremental
from earm_jax.store.checkpoint import load_pytree, save_pytree

# Slow: the log layout compiled per block size, an HLO check; ~1 min.
pytestmark = pytest.mark.slow


@functools.lru_cache(maxsize=1)
def _stream():
    stream, _ = planted_stream(
        3, num_memories=80, num_queries=60, pool_size=30, rank=2, noise=0.05
    )
    return stream


def _run(config):
    solver = ej.online_solver(config, ej.paper_policy(pool_size=config.pool_size))
    return jax.jit(functools.partial(ej.run, solver))(jax.random.key(0), _stream())


def _rows_and_log(**overrides):
    rows = config_for(_stream(), solver="incremental", **overrides)
    log = rows._replace(entry_capacity=rows.capacity * rows.max_budget)
    return (rows, *_run(rows)), (log, *_run(log))


def test_the_log_gives_the_row_layouts_results():
    (_, rows, rows_info), (config, log, log_info) = _rows_and_log()
    assert log.obs_index.shape == (config.capacity, 0)
    np.testing.assert_array_equal(log_info.anchors, rows_info.anchors)
    np.testing.assert_array_equal(log_info.completed, rows_info.completed)
    np.testing.assert_array_equal(log.memory_count, rows.memory_count)
    index, value, mask = entry_log.rows_view(log.history_log, config.max_budget)
    np.testing.assert_array_equal(mask, rows.obs_mask)
    # Unobserved slots of a row hold leftovers in the row layout, zeros here.
    np.testing.assert_array_equal(index, np.where(mask, rows.obs_index, 0))
    np.testing.assert_array_equal(value, np.where(mask, rows.obs_value, 0.0))
    assert int(log.history_log.num_entries) == int(np.sum(rows.obs_mask))
    recount = incremental.history_stats(log)
    np.testing.assert_allclose(log.solver_extras.gram, recount.gram, atol=1e-4)
    np.testing.assert_allclose(log.solver_extras.rhs, recount.rhs, atol=1e-4)


def test_the_per_entry_step_with_the_whole_block_agrees_with_the_rows():
    # block_entries = W K visits every row of the block, as the row step does:
    # only the summation order differs.
    rows_config = config_for(_stream(), solver="incremental", refresh_rows=3)
    width = 4 * rows_config.max_budget
    config = rows_config._replace(
        entry_capacity=rows_config.capacity * rows_config.max_budget,
        block_entries=width,
    )
    _, rows_info = _run(rows_config)
    state, info = _run(config)
    np.testing.assert_array_equal(info.anchors, rows_info.anchors)
    np.testing.assert_allclose(info.completed, rows_info.completed, atol=2e-4)
    recount = incremental.history_stats(state)
    np.testing.assert_allclose(state.solver_extras.gram, recount.gram, atol=1e-4)


@pytest.mark.parametrize("dense", [True, False])
def test_a_small_block_keeps_exact_statistics_and_visits_every_row(dense):
    config = config_for(
        _stream(), solver="incremental", refresh_rows=3, entry_capacity=2000
    )._replace(block_entries=2 * 30)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=30))
    step = jax.jit(solver.step)
    update = jax.jit(
        functools.partial(
            incremental.update_from_log,
            l2=config.l2,
            num_refresh=3,
            row_width=30,
            block_entries=60,
            dense=dense,
        )
    )
    state = solver.init(jax.random.key(0))
    cursors = []
    for t in range(40):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], _stream().queries)
        state, _ = step(jax.random.key(t), state, query, _stream().scores[t])
        cursors.append(int(state.solver_extras.cursor))
    # The state after query 40's entries are stored, before its update: one
    # sweep forced dense or gathered.
    query = jax.tree.map(lambda leaf: leaf[40], _stream().queries)
    history_log, stored = entry_log.append_query(
        state.history_log,
        state.count,
        query.candidates,
        _stream().scores[40],
        jnp.arange(30) < 5,
        30,
    )
    again = update(
        state._replace(
            history_log=history_log,
            memory_count=state.memory_count.at[query.candidates].add(
                stored.astype(jnp.int32)
            ),
            count=state.count + 1,
        )
    )
    for checked in (state, again):
        recount = incremental.history_stats(checked)
        np.testing.assert_allclose(
            checked.solver_extras.gram, recount.gram, rtol=1e-5, atol=1e-4
        )
        np.testing.assert_allclose(
            checked.solver_extras.rhs, recount.rhs, rtol=1e-5, atol=1e-4
        )
    # The cursor never stalls: once 20 rows are stored it moves at every step
    # (a step always fits the new row and at least one earlier row).
    assert all(a != b for a, b in zip(cursors[20:], cursors[21:], strict=False))


def test_a_full_log_drops_whole_queries_and_reports_them():
    config = config_for(_stream(), solver="incremental", entry_capacity=100)
    state, info = _run(config)
    stored = int(state.history_log.num_entries)
    assert stored <= 100
    # Every offered observation is either in the log or counted as dropped.
    assert stored + int(np.sum(info.dropped)) == int(np.sum(info.anchors))
    assert int(np.sum(info.dropped)) > 0
    assert int(np.sum(state.memory_count)) == stored


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (dict(solver="als", entry_capacity=100), "entry_capacity=100"),
        (dict(solver="incremental", entry_capacity=10), "entry_capacity=10"),
        (dict(solver="incremental", block_entries=100), "block_entries=100"),
        (
            dict(solver="incremental", entry_capacity=1000, block_entries=40),
            "block_entries=40",
        ),
        (dict(solver="incremental", entry_capacity=-1), "entry_capacity"),
    ],
)
def test_bad_log_settings_fail_at_config_time(overrides, message):
    config = config_for(_stream(), **overrides)
    with pytest.raises(ValueError, match=message):
        ej.online_solver(config, ej.paper_policy(pool_size=30))


def test_entries_needed_is_the_schedules_sum():
    policy = ej.paper_policy(pool_size=200)
    assert entry_log.entries_needed(policy.budget, 50, 200) == 10 * (
        200 + 80 + 50 + 40 + 35
    )


def test_a_grown_log_continues_exactly_like_the_original():
    config = config_for(_stream(), solver="incremental", entry_capacity=600)
    policy = ej.paper_policy(pool_size=30)
    solver = ej.online_solver(config, policy)
    step = jax.jit(solver.step)
    state = solver.init(jax.random.key(0))
    for t in range(20):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], _stream().queries)
        state, _ = step(jax.random.key(t), state, query, _stream().scores[t])
    grown, grown_config = grow_state(
        state, config, jax.random.key(1), capacity=80, entry_capacity=1200
    )
    assert grown.history_log.entry_memory.shape == (1200 + 30,)
    big_step = jax.jit(ej.online_solver(grown_config, policy).step)
    for t in range(20, 24):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], _stream().queries)
        state, info = step(jax.random.key(t), state, query, _stream().scores[t])
        grown, big_info = big_step(jax.random.key(t), grown, query, _stream().scores[t])
        np.testing.assert_allclose(big_info.completed, info.completed, atol=1e-5)
    with pytest.raises(ValueError, match="entry_capacity"):
        grow_state(state, config, jax.random.key(1), entry_capacity=10)


def test_a_log_state_round_trips_through_a_checkpoint(tmp_path):
    config = config_for(_stream(), solver="incremental", entry_capacity=600)
    solver = ej.online_solver(config, ej.paper_policy(pool_size=30))
    state = solver.init(jax.random.key(0))
    query = jax.tree.map(lambda leaf: leaf[0], _stream().queries)
    state, _ = jax.jit(solver.step)(
        jax.random.key(1), state, query, _stream().scores[0]
    )
    path = tmp_path / "state.npz"
    save_pytree(path, state)
    restored = load_pytree(path, solver.init(jax.random.key(2)))
    for got, want in zip(
        jax.tree.leaves(restored), jax.tree.leaves(state), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    # A row-layout checkpoint does not load into a log template: the error
    # names the file and the leaves.
    rows_solver = ej.online_solver(
        config._replace(entry_capacity=0), ej.paper_policy(pool_size=30)
    )
    old = tmp_path / "rows.npz"
    save_pytree(old, rows_solver.init(jax.random.key(0)))
    with pytest.raises(ValueError, match="rows.npz.*history_log"):
        load_pytree(old, solver.init(jax.random.key(0)))


def test_memory_follows_the_observations():
    def state_bytes(config):
        shapes = jax.eval_shape(
            ej.online_solver(config, ej.paper_policy(pool_size=200)).init,
            jax.random.key(0),
        )
        return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree.leaves(shapes))

    rows = ej.SolverConfig(1000, 10_000, 200, 200, solver="incremental")
    needed = entry_log.entries_needed(
        ej.paper_policy(pool_size=200).budget, 10_000, 200
    )
    log = rows._replace(entry_capacity=needed)
    history_rows = 10_000 * 200 * (4 + 4 + 1)
    history_log = (needed + 200) * 8 + 10_000 * 8 + 4  # + num_entries
    assert state_bytes(rows) - state_bytes(log) == history_rows - history_log


@pytest.mark.xla_optimized
def test_the_donated_log_step_never_copies_the_history():
    # Q large enough that no [Q]-sized copy can be a step temporary (the
    # per-entry path copies a [B, 27] temporary: 4,320 elements).
    capacity, rank, pool = 8192, 2, 40
    config = ej.SolverConfig(
        num_memories=100,
        capacity=capacity,
        pool_size=pool,
        max_budget=pool,
        rank=rank,
        solver="incremental",
        entry_capacity=capacity * 8,
    )
    query = ej.Query(
        jax.ShapeDtypeStruct((pool,), jnp.int32),
        jax.ShapeDtypeStruct((pool,), jnp.float32),
        jax.ShapeDtypeStruct((pool,), bool),
    )
    row = jax.ShapeDtypeStruct((pool,), jnp.float32)
    for block_entries in (0, 4 * pool):
        solver = ej.online_solver(
            config._replace(block_entries=block_entries),
            ej.paper_policy(pool_size=pool),
        )
        state = jax.eval_shape(solver.init, jax.random.key(0))
        hlo = (
            jax.jit(solver.step, donate_argnums=(1,))
            .lower(jax.random.key(0), state, query, row)
            .compile()
            .as_text()
        )
        # The smallest history buffers are query_factors [Q, R] and the
        # log's per-query offsets [Q].
        assert _large_copies(hlo, capacity) == [], block_entries
        # One more loop than the row layout's 2: the read of the block's
        # offsets (entry_log.query_spans; unrolled, it copied query_start).
        assert len(_WHILE.findall(hlo)) <= 3, len(_WHILE.findall(hlo))
