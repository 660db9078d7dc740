r"""The ``"als"`` solver: alternating exact ridge solves over the whole history.

Each query refits every past query's :math:`(c_s, v_s)`, then every memory's
:math:`(b_m, u_m)`, then :math:`\mu`, each block in closed form, warm-started
from the parameters after the last query (``num_sweeps`` sweeps, or until the
relative loss decrease falls below ``tolerance``). Cost per query grows with the
history (``O(Q K r^2)`` per sweep); see :mod:`earm_jax.core.solvers.incremental`
for the constant-cost alternative.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.core import linalg
from earm_jax.core.config import Parameters, SolverConfig, SolverState
from earm_jax.core.model import (
    effective_memory_factors,
    history_rows,
    history_without_mean,
    loss,
)
from earm_jax.core.solvers.base import SolverAlgorithm, no_update


class AlsExtras(NamedTuple):
    """The ``"als"`` solver carries nothing between queries besides the parameters."""


def _solve_queries(params: Parameters, state: SolverState, l2: float) -> Parameters:
    """Exact block update of every past query's (c, v); other slots stay 0."""
    rows = history_rows(state)
    mask = state.obs_mask & rows[:, None]
    factors = effective_memory_factors(params.memory_factors, state.memory_count)
    index = state.obs_index
    features = linalg.with_intercept(factors[index])  # [Q, K, R+1]
    targets = state.obs_value - params.global_mean - params.memory_bias[index]
    gram, rhs = linalg.normal_equations(features, targets, mask)
    solution = linalg.ridge_solve(gram, rhs, l2)
    solution = jnp.where(rows[:, None], solution, 0.0)
    return params._replace(query_bias=solution[:, 0], query_factors=solution[:, 1:])


def _solve_memories(params: Parameters, state: SolverState, l2: float) -> Parameters:
    """Exact block update of (b, u) of every memory with observations."""
    rows = history_rows(state)
    mask = (state.obs_mask & rows[:, None]).reshape(-1)
    index = state.obs_index.reshape(-1)
    query_features = linalg.with_intercept(params.query_factors)  # [Q, R+1]
    num_per_row = state.obs_index.shape[1]
    features = jnp.repeat(query_features, num_per_row, axis=0)
    targets = (
        state.obs_value - params.global_mean - params.query_bias[:, None]
    ).reshape(-1)
    gram, rhs = linalg.segment_normal_equations(
        features, targets, mask, index, params.memory_bias.shape[0]
    )
    solution = linalg.ridge_solve(gram, rhs, l2)
    seen = state.memory_count > 0
    return params._replace(
        memory_bias=jnp.where(seen, solution[:, 0], params.memory_bias),
        memory_factors=jnp.where(seen[:, None], solution[:, 1:], params.memory_factors),
    )


def _solve_mean(params: Parameters, state: SolverState) -> Parameters:
    """Exact update of the (unpenalised) global mean; kept when there is no data."""
    rows = history_rows(state)
    mask = state.obs_mask & rows[:, None]
    rest = history_without_mean(params, state)
    total = jnp.sum(jnp.where(mask, state.obs_value - rest, 0.0))
    num = jnp.sum(mask)
    mean = jnp.where(
        num > 0, total / jnp.maximum(num, 1).astype(total.dtype), params.global_mean
    )
    return params._replace(global_mean=mean)


def als_sweep(params: Parameters, state: SolverState, l2: float) -> Parameters:
    """One ALS sweep: past queries, then memories, then the mean (each exact)."""
    params = _solve_queries(params, state, l2)
    params = _solve_memories(params, state, l2)
    return _solve_mean(params, state)


def refit(
    params: Parameters, extras: AlsExtras, state: SolverState, config: SolverConfig
) -> tuple[Parameters, AlsExtras]:
    """Warm-started sweeps on the history of queries ``< state.count``."""
    if config.tolerance <= 0:
        params = jax.lax.fori_loop(
            0, config.num_sweeps, lambda _, p: als_sweep(p, state, config.l2), params
        )
        return params, extras

    def cond(carry):
        sweep, _, previous, current = carry
        improving = (previous - current) > config.tolerance * jnp.maximum(
            current, 1e-12
        )
        return (sweep < config.num_sweeps) & ((sweep == 0) | improving)

    def body(carry):
        sweep, p, _, current = carry
        p = als_sweep(p, state, config.l2)
        return sweep + 1, p, current, loss(p, state, config.l2)

    start = loss(params, state, config.l2)
    _, params, _, _ = jax.lax.while_loop(cond, body, (0, params, jnp.inf, start))
    return params, extras


def init_extras(config: SolverConfig, params: Parameters) -> AlsExtras:
    return AlsExtras()


def grow_extras(extras: AlsExtras, num_memories: int, capacity: int) -> AlsExtras:
    return extras


def extras_from_history(state: SolverState, config: SolverConfig) -> AlsExtras:
    return AlsExtras()


ALGORITHM = SolverAlgorithm(
    name="als",
    init_extras=init_extras,
    refit=refit,
    update=no_update,
    grow_extras=grow_extras,
    extras_from_history=extras_from_history,
)

__all__ = ["ALGORITHM", "AlsExtras", "als_sweep", "refit"]
