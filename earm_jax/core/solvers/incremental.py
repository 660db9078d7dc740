r"""A constant-time online update: per-memory sufficient statistics.

The ``"als"`` solver refits every past query and every memory at each new query,
so a query's cost grows with the history it holds (``O(Q K r^2)`` per sweep).
The ``"incremental"`` solver minimises the same loss (docs/method.md),

.. math:: \sum_{observed} (y_{m,s} - \mu - b_m - c_s - u_m \cdot v_s)^2
   + \lambda(\|b\|^2 + \|c\|^2 + \|U\|^2 + \|V\|^2),

by exact block coordinate descent over a *bounded* block per query. Write
:math:`x_s = (1, v_s)` and :math:`w_m = (b_m, u_m)`, so that
:math:`\hat y_{m,s} = \mu + c_s + w_m \cdot x_s`. For every memory the state keeps
the sufficient statistics of its normal equations over the whole history,

.. math:: G_m = \sum_{s \ni m} x_s x_s^\top, \qquad
          h_m = \sum_{s \ni m} (y_{m,s} - c_s)\, x_s,

always consistent with the *current* :math:`(c_s, v_s)` of every stored row.
Then the exact ridge solution of a memory's block is
:math:`w_m = (G_m + \lambda I)^{-1}(h_m - \mu\, G_{m,0})` (since
:math:`G_{m,0} = \sum_s x_s`), at a cost of ``O(r^3)`` however long its history.

Per query ``t`` (after the solver has folded ``t`` in exactly from its anchors,
emitted its scores and stored its row), :func:`update` runs one ALS sweep
restricted to a block of rows ``W``: the new row ``t`` plus ``num_refresh``
earlier rows taken round robin (a cursor cycles over the history, so every row
is revisited every ``t / num_refresh`` queries):

1. **queries** -- re-solve :math:`(c_s, v_s)` of every row in ``W`` exactly
   against the current memory parameters (``O(|W| K r^2)``), and move the
   statistics of the memories in those rows from the old :math:`x_s` to the new
   one by a scatter-add of the difference (a rank-2 down/update; the new row is
   simply added);
2. **memories** -- re-solve :math:`w_m` exactly from the statistics for every
   memory the rows of ``W`` touch (``|W| K`` solves of size ``r + 1``);
3. **mean** -- :math:`\mu` exactly from the statistics:
   :math:`\mu = \sum_m (h_{m,0} - w_m \cdot G_{m,0}) / \sum_m G_{m,00}`, one
   pass over an ``M x (r+1)`` slice (no history term).

What is exact: the fold-in of the new query (shared with ``"als"``), every block
solve (each is the exact minimiser of the full history loss over its block, so
the loss never increases from a block update), the statistics (kept in sync
with every re-solved row), and the mean. What is approximate: rows outside ``W``
and memories outside the touched set keep the values of their last visit
instead of being re-solved at every query, i.e. the history is swept
``num_refresh`` rows at a time rather than fully ``num_sweeps`` times per query.
The cost per query is ``O((num_refresh + 1) K r^3 + M r)`` and independent of
the history length; the capacity ``Q`` enters only the storage of the rows.
While ``M <= 2 (num_refresh + 1) K`` the memory solves run densely over all
``M`` memories, masked to the touched ones (``O(M r^3)``, elementwise and
batch-last, faster on batched hardware than gathering); see :func:`update`.

The statistics and the pieces of a step both history layouts share live in
:mod:`~earm_jax.core.solvers.incremental_stats`; the step over a history kept
as a log of entries in :mod:`~earm_jax.core.solvers.incremental_log`. Everything
here is pure and shape-static.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.core import entry_log
from earm_jax.core.config import Parameters, SolverConfig, SolverState
from earm_jax.core.padding import pad
from earm_jax.core.solvers.base import SolverAlgorithm, no_refit
from earm_jax.core.solvers.incremental_log import (
    block_entries_of_log,
    update_from_log,
)
from earm_jax.core.solvers.incremental_stats import (
    DENSE_FACTOR,
    IncrementalStats,
    finish_step,
    history_stats,
    init_stats,
    move_statistics_by_rows,
    old_memory_coefficients,
    pack_outer,
    put_rows,
    query_solutions,
    refresh_rows,
    small_ridge_solve,
    solve_batch_last,
    solve_gathered_memories,
    solve_touched_memories,
    take_rows,
)


def update(
    state: SolverState,
    l2: float,
    num_refresh: int,
    dense: bool | None = None,
    row_width: int | None = None,
) -> SolverState:
    """One bounded ALS sweep after a query's row was stored (see the module doc).

    Laid out for batched hardware. The statistics move as scalars: with
    ``A[w, m]`` the number of observed entries of memory ``m`` in block row
    ``w`` and ``B[w, m]`` the sum of their values (scatter-adds of ``W K``
    scalars), the change is
    ``dG_m = sum_w A[w, m] (x'_w x'_w^T - x_w x_w^T)`` and
    ``dh_m = sum_w B[w, m] (x'_w - x_w) - A[w, m] (c'_w x'_w - c_w x_w)``
    (the old ``x_w`` counts only for rows already in the statistics): a
    contraction over the ``W`` rows, written memory-last; no ``[W K, D, D]``
    update is formed. The memory solves are one unrolled Cholesky on
    memory-last inputs: over all ``M`` memories, kept where touched, while
    ``M`` is small (``dense``); over the block's ``W K`` gathered entries
    otherwise (then the statistics move by per-entry scatters).

    Args:
      state: a :class:`~earm_jax.core.config.SolverState` right after the new row was
        stored (``count`` already incremented), with :class:`IncrementalStats`
        in ``solver_extras`` consistent with the rows before it.
      l2: the ridge penalty.
      num_refresh: earlier rows re-solved per query (static).
      dense: solve all memories, masked (``True``), or the gathered entries
        (``False``); ``None`` picks ``M <= 2 W K`` (static).
      row_width: ``K`` (static), needed when the history is an
        :class:`~earm_jax.core.entry_log.EntryLog`: the block's rows are then
        gathered from the log as rows of width ``K`` (the same arithmetic as
        the row layout; :func:`update_from_log` pays per entry instead).

    Returns:
      The state with the block's query parameters, the touched memories'
      parameters, the mean and the statistics updated.
    """
    log = state.history_log
    stats: IncrementalStats = state.solver_extras
    capacity = state.query_bias.shape[0]
    # Reads of the history after the new row's write (see take_rows).
    rows, valid, in_stats, next_cursor = refresh_rows(
        state.count, stats.cursor, capacity, num_refresh
    )
    if isinstance(log, entry_log.EntryLog):
        # The log's entries of the block's rows, as rows of width K.
        if row_width is None:
            raise ValueError("a state with an EntryLog needs update(..., row_width=K)")
        width = row_width
        index, value, mask = entry_log.gather_rows(log, rows, width)
    else:
        width = state.obs_index.shape[1]
        index = take_rows(state.obs_index, rows, unroll=True)  # [W, K]
        value = take_rows(state.obs_value, rows, unroll=True)
        mask = take_rows(state.obs_mask, rows, unroll=True)
    mask = mask & valid[:, None]
    num_memories, rank = state.memory_factors.shape
    block = num_refresh + 1
    if dense is None:
        dense = num_memories <= DENSE_FACTOR * block * width
    hi = jax.lax.Precision.HIGHEST
    old_bias = take_rows(state.query_bias, rows, unroll=True)
    old_factors = take_rows(state.query_factors, rows)
    mean = state.global_mean
    entry = mask.astype(jnp.float32)

    # 1. Queries of the block, exactly, against the current memories (every
    # memory in a stored row has history: its factors are the effective ones).
    # With x = (1, u) the intercept's row and column of the gram are plain
    # sums, so the batched dot covers the R x R block only and the [W, K, D]
    # features with a column of ones are never formed (1.07-1.18x the whole
    # batched step on CPU).
    factors = state.memory_factors[index] * entry[..., None]  # [W, K, R]
    targets = jnp.where(mask, value - mean - state.memory_bias[index], 0.0)
    factor_gram = jnp.einsum("wkd,wke->dew", factors, factors, precision=hi)
    factor_sums = jnp.sum(factors, axis=1).T  # [R, W]
    first_row = jnp.concatenate([jnp.sum(entry, axis=1)[None], factor_sums])
    gram_q = jnp.concatenate(  # [D, D, W]
        [first_row[None], jnp.concatenate([factor_sums[:, None], factor_gram], 1)]
    )
    rhs_q = jnp.concatenate(  # [D, W]
        [
            jnp.sum(targets, axis=1)[None],
            jnp.einsum("wkd,wk->dw", factors, targets, precision=hi),
        ]
    )
    new_bias, new_factors, changes = query_solutions(
        solve_batch_last(gram_q, rhs_q, l2), valid, old_bias, old_factors, in_stats
    )
    flat_ids = jnp.where(mask, index, num_memories)  # masked: dropped
    old_coefficients = old_memory_coefficients(state)

    if dense:
        row_ids = jnp.broadcast_to(jnp.arange(block)[:, None], index.shape)
        gram, rhs, counts = move_statistics_by_rows(
            stats, changes, row_ids, flat_ids, entry, value, block
        )
        # 2. The touched memories, exactly, from their statistics.
        coefficients = solve_touched_memories(
            gram, rhs, mean, l2, counts, old_coefficients
        )
    else:
        # Large M: per-entry scatters over the block's W K entries only.
        outer, per_value, per_entry = changes
        ids = flat_ids.reshape(-1)
        delta_gram = entry[None] * pack_outer(outer).T[..., None]  # [P, W, K]
        delta_rhs = entry[None] * (
            value[None] * per_value.T[..., None] + per_entry.T[..., None]
        )  # [D, W, K]
        dim = rank + 1
        gram = stats.gram_packed.at[:, ids].add(
            delta_gram.reshape(delta_gram.shape[0], -1), mode="drop"
        )
        rhs = stats.rhs_memory_last.at[:, ids].add(
            delta_rhs.reshape(dim, -1), mode="drop"
        )
        # 2. Every memory the block touches, exactly, over the gathered entries.
        coefficients = solve_gathered_memories(
            gram, rhs, mean, l2, index.reshape(-1), ids, old_coefficients
        )
    # A dropped newest row (history full) was clipped onto a real row: write
    # only valid rows, so no two writes ever target one slot.
    write_rows = jnp.where(valid, rows, capacity)
    new_stats = IncrementalStats(gram, rhs, next_cursor)
    return finish_step(
        state, coefficients, new_stats, write_rows, new_bias, new_factors
    )


def _init_extras(config: SolverConfig, params: Parameters) -> IncrementalStats:
    return init_stats(config.num_memories, config.rank)


def _update(state: SolverState, config: SolverConfig) -> SolverState:
    if config.block_entries:
        return update_from_log(
            state,
            config.l2,
            config.refresh_rows,
            config.max_budget,
            config.block_entries,
        )
    row_width = config.max_budget if config.entry_capacity else None
    return update(state, config.l2, config.refresh_rows, row_width=row_width)


def _grow_extras(
    extras: IncrementalStats, num_memories: int, capacity: int
) -> IncrementalStats:
    # New memories have no history: zero statistics. The round-robin cursor
    # stays valid (it is taken modulo the number of stored rows).
    return IncrementalStats(
        gram_packed=pad(extras.gram_packed, num_memories, axis=-1),
        rhs_memory_last=pad(extras.rhs_memory_last, num_memories, axis=-1),
        cursor=extras.cursor,
    )


# The history up to t - 1 was folded in by the update after each query, so
# there is nothing to refit before the fold-in.
ALGORITHM = SolverAlgorithm(
    name="incremental",
    init_extras=_init_extras,
    refit=no_refit,
    update=_update,
    grow_extras=_grow_extras,
    extras_from_history=lambda state, config: history_stats(state),
)

__all__ = [
    "ALGORITHM",
    "IncrementalStats",
    "block_entries_of_log",
    "history_stats",
    "init_stats",
    "put_rows",
    "refresh_rows",
    "small_ridge_solve",
    "take_rows",
    "update",
    "update_from_log",
]
