r"""The incremental solver's per-memory sufficient statistics, and the pieces
of a step that both history layouts share.

:mod:`earm_jax.core.solvers.incremental` holds the algorithm (and its
documentation) over a history of rows, :mod:`earm_jax.core.solvers.incremental_log`
the same step over a history kept as a log of entries; both call the pieces
here: the block of rows a step visits and their reads and writes, the change of
the statistics when a row's query parameters move, the memory solves, and the
exact mean.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.core import entry_log, linalg
from earm_jax.core.config import SolverState
from earm_jax.types import Array, ArrayLike

# The memory solves of a step run densely over all M memories (masked to the
# touched ones) while M <= DENSE_FACTOR * (entries in the block); beyond that
# they run over the block's gathered entries.
DENSE_FACTOR = 2


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


def solve_batch_last(gram_t: Array, rhs_t: Array, l2: float) -> Array:
    """``[D, D, B]``, ``[D, B]`` -> ``[D, B]`` (unrolled Cholesky, LU if large)."""
    if gram_t.shape[0] <= linalg.MAX_UNROLLED:
        return linalg.cholesky_solve_batch_last(gram_t, rhs_t, l2)
    solution = linalg.ridge_solve(jnp.moveaxis(gram_t, -1, 0), rhs_t.T, l2)
    return solution.T


def solve_packed(packed: Array, rhs_t: Array, l2: float) -> Array:
    """``[P, B]`` packed, ``[D, B]`` -> ``[D, B]`` (unrolled Cholesky, LU if
    large)."""
    dim = rhs_t.shape[0]
    if dim <= linalg.MAX_UNROLLED:
        return linalg.cholesky_solve_packed(packed, rhs_t, l2)
    return solve_batch_last(linalg.unpack_lower(packed, dim, axis=0), rhs_t, l2)


def first_column(packed: Array) -> Array:
    """``[P, ...]`` packed -> ``[D, ...]``: the first column ``G[:, 0]``
    (``G_m[:, 0] = sum_s x_s``, since ``x_s = (1, v_s)``)."""
    dim = int(round((np.sqrt(8 * packed.shape[0] + 1) - 1) / 2))
    # Static slices, not a gather: they fuse into the consumers.
    return jnp.stack([packed[linalg.packed_index(i, 0)] for i in range(dim)])


def pack_outer(outer: Array) -> Array:
    """``[W, D, D]`` symmetric -> ``[W, P]``."""
    return linalg.pack_lower(outer, axes=(-2, -1))


def add_row_terms(base: Array, coefficients: Array, weights: Array) -> Array:
    """``base + sum_w coefficients[w, :, None] * weights[w, None, :]``.

    ``[P, M] + [W, P] x [W, M]``, written as ``W`` elementwise terms: one
    loop fusion with the add. As a ``dot`` (contraction over ``W = 9``, a
    poor shape for a matrix unit), batched over streams, it and its add were
    a fifth of the batched step on CPU.
    """
    total = base
    for row in range(coefficients.shape[0]):
        total = total + coefficients[row][:, None] * weights[row][None, :]
    return total


def finish_step(
    state: SolverState,
    coefficients: Array,
    stats: IncrementalStats,
    write_rows: Array,
    new_bias: Array,
    new_factors: Array,
) -> SolverState:
    """The end of both layouts' steps: the exact mean from the new statistics
    (unseen memories have G = 0; with no observation the mean is kept), then
    the block's query parameters (at ``write_rows``; out of range: skipped) and
    the memory coefficients ``[D, M]`` written back."""
    gram, rhs = stats.gram_packed, stats.rhs_memory_last
    num_observed = jnp.sum(gram[0])  # packed (0, 0): the observation counts
    total = jnp.sum(rhs[0]) - jnp.sum(coefficients * first_column(gram))
    mean = jnp.where(
        num_observed > 0.5,
        total / jnp.maximum(num_observed, 1.0),
        state.global_mean,
    )
    return state._replace(
        global_mean=mean,
        memory_bias=coefficients[0],
        memory_factors=coefficients[1:].T,
        query_bias=put_rows(state.query_bias, write_rows, new_bias, unroll=True),
        query_factors=put_rows(
            state.query_factors, write_rows, new_factors, unroll=True
        ),
        solver_extras=stats,
    )


def old_memory_coefficients(state: SolverState) -> Array:
    """``float32[D, M]``: every memory's ``w_m = (b_m, u_m)``, memory last."""
    return jnp.concatenate([state.memory_bias[None], state.memory_factors.T])


