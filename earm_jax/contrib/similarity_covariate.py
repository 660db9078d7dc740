r"""The similarity covariate of the fold-in, measured and rejected.

The new query is folded in with one more regressor, the candidate's similarity
standardised over the query's usable pool,

.. math:: \hat y = \mu + b_m + c_t + \beta_t \tilde s_{m,t} + u_m \cdot v_t,

:math:`\beta_t` fitted from the query's anchors alone, so unscored candidates
keep some of their semantic order where history says little. The history
model (:math:`\mu, b, U` and past queries' :math:`c, v`) is fitted without it,
as in the paper. On LoCoMo it repaired part of what completion costs at the
top of the ranking but did not beat the shipped policies
(docs/design-notes.md, "Similarity covariate";
``experiments/similarity_covariate_core.py``); it used to be a branch of the
solver's ``observe`` (``SolverConfig(similarity_covariate=True)``) and is now a
fold-in passed to the solver:

>>> import jax, jax.numpy as jnp
>>> import earm_jax as ej
>>> from earm_jax.contrib.similarity_covariate import similarity_covariate_solver
>>> cfg = ej.SolverConfig(num_memories=50, capacity=4, pool_size=8, max_budget=8,
...                       rank=2)
>>> solver = similarity_covariate_solver(cfg, ej.paper_policy(pool_size=8))
>>> state = solver.init(jax.random.key(0))
>>> query = ej.Query(jnp.arange(8, dtype=jnp.int32), jnp.linspace(1, 0, 8),
...                  jnp.ones(8, bool))
>>> state, info = solver.step(jax.random.key(1), state, query, jnp.full(8, 0.5))
>>> int(state.count)
1
"""

from __future__ import annotations

import jax.numpy as jnp

from earm_jax.base import Policy, Query
from earm_jax.core import linalg
from earm_jax.core.config import OnlineSolver, Parameters, SolverConfig
from earm_jax.core.model import (
    effective_memory_factors,
    predict,
    standardised_similarity,
)
from earm_jax.core.online import online_solver
from earm_jax.core.solvers.base import SolverAlgorithm
from earm_jax.types import Array, ArrayLike


def fold_in_with_similarity(
    params: Parameters,
    memory_count: ArrayLike,
    memories: ArrayLike,
    values: ArrayLike,
    mask: ArrayLike,
    covariate: ArrayLike,
    l2: float,
) -> tuple[Array, Array, Array]:
    r"""The new query's :math:`(c_t, v_t, \beta_t)` from its own anchors.

    As :func:`fold_in` with one more regressor, the candidate's standardised
    similarity :math:`\tilde s` (``covariate``): a ridge problem of size
    ``R + 2``, :math:`\min \sum_k m_k (y_k - \mu - b_{m_k} - c - \beta
    \tilde s_k - u_{m_k}\cdot v)^2 + \lambda (c^2 + \beta^2 + \|v\|^2)`.

    Returns:
      ``(query_bias float32[], query_factors float32[R], similarity_weight
      float32[])``.
    """
    factors = effective_memory_factors(params.memory_factors, memory_count)
    memories = jnp.asarray(memories)
    covariate = jnp.asarray(covariate, jnp.float32)[:, None]
    features = linalg.with_intercept(
        jnp.concatenate([covariate, factors[memories]], -1)
    )
    targets = jnp.asarray(values) - params.global_mean - params.memory_bias[memories]
    gram, rhs = linalg.normal_equations(features, targets, mask)
    solution = linalg.ridge_solve(gram, rhs, l2)
    return solution[0], solution[2:], solution[1]


def similarity_fold_in(
    params: Parameters,
    memory_count: ArrayLike,
    query: Query,
    values: ArrayLike,
    observed: ArrayLike,
    usable: ArrayLike,
    l2: float,
) -> tuple[Array, Array, Array]:
    """A :data:`~earm_jax.core.online.FoldIn`: :func:`fold_in_with_similarity`
    on the query's anchors, and the completion plus :math:`\\beta_t \\tilde s`."""
    covariate = standardised_similarity(query.similarity, usable)
    query_bias, query_factors, weight = fold_in_with_similarity(
        params, memory_count, query.candidates, values, observed, covariate, l2
    )
    completed = predict(
        params, memory_count, query.candidates, query_bias, query_factors
    )
    return query_bias, query_factors, completed + weight * covariate


def similarity_covariate_solver(
    config: SolverConfig, policy: Policy, algorithm: SolverAlgorithm | None = None
) -> OnlineSolver:
    """:func:`~earm_jax.online_solver` with the similarity covariate in the
    fold-in (:func:`similarity_fold_in`); otherwise the same solver."""
    return online_solver(config, policy, algorithm, fold_in=similarity_fold_in)


__all__ = [
    "fold_in_with_similarity",
    "similarity_covariate_solver",
    "similarity_fold_in",
]
