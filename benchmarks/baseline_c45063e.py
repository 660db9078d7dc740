"""Frozen baseline: the incremental step of commit c45063e, for paired benchmarks.

Not part of the library. ``bench_solver.py`` runs this next to the current
step in one process (same streams, keys and machine load), so the ratio of the
two is measured side by side. What is frozen here, verbatim from c45063e:

* ``earm_jax/incremental.py`` (the update: [W K, D, D] statistics scatter,
  per-entry memory solves on batch-first inputs), below;
* ``earm_jax/_linalg.py``'s helpers (``ridge_solve`` is the LU solve that the
  fold-in used), as ``_linalg``;
* ``earm_jax/policies/anchors.py``'s samplers (two stable argsorts per rank).

:func:`register` adds the algorithm as ``"incremental_c45063e"`` to the solver
registry of this process only; :func:`baseline_policy` is the paper policy
with the frozen samplers; trace the baseline inside :func:`frozen_fold_in` so
that the shared fold-in (``earm_jax.core.model.fold_in``) uses the old LU
solve too. The online loop itself (``online.py``) is unchanged since c45063e
apart from module paths.
"""

from __future__ import annotations

import contextlib
import types
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.base import AnchorFn, Policy, Query
from earm_jax.types import Array, ArrayLike, PRNGKey

# ------------------------------------------------ c45063e: earm_jax/_linalg.py
_PRECISION = jax.lax.Precision.HIGHEST


def with_intercept(factors: ArrayLike) -> Array:
    """Prepends a column of ones: ``[..., R] -> [..., R+1]`` (bias + factors)."""
    factors = jnp.asarray(factors)
    ones = jnp.ones(factors.shape[:-1] + (1,), factors.dtype)
    return jnp.concatenate([ones, factors], axis=-1)


def normal_equations(
    features: ArrayLike, targets: ArrayLike, mask: ArrayLike
) -> tuple[Array, Array]:
    r"""Masked normal equations of least squares, batched over leading axes.

    .. math:: G = \sum_k m_k x_k x_k^\top, \quad h = \sum_k m_k z_k x_k

    Args:
      features: ``[..., K, D]`` regressors ``x_k``.
      targets: ``[..., K]`` targets ``z_k``.
      mask: ``[..., K]`` which rows count.

    Returns:
      ``(gram [..., D, D], rhs [..., D])``.
    """
    weights = jnp.asarray(mask, jnp.float32)
    features = jnp.asarray(features) * weights[..., None]
    targets = jnp.where(jnp.asarray(mask), jnp.asarray(targets), 0.0)
    gram = jnp.einsum("...kd,...ke->...de", features, features, precision=_PRECISION)
    rhs = jnp.einsum("...kd,...k->...d", features, targets, precision=_PRECISION)
    return gram, rhs


def ridge_solve(gram: ArrayLike, rhs: ArrayLike, l2: float) -> Array:
    r"""Solves :math:`(G + \lambda I) w = h`, batched over leading axes.

    ``l2 > 0`` keeps every system positive definite, also with no observations
    (then ``w = 0``: the prior).
    """
    gram = jnp.asarray(gram)
    eye = jnp.eye(gram.shape[-1], dtype=gram.dtype)
    return jnp.linalg.solve(gram + l2 * eye, jnp.asarray(rhs)[..., None])[..., 0]


def segment_normal_equations(
    features: ArrayLike,
    targets: ArrayLike,
    mask: ArrayLike,
    segment_ids: ArrayLike,
    num_segments: int,
) -> tuple[Array, Array]:
    """Normal equations accumulated per segment (e.g. per memory) from flat rows.

    Args:
      features: ``[L, D]``; targets: ``[L]``; mask: ``[L]``;
      segment_ids: ``int32[L]`` which segment each row belongs to.
      num_segments: number of segments (static).

    Returns:
      ``(gram [num_segments, D, D], rhs [num_segments, D])``.
    """
    weights = jnp.asarray(mask, jnp.float32)
    features = jnp.asarray(features) * weights[:, None]
    targets = jnp.where(jnp.asarray(mask), jnp.asarray(targets), 0.0)
    outer = features[:, :, None] * features[:, None, :]
    gram = jax.ops.segment_sum(outer, segment_ids, num_segments=num_segments)
    rhs = jax.ops.segment_sum(
        features * targets[:, None], segment_ids, num_segments=num_segments
    )
    return gram, rhs


_linalg = types.SimpleNamespace(
    with_intercept=with_intercept,
    normal_equations=normal_equations,
    ridge_solve=ridge_solve,
    segment_normal_equations=segment_normal_equations,
)


# ---------------------------------------------- c45063e: earm_jax/incremental.py
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
    :func:`earm_jax._linalg.ridge_solve`.

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
        return _linalg.ridge_solve(gram, rhs, l2)
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


