r"""A constant-time online update: per-memory sufficient statistics (issue #4).

The ``"als"`` solver refits every past query and every memory at each new query,
so a query's cost grows with the history it holds (``O(Q K r^2)`` per sweep).
The ``"incremental"`` solver minimises the same loss (DESIGN §2.6),

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

Everything here is pure and shape-static.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.core import entry_log, linalg
from earm_jax.core.config import Parameters, SolverConfig, SolverState
from earm_jax.core.padding import pad
from earm_jax.core.solvers.base import SolverAlgorithm, no_refit
from earm_jax.types import Array, ArrayLike

# The memory solves of a step run densely over all M memories (masked to the
# touched ones) while M <= _DENSE_FACTOR * (rows in the block) * K; beyond that
# they run over the block's gathered entries.
_DENSE_FACTOR = 2


class IncrementalStats(NamedTuple):
    r"""Per-memory sufficient statistics carried in ``SolverState.solver_extras``.

    Stored *memory-last* (batch-last): every entry :math:`G_{\cdot, i, j}` is
    a contiguous ``[M]`` vector, the layout the unrolled Cholesky of the step
    reads (a transpose of ``[M, D, D]`` statistics per step cost as much as
    the solve itself on CPU). :math:`G_m` is symmetric, so only its lower
    triangle is kept, packed (:func:`~earm_jax.core.linalg.pack_lower`):
    ``D (D + 1) / 2`` rows instead of ``D^2`` (45 of 81 at rank 8), which
    the step moves and reads each query. :attr:`gram` and :attr:`rhs` are
    the full, memory-first views.

    Attributes:
      gram_packed: ``float32[(R+1)(R+2)/2, M]`` the packed lower triangles of
        :math:`G_m = \sum_{s \ni m} x_s x_s^\top` with :math:`x_s = (1, v_s)`,
        over the stored rows that hold ``m``.
      rhs_memory_last: ``float32[R+1, M]``
        :math:`h_m = \sum_{s \ni m} (y_{m,s} - c_s) x_s`.
      cursor: ``int32[]`` the first history row of the next round-robin refresh.
    """

    gram_packed: Array
    rhs_memory_last: Array
    cursor: Array

    @property
    def gram(self) -> Array:
        """``float32[..., M, R+1, R+1]``: :math:`G_m`, memory first, full."""
        dim = self.rhs_memory_last.shape[-2]
        full = linalg.unpack_lower(self.gram_packed, dim, axis=-2)  # [..., D, D, M]
        return jnp.moveaxis(full, -1, -3)

    @property
    def rhs(self) -> Array:
        """``float32[..., M, R+1]``: :math:`h_m`, memory first."""
        return jnp.moveaxis(self.rhs_memory_last, -1, -2)


def init_stats(num_memories: int, rank: int) -> IncrementalStats:
    """Empty statistics (no history) for ``num_memories`` memories of ``rank``."""
    dim = rank + 1
    return IncrementalStats(
        gram_packed=jnp.zeros((linalg.packed_size(dim), num_memories), jnp.float32),
        rhs_memory_last=jnp.zeros((dim, num_memories), jnp.float32),
        cursor=jnp.zeros((), jnp.int32),
    )


def small_ridge_solve(gram: ArrayLike, rhs: ArrayLike, l2: float) -> Array:
    r"""Solves :math:`(G + \lambda I) w = h` for many small SPD systems.

    Batch-first wrapper of :func:`earm_jax.core.linalg.ridge_solve` (an unrolled
    Cholesky up to ``r + 1 = 13``, LU beyond); the step itself calls
    :func:`earm_jax.core.linalg.cholesky_solve_batch_last` on batch-last
    inputs directly.

    Args:
      gram: ``float32[..., D, D]`` symmetric positive semi-definite.
      rhs: ``float32[..., D]``.
      l2: ridge :math:`\lambda > 0` (keeps every system positive definite).

    Returns:
      ``float32[..., D]``.
    """
    return linalg.ridge_solve(gram, rhs, l2)


def refresh_rows(
    count: ArrayLike, cursor: ArrayLike, capacity: int, num_refresh: int
) -> tuple[Array, Array, Array, Array]:
    """The block ``W`` of history rows one update visits.

    Row 0 of the block is the query just stored (slot ``count - 1``); rows
    ``1 .. num_refresh`` are ``cursor, cursor + 1, ...`` modulo the number of
    earlier rows, so they are distinct and every row recurs round robin.

    Args:
      count: ``int32[]`` queries seen, including the one just stored.
      cursor: ``int32[]`` the round-robin position.
      capacity: ``Q`` (static).
      num_refresh: earlier rows per update (static).

    Returns:
      ``(rows int32[W], valid bool[W], in_stats bool[W], next_cursor int32[])``
      with ``W = num_refresh + 1``: ``valid`` marks real stored rows and
      ``in_stats`` those already counted in the statistics (all but the new row).
    """
    count = jnp.asarray(count, jnp.int32)
    newest = count - 1
    earlier = jnp.clip(newest, 0, capacity)  # stored rows before the newest
    modulus = jnp.maximum(earlier, 1)
    offsets = jnp.arange(num_refresh, dtype=jnp.int32)
    past = (jnp.asarray(cursor, jnp.int32) + offsets) % modulus
    rows = jnp.concatenate([newest[None], past])
    valid = jnp.concatenate(
        [((newest >= 0) & (newest < capacity))[None], offsets < earlier]
    )
    in_stats = jnp.concatenate([jnp.zeros((1,), bool), jnp.ones((num_refresh,), bool)])
    next_cursor = (jnp.asarray(cursor, jnp.int32) + num_refresh) % modulus
    return jnp.clip(rows, 0, capacity - 1), valid, in_stats & valid, next_cursor


def take_rows(buffer: Array, rows: Array, unroll: bool = False) -> Array:
    """``buffer[rows]`` as a loop of dynamic slices.

    The loop keeps XLA from fusing these reads into the write of the new row
    into the same history buffer; fused, they read the old buffer and force a
    copy of the whole buffer per query (a cost growing with the capacity).
    ``unroll=True`` writes the slices out instead (no while loop): measured in
    the compiled step, that is copy-free for the observation rows and the
    query biases but not for ``query_factors``, whose read stays a loop
    (``tests/core/test_step_hlo.py`` guards both).
    """

    def body(k: Array, out: Array) -> Array:
        row = jax.lax.dynamic_index_in_dim(buffer, rows[k], keepdims=False)
        return jax.lax.dynamic_update_index_in_dim(out, row, k, 0)

    out = jnp.zeros(rows.shape + buffer.shape[1:], buffer.dtype)
    return jax.lax.fori_loop(0, rows.shape[0], body, out, unroll=unroll)


def put_rows(buffer: Array, rows: Array, values: Array, unroll: bool = False) -> Array:
    """``buffer[rows] = values`` as in-place updates (a loop, or unrolled with
    ``unroll=True``); rows outside the buffer (``>= len(buffer)``) are skipped."""
    size = buffer.shape[0]

    def body(k: Array, out: Array) -> Array:
        slot = jnp.clip(rows[k], 0, size - 1)
        current = jax.lax.dynamic_index_in_dim(out, slot, keepdims=False)
        row = jnp.where(rows[k] < size, values[k], current)
        return jax.lax.dynamic_update_index_in_dim(out, row, slot, 0)

    return jax.lax.fori_loop(0, rows.shape[0], body, buffer, unroll=unroll)


def _solve_batch_last(gram_t: Array, rhs_t: Array, l2: float) -> Array:
    """``[D, D, B]``, ``[D, B]`` -> ``[D, B]`` (unrolled Cholesky, LU if large)."""
    if gram_t.shape[0] <= linalg.MAX_UNROLLED:
        return linalg.cholesky_solve_batch_last(gram_t, rhs_t, l2)
    solution = linalg.ridge_solve(jnp.moveaxis(gram_t, -1, 0), rhs_t.T, l2)
    return solution.T


def _solve_packed(packed: Array, rhs_t: Array, l2: float) -> Array:
    """``[P, B]`` packed, ``[D, B]`` -> ``[D, B]`` (unrolled Cholesky, LU if
    large)."""
    dim = rhs_t.shape[0]
    if dim <= linalg.MAX_UNROLLED:
        return linalg.cholesky_solve_packed(packed, rhs_t, l2)
    return _solve_batch_last(linalg.unpack_lower(packed, dim, axis=0), rhs_t, l2)


def _first_column(packed: Array) -> Array:
    """``[P, ...]`` packed -> ``[D, ...]``: the first column ``G[:, 0]``
    (``G_m[:, 0] = sum_s x_s``, since ``x_s = (1, v_s)``)."""
    dim = int(round((np.sqrt(8 * packed.shape[0] + 1) - 1) / 2))
    # Static slices, not a gather: they fuse into the consumers.
    return jnp.stack([packed[linalg.packed_index(i, 0)] for i in range(dim)])


def _pack_outer(outer: Array) -> Array:
    """``[W, D, D]`` symmetric -> ``[W, P]``."""
    return linalg.pack_lower(outer, axes=(-2, -1))


def _add_row_terms(base: Array, coefficients: Array, weights: Array) -> Array:
    """``base + sum_w coefficients[w, :, None] * weights[w, None, :]``.

    ``[P, M] + [W, P] x [W, M]``, written as ``W`` elementwise terms: one
    loop fusion with the add. As a ``dot`` (contraction over ``W = 9``, a
    poor shape for a matrix unit), batched over streams, it and its add were
    a fifth of the batched step on CPU (issue 12).
    """
    total = base
    for row in range(coefficients.shape[0]):
        total = total + coefficients[row][:, None] * weights[row][None, :]
    return total


def _finish(
    state, coefficients, gram, rhs, mean, write_rows, new_bias, new_factors, cursor
):
    """The end of both steps: the exact mean from the statistics (unseen
    memories have G = 0), then the block's query parameters and the new
    memory coefficients written back."""
    num_observed = jnp.sum(gram[0])  # packed (0, 0): the observation counts
    total = jnp.sum(rhs[0]) - jnp.sum(coefficients * _first_column(gram))
    mean = jnp.where(num_observed > 0.5, total / jnp.maximum(num_observed, 1.0), mean)
    return state._replace(
        global_mean=mean,
        memory_bias=coefficients[0],
        memory_factors=coefficients[1:].T,
        query_bias=put_rows(state.query_bias, write_rows, new_bias, unroll=True),
        query_factors=put_rows(
            state.query_factors, write_rows, new_factors, unroll=True
        ),
        solver_extras=IncrementalStats(gram, rhs, cursor),
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
        dense = num_memories <= _DENSE_FACTOR * block * width
    hi = jax.lax.Precision.HIGHEST
    old_bias = take_rows(state.query_bias, rows, unroll=True)
    old_factors = take_rows(state.query_factors, rows)
    mean = state.global_mean
    memory_factors = state.memory_factors
    memory_bias = state.memory_bias
    entry = mask.astype(jnp.float32)

    # 1. Queries of the block, exactly, against the current memories (every
    # memory in a stored row has history: its factors are the effective ones).
    # With x = (1, u) the intercept's row and column of the gram are plain
    # sums, so the batched dot covers the R x R block only and the [W, K, D]
    # features with a column of ones are never formed (1.07-1.18x the whole
    # batched step on CPU, issue 12).
    factors = memory_factors[index] * entry[..., None]  # [W, K, R]
    targets = jnp.where(mask, value - mean - memory_bias[index], 0.0)
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
    solution = _solve_batch_last(gram_q, rhs_q, l2)  # [D, W]
    new_bias = jnp.where(valid, solution[0], old_bias)
    new_factors = jnp.where(valid[:, None], solution[1:].T, old_factors)

    # Per-row coefficients of the statistics' change.
    keep_old = in_stats.astype(jnp.float32)[:, None]
    x_old_full = linalg.with_intercept(old_factors)
    x_old = x_old_full * keep_old  # [W, D]
    x_new = linalg.with_intercept(new_factors)
    outer = (
        x_new[:, :, None] * x_new[:, None, :]
        - x_old[:, :, None] * x_old_full[:, None, :]
    )  # [W, D, D]
    per_value = x_new - x_old  # times the sum of the values
    per_entry = old_bias[:, None] * x_old - new_bias[:, None] * x_new  # times count
    flat_ids = jnp.where(mask, index, num_memories)  # masked: dropped
    old_coefficients = jnp.concatenate([memory_bias[None], memory_factors.T])  # [D, M]

    if dense:
        row_ids = jnp.broadcast_to(jnp.arange(block)[:, None], index.shape)
        zeros = jnp.zeros((block, num_memories), jnp.float32)
        counts = zeros.at[row_ids, flat_ids].add(entry, mode="drop")  # A [W, M]
        sums = zeros.at[row_ids, flat_ids].add(value * entry, mode="drop")  # B
        gram = _add_row_terms(stats.gram_packed, _pack_outer(outer), counts)
        rhs = _add_row_terms(
            _add_row_terms(stats.rhs_memory_last, per_entry, counts), per_value, sums
        )
        touched = jnp.sum(counts, axis=0) > 0.5  # [M]

        # 2. The touched memories, exactly, from their statistics: one fused
        # solve over all M (memory last), kept only where touched.
        weights = _solve_packed(gram, rhs - mean * _first_column(gram), l2)  # [D, M]
        coefficients = jnp.where(touched, weights, old_coefficients)
    else:
        # Large M: per-entry scatters over the block's W K entries only.
        ids = flat_ids.reshape(-1)
        delta_gram = entry[None] * _pack_outer(outer).T[..., None]  # [P, W, K]
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

        # 2. Every memory the block touches, exactly: one fused solve over the
        # gathered entries (memory last).
        gather_ids = index.reshape(-1)
        gram_m = gram[:, gather_ids]  # [P, W*K]
        weights = _solve_packed(
            gram_m, rhs[:, gather_ids] - mean * _first_column(gram_m), l2
        )
        # Duplicated ids carry bitwise-identical solutions: the scatter is exact.
        coefficients = old_coefficients.at[:, ids].set(weights, mode="drop")
    # A dropped newest row (history full) was clipped onto a real row: write
    # only valid rows, so no two writes ever target one slot.
    write_rows = jnp.where(valid, rows, capacity)
    return _finish(
        state,
        coefficients,
        gram,
        rhs,
        mean,
        write_rows,
        new_bias,
        new_factors,
        next_cursor,
    )


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
    """:func:`update` for a history kept as an :class:`~.entry_log.EntryLog`.

    The same sweep (the same rows, solves and statistics' change), over the
    block's entries read from the log and compacted into ``block_entries``
    slots (default ``W K``: every row of the block, as :func:`update`), so its
    cost follows the entries the block holds: the query solves are sums over
    the entries, the statistics move by ``B`` scalar scatters and a
    contraction over the ``W`` rows (as :func:`update`), and the memory solves
    run over the ``B`` gathered entries, or densely over ``M`` (masked) while
    ``M <= 2 B`` (there the dense solve is the cheaper one). With a
    smaller ``block_entries`` the earlier rows that do not fit are left for
    the next step (the cursor stops at the first of them).

    Args:
      state: as for :func:`update`, with ``history_log`` an ``EntryLog``.
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
        dense = num_memories <= _DENSE_FACTOR * block_entries
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
    solution = _solve_batch_last(gram_q, rhs_q, l2)  # [D, W]
    new_bias = jnp.where(visited, solution[0], old_bias)
    new_factors = jnp.where(visited[:, None], solution[1:].T, old_factors)

    # Per-row coefficients of the statistics' change, as in update.
    keep_old = in_stats.astype(jnp.float32)[:, None]
    x_old_full = linalg.with_intercept(old_factors)
    x_old = x_old_full * keep_old  # [W, D]
    x_new = linalg.with_intercept(new_factors)
    outer = (
        x_new[:, :, None] * x_new[:, None, :]
        - x_old[:, :, None] * x_old_full[:, None, :]
    )  # [W, D, D]
    per_value = x_new - x_old
    per_entry = old_bias[:, None] * x_old - new_bias[:, None] * x_new
    ids = jnp.where(mask, index, num_memories)  # masked: dropped
    old_coefficients = jnp.concatenate(
        [state.memory_bias[None], state.memory_factors.T]
    )  # [D, M]
    # The statistics move as scalars (B scalar scatters, one contraction over
    # the W rows), as in update's dense path.
    zeros = jnp.zeros((block, num_memories), jnp.float32)
    counts = zeros.at[entry_row, ids].add(entry, mode="drop")  # A [W, M]
    sums = zeros.at[entry_row, ids].add(value * entry, mode="drop")  # B
    gram = _add_row_terms(stats.gram_packed, _pack_outer(outer), counts)
    rhs = _add_row_terms(
        _add_row_terms(stats.rhs_memory_last, per_entry, counts), per_value, sums
    )

    # 2. Every memory the block touches, exactly: one fused solve (batch last),
    # over all M kept where touched, or over the block's gathered entries.
    if dense:
        touched = jnp.sum(counts, axis=0) > 0.5
        weights = _solve_packed(gram, rhs - mean * _first_column(gram), l2)
        coefficients = jnp.where(touched, weights, old_coefficients)
    else:
        gram_m = gram[:, index]  # [P, B]
        weights = _solve_packed(
            gram_m, rhs[:, index] - mean * _first_column(gram_m), l2
        )
        # Duplicated ids carry bitwise-identical solutions: the scatter is exact.
        coefficients = old_coefficients.at[:, ids].set(weights, mode="drop")
    write_rows = jnp.where(visited, rows, capacity)
    return _finish(
        state,
        coefficients,
        gram,
        rhs,
        mean,
        write_rows,
        new_bias,
        new_factors,
        next_cursor,
    )


def history_stats(state: SolverState) -> IncrementalStats:
    """Recomputes the statistics from a state's whole history (``O(Q K r^2)``).

    For checks (the carried statistics must equal these up to rounding) and to
    start the incremental solver from a state another solver produced. The
    cursor is kept from ``state.solver_extras`` when it holds one, else 0.
    """
    num_memories = state.memory_bias.shape[0]
    if isinstance(state.history_log, entry_log.EntryLog):
        query, memory, value, mask = entry_log.entries(state.history_log, state.count)
    else:
        capacity, width = state.obs_index.shape
        rows = jnp.arange(capacity) < state.count
        mask = (state.obs_mask & rows[:, None]).reshape(-1)
        query = jnp.repeat(jnp.arange(capacity), width)
        memory = state.obs_index.reshape(-1)
        value = state.obs_value.reshape(-1)
    features = linalg.with_intercept(state.query_factors)[query]
    targets = value - state.query_bias[query]
    gram, rhs = linalg.segment_normal_equations(
        features, targets, mask, memory, num_memories
    )
    extras = state.solver_extras
    cursor = (
        extras.cursor
        if isinstance(extras, IncrementalStats)
        else jnp.zeros((), jnp.int32)
    )
    packed = linalg.pack_lower(jnp.moveaxis(gram, 0, -1), axes=(0, 1))
    return IncrementalStats(packed, rhs.T, cursor)


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
    "history_stats",
    "init_stats",
    "refresh_rows",
    "small_ridge_solve",
    "block_entries_of_log",
    "update",
    "update_from_log",
]
