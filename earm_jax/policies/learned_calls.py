r"""Learned calls: Top-similarity's calls, the later ones spent where a
function of the texts, learned from the answers paid so far, points.

The room a strong scorer leaves above Top-similarity sits deep in the pool
(similarity ranks 51-200), where a memory's earlier answers say little and
its similarity less. What does point there is a function of the question's
and the memory's embeddings learned from every answer paid so far: a ridge
regression of the scorer's answer on

.. math::

   \phi(q, m) = (\cos(q, m),\ \sqrt{D}\, q \odot m,\ 1),

the element-wise product of the two unit embeddings (a diagonal bilinear
form: which embedding directions the scorer rewards when question and memory
share them), the cosine and a bias.

Per query, with the call count ``B`` Top-similarity pays:

1. the ``head = round(head_fraction * B)`` most similar usable candidates are
   paid first (the similarity order is right at the top of the pool);
2. their answers join the fit (causal within the query, as a round would);
3. the other ``B - head`` calls go to the unpaid candidates the regression
   predicts highest;
4. the ranking is every paid candidate by its answer, then the unpaid in
   similarity order (as Top-similarity's), so only which candidates were paid
   differs from Top-similarity;
5. every answer paid joins the normal equations for the next query.

The state is the normal equations (``gram`` ``float32[F, F]``, ``moment``
``float32[F]``, ``F = D + 2``), so the step costs one ``F``-wide Cholesky
solve whatever the history. One ``lax.scan`` over queries, ``vmap`` over
streams, pure and shape-static.

>>> import jax.numpy as jnp
>>> from earm_jax.base import Query
>>> queries = Query(jnp.tile(jnp.arange(6, dtype=jnp.int32), (3, 1)),
...                 jnp.tile(jnp.linspace(1, 0, 6), (3, 1)), jnp.ones((3, 6), bool))
>>> answers = jnp.zeros((3, 6)).at[:, 5].set(1.0)
>>> _, paid = run_learned_calls(learned_calls(), queries, answers,
...                             jnp.full(3, 2), jnp.eye(3, 4), jnp.eye(6, 4))
>>> paid.shape, paid.sum(-1).tolist()
((3, 6), [2, 2, 2])
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_factor, cho_solve

from earm_jax.base import Query
from earm_jax.types import Array, ArrayLike

_PRECISION = jax.lax.Precision.HIGHEST


class LearnedCallsState(NamedTuple):
    """The regression's normal equations over every answer paid so far."""

    gram: Array
    moment: Array


class LearnedCalls(NamedTuple):
    """The policy's settings and its pure functions."""

    head_fraction: float
    ridge: float

    def init(self, width: int) -> LearnedCallsState:
        """The empty fit for ``width``-dimensional embeddings."""
        features = width + 2
        return LearnedCallsState(
            jnp.zeros((features, features), jnp.float32),
            jnp.zeros((features,), jnp.float32),
        )


def learned_calls(head_fraction: float = 0.4, ridge: float = 10.0) -> LearnedCalls:
    """The policy: ``head_fraction`` of each query's calls by similarity, the
    rest by the learned function; ``ridge`` is the regression's penalty.

    Raises:
        ValueError: ``head_fraction`` outside [0, 1] or ``ridge`` not > 0.
    """
    if not 0.0 <= head_fraction <= 1.0:
        raise ValueError(f"head_fraction must be in [0, 1], got {head_fraction!r}")
    if not ridge > 0.0:
        raise ValueError(f"ridge must be > 0, got {ridge!r}")
    return LearnedCalls(float(head_fraction), float(ridge))


def call_features(
    similarity: ArrayLike,
    usable: ArrayLike,
    query_embedding: ArrayLike,
    candidate_embeddings: ArrayLike,
) -> Array:
    """``float32[N, D + 2]``: cosine, ``sqrt(D) q * m``, 1 (rows of unusable
    candidates are 0)."""
    usable = jnp.asarray(usable, bool)
    query_embedding = jnp.asarray(query_embedding, jnp.float32)
    candidate_embeddings = jnp.asarray(candidate_embeddings, jnp.float32)
    width = query_embedding.shape[-1]
    cosine = jnp.where(usable, jnp.asarray(similarity, jnp.float32), 0.0)
    product = (
        jnp.sqrt(jnp.float32(width)) * candidate_embeddings * query_embedding[None, :]
    )
    phi = jnp.concatenate(
        [cosine[:, None], product, jnp.ones_like(cosine)[:, None]], axis=-1
    )
    return jnp.where(usable[:, None], phi, 0.0)


