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

Everything here is pure and shape-static.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.core import linalg
from earm_jax.core.config import Parameters, SolverConfig, SolverState
from earm_jax.core.padding import pad
from earm_jax.core.solvers.base import SolverAlgorithm, no_refit
from earm_jax.types import Array, ArrayLike

# Above this system size an unrolled Cholesky is too much code to trace; the
# generic (LU) solve of ``_linalg`` takes over.
_MAX_UNROLLED = 13


class IncrementalStats(NamedTuple):
    r"""Per-memory sufficient statistics carried in ``SolverState.solver_extras``.

    Attributes:
      gram: ``float32[M, R+1, R+1]`` :math:`G_m = \sum_{s \ni m} x_s x_s^\top`
        with :math:`x_s = (1, v_s)`, over the stored rows that hold ``m``.
      rhs: ``float32[M, R+1]`` :math:`h_m = \sum_{s \ni m} (y_{m,s} - c_s) x_s`.
      cursor: ``int32[]`` the first history row of the next round-robin refresh.
    """

    gram: Array
    rhs: Array
    cursor: Array


def init_stats(num_memories: int, rank: int) -> IncrementalStats:
    """Empty statistics (no history) for ``num_memories`` memories of ``rank``."""
    dim = rank + 1
    return IncrementalStats(
        gram=jnp.zeros((num_memories, dim, dim), jnp.float32),
        rhs=jnp.zeros((num_memories, dim), jnp.float32),
        cursor=jnp.zeros((), jnp.int32),
    )


def small_ridge_solve(gram: ArrayLike, rhs: ArrayLike, l2: float) -> Array:
    r"""Solves :math:`(G + \lambda I) w = h` for many small SPD systems.

    An unrolled Cholesky vectorised over the batch (the systems here are
    ``(r+1) x (r+1)``, r <= 12; the unrolled code grows as r^3 and
    slows compilation beyond that): elementwise operations only, which XLA fuses
    into one loop on CPU and one kernel on GPU, several times faster than a
    batched LAPACK / cuSOLVER call per tiny matrix. Larger systems use
    :func:`earm_jax.core.linalg.ridge_solve`.

    Args:
      gram: ``float32[..., D, D]`` symmetric positive semi-definite.
      rhs: ``float32[..., D]``.
      l2: ridge :math:`\lambda > 0` (keeps every system positive definite).

    Returns:
      ``float32[..., D]``.
    """
    gram = jnp.asarray(gram)
    rhs = jnp.asarray(rhs)
    dim = gram.shape[-1]
    if dim > _MAX_UNROLLED:
        return linalg.ridge_solve(gram, rhs, l2)
    g = jnp.moveaxis(gram, (-2, -1), (0, 1))  # [D, D, ...]: contiguous slices
    h = jnp.moveaxis(rhs, -1, 0)
    lower = [[None] * dim for _ in range(dim)]
    inverse_diagonal = [None] * dim
    for j in range(dim):
        total = g[j, j] + l2
        for k in range(j):
            total = total - lower[j][k] * lower[j][k]
        inverse = jax.lax.rsqrt(jnp.maximum(total, 1e-30))
        inverse_diagonal[j] = inverse
        for i in range(j + 1, dim):
            total = g[i, j]
            for k in range(j):
                total = total - lower[i][k] * lower[j][k]
            lower[i][j] = total * inverse
    forward = [None] * dim
    for i in range(dim):
        total = h[i]
        for k in range(i):
            total = total - lower[i][k] * forward[k]
        forward[i] = total * inverse_diagonal[i]
    solution = [None] * dim
    for i in reversed(range(dim)):
        total = forward[i]
        for k in range(i + 1, dim):
            total = total - lower[k][i] * solution[k]
        solution[i] = total * inverse_diagonal[i]
    return jnp.stack(solution, axis=-1)


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