def query_solutions(
    solution: Array,
    solved: Array,
    old_bias: Array,
    old_factors: Array,
    in_stats: Array,
) -> tuple[Array, Array, tuple[Array, Array, Array]]:
    r"""The block rows' new query parameters, and the coefficients of the
    statistics' change they cause.

    Rows not ``solved`` keep ``(c_w, v_w)``. With :math:`A[w, m]` the observed
    entries of memory ``m`` in row ``w`` and :math:`B[w, m]` the sum of their
    values, :math:`dG_m = \sum_w A[w, m]\,\mathrm{outer}_w` and
    :math:`dh_m = \sum_w B[w, m]\,\mathrm{per\_value}_w + A[w, m]\,
    \mathrm{per\_entry}_w`; the old :math:`x_w` counts only for rows already
    in the statistics (``in_stats``).

    Args:
      solution: ``float32[D, W]`` the block's exact query solves.
      solved: ``bool[W]`` rows whose solve is taken.
      old_bias, old_factors: ``float32[W]``, ``float32[W, R]`` before the step.
      in_stats: ``bool[W]`` rows already counted in the statistics.

    Returns:
      ``(new_bias [W], new_factors [W, R], (outer [W, D, D], per_value [W, D],
      per_entry [W, D]))``.
    """
    new_bias = jnp.where(solved, solution[0], old_bias)
    new_factors = jnp.where(solved[:, None], solution[1:].T, old_factors)
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
    return new_bias, new_factors, (outer, per_value, per_entry)


def move_statistics_by_rows(
    stats: IncrementalStats,
    changes: tuple[Array, Array, Array],
    entry_row: Array,
    memory_ids: Array,
    entry: Array,
    value: Array,
    num_rows: int,
) -> tuple[Array, Array, Array]:
    """The statistics after the block's rows moved: ``A`` and ``B`` by scalar
    scatter-adds of the entries, then one contraction over the ``W`` rows.

    Args:
      stats: the statistics before the step.
      changes: the change coefficients :func:`query_solutions` returns.
      entry_row, memory_ids, entry, value: per entry (any shape, the same for
        all four): its block row, its memory (``M`` where masked: dropped),
        ``1.0`` where observed, its value.
      num_rows: ``W`` (static).

    Returns:
      ``(gram_packed [P, M], rhs_memory_last [D, M], counts A [W, M])``.
    """
    outer, per_value, per_entry = changes
    num_memories = stats.gram_packed.shape[-1]
    zeros = jnp.zeros((num_rows, num_memories), jnp.float32)
    counts = zeros.at[entry_row, memory_ids].add(entry, mode="drop")  # A [W, M]
    sums = zeros.at[entry_row, memory_ids].add(value * entry, mode="drop")  # B
    gram = add_row_terms(stats.gram_packed, pack_outer(outer), counts)
    rhs = add_row_terms(
        add_row_terms(stats.rhs_memory_last, per_entry, counts), per_value, sums
    )
    return gram, rhs, counts


def solve_touched_memories(
    gram: Array,
    rhs: Array,
    mean: Array,
    l2: float,
    counts: Array,
    old_coefficients: Array,
) -> Array:
    """``float32[D, M]``: every memory the block touches, exactly, from its
    statistics; one fused solve over all ``M`` (memory last), kept only where
    touched (the cheaper form while ``M`` is small)."""
    touched = jnp.sum(counts, axis=0) > 0.5  # [M]
    weights = solve_packed(gram, rhs - mean * first_column(gram), l2)  # [D, M]
    return jnp.where(touched, weights, old_coefficients)


def solve_gathered_memories(
    gram: Array,
    rhs: Array,
    mean: Array,
    l2: float,
    gather_ids: Array,
    scatter_ids: Array,
    old_coefficients: Array,
) -> Array:
    """``float32[D, M]``: every memory the block touches, exactly, from its
    statistics; one fused solve over the block's gathered entries
    (``gather_ids``), written back at ``scatter_ids`` (``M`` where masked)."""
    gram_m = gram[:, gather_ids]  # [P, B]
    weights = solve_packed(gram_m, rhs[:, gather_ids] - mean * first_column(gram_m), l2)
    # Duplicated ids carry bitwise-identical solutions: the scatter is exact.
    return old_coefficients.at[:, scatter_ids].set(weights, mode="drop")


__all__ = [
    "DENSE_FACTOR",
    "IncrementalStats",
    "add_row_terms",
    "finish_step",
    "first_column",
    "history_stats",
    "init_stats",
    "move_statistics_by_rows",
    "old_memory_coefficients",
    "pack_outer",
    "put_rows",
    "refresh_rows",
    "query_solutions",
    "small_ridge_solve",
    "solve_batch_last",
    "solve_gathered_memories",
    "solve_packed",
    "solve_touched_memories",
    "take_rows",
]
