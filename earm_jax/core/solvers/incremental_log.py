r"""The incremental step over a history kept as a log of entries.

:func:`update_from_log` is :func:`~earm_jax.core.solvers.incremental.update`
(the same block of rows, the same exact solves, the same change of the
statistics) for a history stored as an :class:`~earm_jax.core.entry_log.EntryLog`:
it reads the block's entries from the log, compacted into a fixed number of
slots, so a step pays for the observations stored rather than for ``K`` slots
per row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.core import entry_log, linalg
from earm_jax.core.config import SolverState
from earm_jax.core.solvers.incremental_stats import (
    DENSE_FACTOR,
    IncrementalStats,
    finish_step,
    move_statistics_by_rows,
    old_memory_coefficients,
    query_solutions,
    refresh_rows,
    solve_batch_last,
    solve_gathered_memories,
    solve_touched_memories,
    take_rows,
)
from earm_jax.types import Array


def block_entries_of_log(
    log: entry_log.EntryLog,
    rows: Array,
    valid: Array,
    block_entries: int,
) -> tuple[Array, Array, Array, Array, Array]:
    """The entries of the block's rows, compacted into ``block_entries`` slots.

    Row 0 (the new query) always fits (``block_entries >= 2 K``); of the
    earlier rows, the prefix whose entries fit after it is visited, the rest
    waits for a later step.

    Returns:
      ``(visited bool[W], entry_row int32[B], entry_memory int32[B],
      entry_value float32[B], entry_mask bool[B])`` with ``B = block_entries``;
      ``entry_row`` is the block row of each entry.
    """
    start, length = entry_log.query_spans(log, rows)
    length = jnp.where(valid, length, 0)
    visited = valid & (jnp.cumsum(length) <= block_entries)
    length = jnp.where(visited, length, 0)
    end = jnp.cumsum(length)  # inclusive
    begin = end - length
    position = jnp.arange(block_entries, dtype=jnp.int32)
    # The block row of entry p: the number of rows that end at or before it.
    entry_row = jnp.sum(end[None, :] <= position[:, None], axis=1)
    entry_row = jnp.minimum(entry_row, rows.shape[0] - 1).astype(jnp.int32)
    entry_mask = position < end[-1]
    source = jnp.where(entry_mask, start[entry_row] + position - begin[entry_row], 0)
    entry_memory = jnp.where(entry_mask, log.entry_memory[source], 0)
    entry_value = jnp.where(entry_mask, log.entry_value[source], 0.0)
    return visited, entry_row, entry_memory, entry_value, entry_mask


def update_from_log(
    state: SolverState,
    l2: float,
    num_refresh: int,
    row_width: int,
    block_entries: int = 0,
    dense: bool | None = None,
) -> SolverState:
    """``incremental.update`` for a history kept as an
    :class:`~earm_jax.core.entry_log.EntryLog`.

    The same sweep (the same rows, solves and statistics' change), over the
    block's entries read from the log and compacted into ``block_entries``
    slots (default ``W K``: every row of the block, as ``update``), so its
    cost follows the entries the block holds: the query solves are sums over
    the entries, the statistics move by ``B`` scalar scatters and a
    contraction over the ``W`` rows (as ``update``), and the memory solves
    run over the ``B`` gathered entries, or densely over ``M`` (masked) while
    ``M <= 2 B`` (there the dense solve is the cheaper one). With a
    smaller ``block_entries`` the earlier rows that do not fit are left for
    the next step (the cursor stops at the first of them).

    Args:
      state: as for ``update``, with ``history_log`` an ``EntryLog``.
      l2: the ridge penalty.
      num_refresh: earlier rows re-solved per query (static).
      row_width: ``K`` (``max_budget``, static).
      block_entries: entry slots per step (static); 0 gives ``W K``.
      dense: solve all memories, masked (``True``), or the gathered entries
        (``False``); ``None`` picks ``M <= 2 block_entries`` (static).
    """
    stats: IncrementalStats = state.solver_extras
    log: entry_log.EntryLog = state.history_log
    capacity = log.query_start.shape[0]
    num_memories = state.memory_factors.shape[0]
    block = num_refresh + 1
    block_entries = block_entries or block * row_width
    if dense is None:
        dense = num_memories <= DENSE_FACTOR * block_entries
    hi = jax.lax.Precision.HIGHEST
    # Reads of the history after the new entries' write (see take_rows).
    rows, valid, in_stats, _ = refresh_rows(
        state.count, stats.cursor, capacity, num_refresh
    )
    visited, entry_row, index, value, mask = block_entries_of_log(
        log, rows, valid, block_entries
    )
    in_stats = in_stats & visited
    # The cursor moves past the visited earlier rows (all of them: as update).
    earlier = jnp.maximum(jnp.clip(state.count - 1, 0, capacity), 1)
    advance = jnp.where(
        jnp.all(visited | ~valid), num_refresh, jnp.sum(visited[1:])
    ).astype(jnp.int32)
    next_cursor = (stats.cursor + advance) % earlier
    old_bias = take_rows(state.query_bias, rows, unroll=True)
    old_factors = take_rows(state.query_factors, rows)
    mean = state.global_mean
    entry = mask.astype(jnp.float32)
    membership = (
        entry_row[:, None] == jnp.arange(block, dtype=jnp.int32)[None, :]
    ).astype(jnp.float32) * entry[:, None]  # [B, W]

    # 1. Queries of the block, exactly, against the current memories.
    features = linalg.with_intercept(state.memory_factors[index]) * entry[:, None]
    targets = jnp.where(mask, value - mean - state.memory_bias[index], 0.0)
    weighted = features[:, :, None] * membership[:, None, :]  # [B, D, W]
    gram_q = jnp.einsum("bdw,be->dew", weighted, features, precision=hi)
    rhs_q = jnp.einsum("bdw,b->dw", weighted, targets, precision=hi)
    new_bias, new_factors, changes = query_solutions(
        solve_batch_last(gram_q, rhs_q, l2), visited, old_bias, old_factors, in_stats
    )
    ids = jnp.where(mask, index, num_memories)  # masked: dropped
    old_coefficients = old_memory_coefficients(state)
    # The statistics move as scalars (B scalar scatters, one contraction over
    # the W rows), as in update's dense path.
    gram, rhs, counts = move_statistics_by_rows(
        stats, changes, entry_row, ids, entry, value, block
    )

    # 2. Every memory the block touches, exactly: one fused solve (batch last),
    # over all M kept where touched, or over the block's gathered entries.
    if dense:
        coefficients = solve_touched_memories(
            gram, rhs, mean, l2, counts, old_coefficients
        )
    else:
        coefficients = solve_gathered_memories(
            gram, rhs, mean, l2, index, ids, old_coefficients
        )
    write_rows = jnp.where(visited, rows, capacity)
    new_stats = IncrementalStats(gram, rhs, next_cursor)
    return finish_step(
        state, coefficients, new_stats, write_rows, new_bias, new_factors
    )


__all__ = ["block_entries_of_log", "update_from_log"]