def take_rows(buffer: Array, rows: Array) -> Array:
    """``buffer[rows]`` as a loop of dynamic slices.

    The loop keeps XLA from fusing these reads into the write of the new row
    into the same history buffer; fused, they read the old buffer and force a
    copy of the whole buffer per query (a cost growing with the capacity).
    """

    def body(k: Array, out: Array) -> Array:
        row = jax.lax.dynamic_index_in_dim(buffer, rows[k], keepdims=False)
        return jax.lax.dynamic_update_index_in_dim(out, row, k, 0)

    out = jnp.zeros(rows.shape + buffer.shape[1:], buffer.dtype)
    return jax.lax.fori_loop(0, rows.shape[0], body, out)


def put_rows(buffer: Array, rows: Array, values: Array) -> Array:
    """``buffer[rows] = values`` as a loop of in-place updates; rows outside the
    buffer (``>= len(buffer)``) are skipped."""
    size = buffer.shape[0]

    def body(k: Array, out: Array) -> Array:
        slot = jnp.clip(rows[k], 0, size - 1)
        current = jax.lax.dynamic_index_in_dim(out, slot, keepdims=False)
        row = jnp.where(rows[k] < size, values[k], current)
        return jax.lax.dynamic_update_index_in_dim(out, row, slot, 0)

    return jax.lax.fori_loop(0, rows.shape[0], body, buffer)


def _row_outer(features: Array) -> Array:
    return features[..., :, None] * features[..., None, :]


def update(state: SolverState, l2: float, num_refresh: int) -> SolverState:
    """One bounded ALS sweep after a query's row was stored (see the module doc).

    Args:
      state: a :class:`~earm_jax.core.config.SolverState` right after the new row was
        stored (``count`` already incremented), with :class:`IncrementalStats`
        in ``solver_extras`` consistent with the rows before it.
      l2: the ridge penalty.
      num_refresh: earlier rows re-solved per query (static).

    Returns:
      The state with the block's query parameters, the touched memories'
      parameters, the mean and the statistics updated.
    """
    stats: IncrementalStats = state.solver_extras
    capacity, width = state.obs_index.shape
    num_memories = state.memory_bias.shape[0]
    rows, valid, in_stats, next_cursor = refresh_rows(
        state.count, stats.cursor, capacity, num_refresh
    )
    index = take_rows(state.obs_index, rows)  # [W, K]
    value = take_rows(state.obs_value, rows)
    mask = take_rows(state.obs_mask, rows) & valid[:, None]
    old_bias = take_rows(state.query_bias, rows)
    old_factors = take_rows(state.query_factors, rows)
    mean = state.global_mean

    # 1. Queries of the block, exactly, against the current memories. Every
    # memory in a stored row has history, so its factors are the effective ones.
    memory_factors = state.memory_factors
    memory_bias = state.memory_bias
    features = linalg.with_intercept(memory_factors[index])  # [W, K, D]
    targets = value - mean - memory_bias[index]
    gram_q, rhs_q = linalg.normal_equations(features, targets, mask)
    solution = small_ridge_solve(gram_q, rhs_q, l2)  # [W, D]
    new_bias = jnp.where(valid, solution[:, 0], old_bias)
    new_factors = jnp.where(valid[:, None], solution[:, 1:], old_factors)

    # Move the statistics of the block's memories from the old x_s to the new.
    x_old = linalg.with_intercept(old_factors)  # [W, D]
    x_new = linalg.with_intercept(new_factors)
    keep_old = in_stats.astype(jnp.float32)
    delta_gram = _row_outer(x_new) - keep_old[:, None, None] * _row_outer(x_old)
    entry = mask.astype(jnp.float32)[..., None]  # [W, K, 1]
    delta_rhs = (value - new_bias[:, None])[..., None] * x_new[:, None, :] - keep_old[
        :, None, None
    ] * (value - old_bias[:, None])[..., None] * x_old[:, None, :]
    delta_rhs = delta_rhs * entry
    delta_gram = (
        jnp.broadcast_to(delta_gram[:, None], mask.shape + delta_gram.shape[-2:])
        * entry[..., None]
    )
    flat_ids = jnp.where(mask, index, num_memories).reshape(-1)  # masked: dropped
    dim = x_new.shape[-1]
    gram = stats.gram.at[flat_ids].add(delta_gram.reshape(-1, dim, dim), mode="drop")
    rhs = stats.rhs.at[flat_ids].add(delta_rhs.reshape(-1, dim), mode="drop")

    # 2. Every memory the block touches, exactly, from its statistics.
    gather_ids = index.reshape(-1)
    gram_m = gram[gather_ids]  # [W*K, D, D]
    rhs_m = rhs[gather_ids] - mean * gram_m[:, 0, :]
    weights = small_ridge_solve(gram_m, rhs_m, l2)
    # Duplicated ids carry bitwise-identical solutions, so the scatter is exact.
    memory_bias = memory_bias.at[flat_ids].set(weights[:, 0], mode="drop")
    memory_factors = memory_factors.at[flat_ids].set(weights[:, 1:], mode="drop")

    # 3. The mean, exactly, from the statistics (unseen memories have G = 0).
    coefficients = linalg.with_intercept(memory_factors)
    coefficients = coefficients.at[:, 0].set(memory_bias)  # w_m = (b_m, u_m)
    num_observed = jnp.sum(gram[:, 0, 0])
    total = jnp.sum(rhs[:, 0]) - jnp.sum(coefficients * gram[:, 0, :])
    mean = jnp.where(num_observed > 0.5, total / jnp.maximum(num_observed, 1.0), mean)

    # A dropped newest row (history full) was clipped onto a real row: write
    # only valid rows, so no two writes ever target one slot.
    write_rows = jnp.where(valid, rows, capacity)
    return state._replace(
        global_mean=mean,
        memory_bias=memory_bias,
        memory_factors=memory_factors,
        query_bias=put_rows(state.query_bias, write_rows, new_bias),
        query_factors=put_rows(state.query_factors, write_rows, new_factors),
        solver_extras=IncrementalStats(gram, rhs, next_cursor),
    )