def _first_by(priority: Array, allowed: Array, count: Array) -> Array:
    """``bool[N]``: the ``count`` allowed entries of highest priority (ties by
    position)."""
    keyed = jnp.where(allowed, priority, -jnp.inf)
    order = jnp.argsort(-keyed, stable=True)
    place = jnp.empty_like(order).at[order].set(jnp.arange(order.shape[0]))
    return allowed & (place < count)


def _normal_equations(phi: Array, answers: Array, paid: Array) -> tuple[Array, Array]:
    weight = paid.astype(jnp.float32)
    weighted = phi * weight[:, None]
    gram = jnp.einsum("nf,ng->fg", weighted, phi, precision=_PRECISION)
    moment = jnp.einsum("nf,n->f", weighted, answers, precision=_PRECISION)
    return gram, moment


def learned_calls_step(
    policy: LearnedCalls,
    state: LearnedCallsState,
    query: Query,
    answers: ArrayLike,
    budget: ArrayLike,
    query_embedding: ArrayLike,
    memory_embeddings: ArrayLike,
    usable: ArrayLike,
) -> tuple[LearnedCallsState, Array]:
    """One query: ``(state after its answers, bool[N] the candidates paid)``.
    ``answers`` are read only where paid."""
    usable = jnp.asarray(usable, bool)
    similarity = jnp.where(usable, jnp.asarray(query.similarity, jnp.float32), -jnp.inf)
    calls = jnp.minimum(
        jnp.asarray(budget, jnp.int32), jnp.sum(usable, dtype=jnp.int32)
    )
    head_calls = jnp.round(policy.head_fraction * calls.astype(jnp.float32)).astype(
        jnp.int32
    )
    head = _first_by(similarity, usable, head_calls)
    rows = jnp.clip(query.candidates, 0, jnp.shape(memory_embeddings)[0] - 1)
    phi = call_features(
        similarity, usable, query_embedding, jnp.asarray(memory_embeddings)[rows]
    )
    # A failed answer (NaN) is not paid for in the fit.
    answers = jnp.asarray(answers, jnp.float32)
    known = jnp.isfinite(answers)
    answers = jnp.where(known, answers, 0.0)
    head_gram, head_moment = _normal_equations(phi, answers, head & known)
    features = phi.shape[-1]
    system = (
        state.gram + head_gram + policy.ridge * jnp.eye(features, dtype=jnp.float32)
    )
    weights = cho_solve(cho_factor(system), state.moment + head_moment)
    predicted = jnp.einsum("nf,f->n", phi, weights, precision=_PRECISION)
    tail = _first_by(predicted, usable & ~head, calls - head_calls)
    # The head's part of the normal equations is already summed: add the tail's.
    tail_gram, tail_moment = _normal_equations(phi, answers, tail & known)
    return LearnedCallsState(
        state.gram + head_gram + tail_gram, state.moment + head_moment + tail_moment
    ), head | tail


def run_learned_calls(
    policy: LearnedCalls,
    queries: Query,
    answers: ArrayLike,
    budgets: ArrayLike,
    query_embeddings: ArrayLike,
    memory_embeddings: ArrayLike,
    usable: ArrayLike | None = None,
    initial_state: LearnedCallsState | None = None,
) -> tuple[LearnedCallsState, Array]:
    """The policy over a stream (``lax.scan`` over queries; jit-able).

    Args:
      policy: from :func:`learned_calls`.
      queries: :class:`Query` with a leading ``T`` axis.
      answers: ``float32[T, N]`` the scorer's answers (read only where paid).
      budgets: ``int32[T]`` calls per query (e.g. Top-similarity's).
      query_embeddings: ``float32[T, D]`` unit rows.
      memory_embeddings: ``float32[M, D]`` unit rows.
      usable: ``bool[T, N]`` candidates that may be paid (default ``valid``).
      initial_state: the fit before the first query (default empty).

    Returns:
      ``(final state, bool[T, N] the candidates paid at each query)``.
    """
    query_embeddings = jnp.asarray(query_embeddings, jnp.float32)
    memory_embeddings = jnp.asarray(memory_embeddings, jnp.float32)
    usable = jnp.asarray(queries.valid if usable is None else usable, bool)
    state = (
        policy.init(query_embeddings.shape[-1])
        if initial_state is None
        else initial_state
    )

    def one_query(state, inputs):
        query, row, budget, embedding, use = inputs
        return learned_calls_step(
            policy, state, query, row, budget, embedding, memory_embeddings, use
        )

    return jax.lax.scan(
        one_query,
        state,
        (
            queries,
            jnp.asarray(answers, jnp.float32),
            jnp.asarray(budgets, jnp.int32),
            query_embeddings,
            usable,
        ),
    )


__all__ = [
    "LearnedCalls",
    "LearnedCallsState",
    "call_features",
    "learned_calls",
    "learned_calls_step",
    "run_learned_calls",
]
