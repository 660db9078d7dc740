r"""The model of the experience matrix and its closed-form pieces (docs/method.md).

.. math:: \hat y_{m,t} = \mu + b_m + c_t + u_m \cdot v_t

with loss :math:`\sum_{observed} (y - \hat y)^2 + \lambda(\|b\|^2 + \|c\|^2 +
\|U\|^2 + \|V\|^2)`. Shared by every solver algorithm: the loss they minimise,
the prediction, the exact fold-in of a new query from its anchors alone, and the
mixed score (direct where observed, completion elsewhere).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.core import linalg
from earm_jax.core.config import Parameters, SolverState
from earm_jax.types import Array, ArrayLike


def parameters(state: SolverState) -> Parameters:
    """The model parameters held in ``state``."""
    return Parameters(
        state.global_mean,
        state.memory_bias,
        state.memory_factors,
        state.query_bias,
        state.query_factors,
    )


def effective_memory_factors(
    memory_factors: ArrayLike, memory_count: ArrayLike
) -> Array:
    """Factors of memories with history; zero for memories never observed.

    A memory without observations has no evidence for its factors, so its
    prediction is the bias-only one (:math:`\\mu + c_t`); the random init stays
    in the state only to break the symmetry of the first ALS sweep.
    """
    return jnp.where(jnp.asarray(memory_count)[:, None] > 0, memory_factors, 0.0)


def history_rows(state: SolverState) -> Array:
    """``bool[Q]``: slots that hold a past query (``< count``)."""
    return jnp.arange(state.obs_mask.shape[0]) < state.count


def history_without_mean(params: Parameters, state: SolverState) -> Array:
    """``float32[Q, K]``: :math:`b_m + c_s + u_m \\cdot v_s` at every history entry."""
    factors = effective_memory_factors(params.memory_factors, state.memory_count)
    index = state.obs_index
    return (
        params.memory_bias[index]
        + params.query_bias[:, None]
        + jnp.einsum(
            "qkr,qr->qk",
            factors[index],
            params.query_factors,
            precision=jax.lax.Precision.HIGHEST,
        )
    )


def loss(params: Parameters, state: SolverState, l2: float) -> Array:
    r"""The regularised squared loss on the history of queries ``< state.count``.

    Regularisation counts the parameters the history determines: biases and
    factors of memories with observations, and of past query slots.
    """
    rows = history_rows(state)
    mask = state.obs_mask & rows[:, None]
    seen = state.memory_count > 0
    factors = effective_memory_factors(params.memory_factors, state.memory_count)
    prediction = params.global_mean + history_without_mean(params, state)
    residual = jnp.where(mask, state.obs_value - prediction, 0.0)
    penalty = (
        jnp.sum(jnp.where(seen, params.memory_bias, 0.0) ** 2)
        + jnp.sum(factors**2)
        + jnp.sum(jnp.where(rows, params.query_bias, 0.0) ** 2)
        + jnp.sum(jnp.where(rows[:, None], params.query_factors, 0.0) ** 2)
    )
    return jnp.sum(residual**2) + l2 * penalty


def predict(
    params: Parameters,
    memory_count: ArrayLike,
    memories: ArrayLike,
    query_bias: ArrayLike,
    query_factors: ArrayLike,
) -> Array:
    """:math:`\\hat y = \\mu + b_m + c + u_m \\cdot v` for memory ids ``memories``."""
    factors = effective_memory_factors(params.memory_factors, memory_count)
    memories = jnp.asarray(memories)
    return (
        params.global_mean
        + params.memory_bias[memories]
        + query_bias
        + jnp.dot(factors[memories], query_factors, precision=jax.lax.Precision.HIGHEST)
    )


def fold_in(
    params: Parameters,
    memory_count: ArrayLike,
    memories: ArrayLike,
    values: ArrayLike,
    mask: ArrayLike,
    l2: float,
) -> tuple[Array, Array]:
    r"""The new query's :math:`(c_t, v_t)` from its own anchors, all else fixed.

    Solves :math:`\min_{c, v} \sum_{k} m_k (y_k - \mu - b_{m_k} - c - u_{m_k}\cdot v)^2
    + \lambda (c^2 + \|v\|^2)`, a ridge problem of size ``R + 1``. With no
    anchors the answer is the prior ``(0, 0)``.

    Returns:
      ``(query_bias float32[], query_factors float32[R])``.
    """
    factors = effective_memory_factors(params.memory_factors, memory_count)
    memories = jnp.asarray(memories)
    features = linalg.with_intercept(factors[memories])
    targets = jnp.asarray(values) - params.global_mean - params.memory_bias[memories]
    gram, rhs = linalg.normal_equations(features, targets, mask)
    solution = linalg.ridge_solve(gram, rhs, l2)
    return solution[0], solution[1:]


def standardised_similarity(similarity: ArrayLike, usable: ArrayLike) -> Array:
    """``float32[N]``: the similarity as a z-score over the usable candidates
    (0 elsewhere, and everywhere when the pool has no spread)."""
    usable = jnp.asarray(usable, bool)
    values = jnp.where(usable, jnp.asarray(similarity, jnp.float32), 0.0)
    count = jnp.maximum(jnp.sum(usable), 1).astype(jnp.float32)
    mean = jnp.sum(values) / count
    spread = jnp.sqrt(jnp.sum(jnp.where(usable, (values - mean) ** 2, 0.0)) / count)
    scaled = (values - mean) / jnp.maximum(spread, 1e-6)
    return jnp.where(usable & (spread > 1e-6), scaled, 0.0)


def mixed_scores(
    completed: ArrayLike, values: ArrayLike, observed: ArrayLike, usable: ArrayLike
) -> Array:
    """``float32[N]``: ``values`` where observed (authoritative), ``completed``
    elsewhere, ``-inf`` where the candidate is not usable (docs/method.md)."""
    scores = jnp.where(observed, values, completed)
    return jnp.where(usable, scores, -jnp.inf)


__all__ = [
    "effective_memory_factors",
    "fold_in",
    "history_rows",
    "history_without_mean",
    "loss",
    "mixed_scores",
    "parameters",
    "predict",
    "standardised_similarity",
]