def history_stats(state: SolverState) -> IncrementalStats:
    """Recomputes the statistics from a state's whole history (``O(Q K r^2)``).

    For checks (the carried statistics must equal these up to rounding) and to
    start the incremental solver from a state another solver produced. The
    cursor is kept from ``state.solver_extras`` when it holds one, else 0.
    """
    capacity, width = state.obs_index.shape
    num_memories = state.memory_bias.shape[0]
    rows = jnp.arange(capacity) < state.count
    mask = (state.obs_mask & rows[:, None]).reshape(-1)
    features = jnp.repeat(linalg.with_intercept(state.query_factors), width, axis=0)
    targets = (state.obs_value - state.query_bias[:, None]).reshape(-1)
    gram, rhs = linalg.segment_normal_equations(
        features, targets, mask, state.obs_index.reshape(-1), num_memories
    )
    extras = state.solver_extras
    cursor = (
        extras.cursor
        if isinstance(extras, IncrementalStats)
        else jnp.zeros((), jnp.int32)
    )
    return IncrementalStats(gram, rhs, cursor)


def _init_extras(config: SolverConfig, params: Parameters) -> IncrementalStats:
    return init_stats(config.num_memories, config.rank)


def _update(state: SolverState, config: SolverConfig) -> SolverState:
    return update(state, config.l2, config.refresh_rows)


def _grow_extras(
    extras: IncrementalStats, num_memories: int, capacity: int
) -> IncrementalStats:
    # New memories have no history: zero statistics. The round-robin cursor
    # stays valid (it is taken modulo the number of stored rows).
    return IncrementalStats(
        gram=pad(extras.gram, num_memories),
        rhs=pad(extras.rhs, num_memories),
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
    "update",
]