def update(state: Any, l2: float, num_refresh: int) -> Any:
    """One bounded ALS sweep after a query's row was stored (see the module doc).

    Args:
      state: a :class:`~earm_jax.solver.SolverState` right after the new row was
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
    features = _linalg.with_intercept(memory_factors[index])  # [W, K, D]
    targets = value - mean - memory_bias[index]
    gram_q, rhs_q = _linalg.normal_equations(features, targets, mask)
    solution = small_ridge_solve(gram_q, rhs_q, l2)  # [W, D]
    new_bias = jnp.where(valid, solution[:, 0], old_bias)
    new_factors = jnp.where(valid[:, None], solution[:, 1:], old_factors)

    # Move the statistics of the block's memories from the old x_s to the new.
    x_old = _linalg.with_intercept(old_factors)  # [W, D]
    x_new = _linalg.with_intercept(new_factors)
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
    coefficients = _linalg.with_intercept(memory_factors)
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


def history_stats(state: Any) -> IncrementalStats:
    """Recomputes the statistics from a state's whole history (``O(Q K r^2)``).

    For checks (the carried statistics must equal these up to rounding) and to
    start the incremental solver from a state another solver produced. The
    cursor is kept from ``state.solver_extras`` when it holds one, else 0.
    """
    capacity, width = state.obs_index.shape
    num_memories = state.memory_bias.shape[0]
    rows = jnp.arange(capacity) < state.count
    mask = (state.obs_mask & rows[:, None]).reshape(-1)
    features = jnp.repeat(_linalg.with_intercept(state.query_factors), width, axis=0)
    targets = (state.obs_value - state.query_bias[:, None]).reshape(-1)
    gram, rhs = _linalg.segment_normal_equations(
        features, targets, mask, state.obs_index.reshape(-1), num_memories
    )
    extras = state.solver_extras
    cursor = (
        extras.cursor
        if isinstance(extras, IncrementalStats)
        else jnp.zeros((), jnp.int32)
    )
    return IncrementalStats(gram, rhs, cursor)


# ------------------------------------------ c45063e: earm_jax/policies/anchors.py
def _ranks(priority: ArrayLike, eligible: ArrayLike) -> Array:
    """Rank (0 = best, descending priority) of each eligible item; ineligible last."""
    priority = jnp.where(eligible, priority, -jnp.inf)
    order = jnp.argsort(-priority, stable=True)
    return jnp.argsort(order, stable=True)


def top_similarity_anchors() -> AnchorFn:
    """The ``budget`` most similar usable candidates (no exploration)."""

    def anchors(
        key: PRNGKey, query: Query, budget: ArrayLike, usable: ArrayLike
    ) -> Array:
        del key
        ranks = _ranks(query.similarity, usable)
        return (ranks < budget) & usable

    return anchors


def uniform_anchors() -> AnchorFn:
    """``budget`` usable candidates uniformly at random."""

    def anchors(
        key: PRNGKey, query: Query, budget: ArrayLike, usable: ArrayLike
    ) -> Array:
        priority = jax.random.uniform(key, jnp.shape(query.similarity))
        return (_ranks(priority, usable) < budget) & usable

    return anchors


def stratified_anchors(high_fraction: float = 0.1) -> AnchorFn:
    """Half the budget from the high-similarity stratum, half from the rest.

    DESIGN §2.3.

    The stratum ``H`` is the top ``ceil(high_fraction * n)`` usable candidates by
    similarity (``n`` usable). ``ceil(budget / 2)`` anchors are drawn uniformly
    from ``H`` and the rest uniformly from the others; when one side has too few
    candidates the other side makes up the difference, so exactly
    ``min(budget, n)`` anchors are chosen.

    Args:
      high_fraction: size of the stratum as a fraction of the usable pool. 0.1 is
        the measured default (DESIGN §2.3): a larger stratum leaves much of the
        semantic top unscored.
    """
    if not 0.0 <= high_fraction <= 1.0:
        raise ValueError(f"high_fraction must be in [0, 1], got {high_fraction!r}")

    def anchors(
        key: PRNGKey, query: Query, budget: ArrayLike, usable: ArrayLike
    ) -> Array:
        usable = jnp.asarray(usable, bool)
        num_usable = jnp.sum(usable)
        budget = jnp.minimum(jnp.asarray(budget, jnp.int32), num_usable)
        num_high = jnp.ceil(high_fraction * num_usable).astype(jnp.int32)
        in_high = (_ranks(query.similarity, usable) < num_high) & usable
        in_rest = usable & ~in_high
        size_high, size_rest = jnp.sum(in_high), jnp.sum(in_rest)
        take_high = jnp.minimum(size_high, (budget + 1) // 2)
        take_rest = jnp.minimum(size_rest, budget - take_high)
        take_high = jnp.minimum(size_high, budget - take_rest)
        priority = jax.random.uniform(key, jnp.shape(query.similarity))
        chosen_high = (_ranks(priority, in_high) < take_high) & in_high
        chosen_rest = (_ranks(priority, in_rest) < take_rest) & in_rest
        return chosen_high | chosen_rest

    return anchors


# ------------------------------------------------------------ wiring (new code)

NAME = "incremental_c45063e"


def _algorithm():
    from earm_jax.core.padding import pad
    from earm_jax.core.solvers.base import SolverAlgorithm, no_refit

    def grow(extras, num_memories, capacity):
        return IncrementalStats(
            pad(extras.gram, num_memories), pad(extras.rhs, num_memories), extras.cursor
        )

    return SolverAlgorithm(
        name=NAME,
        init_extras=lambda config, params: init_stats(config.num_memories, config.rank),
        refit=no_refit,
        update=lambda state, config: update(state, config.l2, config.refresh_rows),
        grow_extras=grow,
        extras_from_history=lambda state, config: history_stats(state),
    )


def register() -> str:
    """Adds the frozen step to this process's solver registry; returns its name."""
    from earm_jax.core import solvers

    solvers.SOLVERS.setdefault(NAME, _algorithm())
    return NAME


def baseline_policy(pool_size: int = 200, high_fraction: float = 0.1) -> Policy:
    """The paper policy of c45063e: the stage schedule, argsort-based sampling."""
    from earm_jax.policies import paper_policy

    return paper_policy(pool_size=pool_size)._replace(
        anchors=stratified_anchors(high_fraction)
    )


@contextlib.contextmanager
def frozen_fold_in():
    """While tracing, the shared fold-in solves with c45063e's LU ``ridge_solve``."""
    from earm_jax.core import linalg

    current = linalg.ridge_solve
    linalg.ridge_solve = ridge_solve
    try:
        yield
    finally:
        linalg.ridge_solve = current
