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

from earm_jax.base import BudgetFn, Observation, Query, QueryContext, RoundsDecision
from earm_jax.core.config import InputValueError
from earm_jax.policies.paper import top_similarity_policy
from earm_jax.policies.rerank import anchors_first
from earm_jax.types import Array, ArrayLike, PRNGKey

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


class LearnedCallsProgress(NamedTuple):
    """One query's progress: the head paid by similarity, then the tail."""

    features: Array
    usable: Array
    fallback: Array
    head: Array
    tail_calls: Array
    stage: Array
    paid: Array
    answered: Array
    values: Array
    calls: Array
    rounds: Array
    limit: Array


class LearnedCallsPolicy(NamedTuple):
    """Learned calls as an :class:`earm_jax.Policy`: two rounds per query (the
    head by similarity, then the tail where the regression points, fitted on
    every earlier answer and the head's); the carry is the normal equations.
    Build it with :func:`learned_calls_policy`. It reads the query's
    :class:`~earm_jax.base.SideInputs` (``context.side``)."""

    budget: BudgetFn
    embedding_dim: int
    head_fraction: float
    ridge: float
    pool_size: int | None = None

    num_rounds = 2
    max_calls = None

    def init(self, key: PRNGKey | None = None) -> LearnedCallsState:
        del key  # the fit starts empty
        return LearnedCalls(self.head_fraction, self.ridge).init(self.embedding_dim)

    def begin(
        self,
        key: PRNGKey | None,
        carry: LearnedCallsState,
        query: Query,
        context: QueryContext,
    ) -> LearnedCallsProgress:
        del key, carry
        if context.side is None:
            raise InputValueError(
                "learned calls read the query's and the memories' embeddings: "
                "pass side=SideInputs(...) (a Stream with query_embeddings and "
                "memory_embeddings does it in run / run_batch)"
            )
        usable = jnp.asarray(context.usable, bool)
        similarity = jnp.where(
            usable, jnp.asarray(query.similarity, jnp.float32), -jnp.inf
        )
        budget = jnp.clip(
            jnp.asarray(self.budget(context.count), jnp.int32), 0, context.room
        )
        calls = jnp.minimum(budget, jnp.sum(usable, dtype=jnp.int32))
        head_calls = jnp.round(self.head_fraction * calls.astype(jnp.float32)).astype(
            jnp.int32
        )
        nothing = jnp.zeros_like(usable)
        zero = jnp.zeros((), jnp.int32)
        return LearnedCallsProgress(
            features=call_features(
                similarity,
                usable,
                context.side.query_embedding,
                context.side.candidate_embeddings,
            ),
            usable=usable,
            fallback=similarity,
            head=_first_by(similarity, usable, head_calls),
            tail_calls=calls - head_calls,
            stage=jnp.where(head_calls > 0, 0, 1).astype(jnp.int32),
            paid=nothing,
            answered=nothing,
            values=jnp.zeros(usable.shape, jnp.float32),
            calls=zero,
            rounds=zero,
            limit=budget,
        )

    def select(self, carry: LearnedCallsState, progress: LearnedCallsProgress) -> Array:
        gram, moment = _normal_equations(
            progress.features, progress.values, progress.answered
        )
        features = progress.features.shape[-1]
        system = carry.gram + gram + self.ridge * jnp.eye(features, dtype=jnp.float32)
        weights = cho_solve(cho_factor(system), carry.moment + moment)
        predicted = jnp.einsum(
            "nf,f->n", progress.features, weights, precision=_PRECISION
        )
        tail = _first_by(
            predicted, progress.usable & ~progress.paid, progress.tail_calls
        )
        return jnp.where(
            progress.stage == 0,
            progress.head,
            jnp.where(progress.stage == 1, tail, jnp.zeros_like(tail)),
        )

    def observe(
        self,
        carry: LearnedCallsState,
        progress: LearnedCallsProgress,
        requested: ArrayLike,
        observation: Observation,
    ) -> LearnedCallsProgress:
        del carry
        requested = jnp.asarray(requested, bool) & progress.usable & ~progress.paid
        values = jnp.asarray(observation.values, jnp.float32)
        # A failed answer (NaN, or left out of the mask) is paid, not fitted.
        came_back = (
            requested & jnp.asarray(observation.mask, bool) & jnp.isfinite(values)
        )
        paid = jnp.sum(requested, dtype=jnp.int32)
        return progress._replace(
            stage=progress.stage + 1,
            paid=progress.paid | requested,
            answered=progress.answered | came_back,
            values=jnp.where(came_back, values, progress.values),
            calls=progress.calls + paid,
            rounds=progress.rounds + (paid > 0).astype(jnp.int32),
        )

    def finish(
        self, carry: LearnedCallsState, progress: LearnedCallsProgress
    ) -> tuple[LearnedCallsState, RoundsDecision]:
        gram, moment = _normal_equations(
            progress.features, progress.values, progress.answered
        )
        decision = RoundsDecision(
            anchors=progress.answered,
            scores=anchors_first(progress.values, progress.answered, progress.fallback),
            calls=progress.calls,
            rounds=progress.rounds,
            limit=progress.limit,
        )
        return LearnedCallsState(carry.gram + gram, carry.moment + moment), decision


def learned_calls_policy(
    embedding_dim: int,
    pool_size: int = 200,
    head_fraction: float = 0.4,
    ridge: float = 10.0,
    budget: BudgetFn | None = None,
) -> LearnedCallsPolicy:
    """Learned calls under Top-similarity's schedule (the paper's stage
    schedule of ``pool_size``, or ``budget``), as one
    :class:`earm_jax.Policy`: ``online_solver(config, learned_calls_policy(D))``.

    Args:
      embedding_dim: ``D``, the width of the unit text embeddings.
      pool_size: candidates per query; the stage budgets are fractions of it.
      head_fraction: share of each query's calls paid by similarity first.
      ridge: the regression's penalty.
      budget: another schedule (``count -> int32[]``) instead of the stage
        schedule (then the policy records no pool size).

    Raises:
      InputValueError: a bad ``embedding_dim``, ``head_fraction`` or ``ridge``.
    """
    if (
        isinstance(embedding_dim, bool)
        or not isinstance(embedding_dim, int)
        or embedding_dim < 1
    ):
        raise InputValueError(
            f"embedding_dim must be a positive int, got {embedding_dim!r}"
        )
    settings = learned_calls(head_fraction, ridge)
    schedule = top_similarity_policy(pool_size=pool_size, budget=budget)
    return LearnedCallsPolicy(
        budget=schedule.budget,
        embedding_dim=embedding_dim,
        head_fraction=settings.head_fraction,
        ridge=settings.ridge,
        pool_size=schedule.pool_size,
    )


__all__ = [
    "LearnedCalls",
    "LearnedCallsPolicy",
    "LearnedCallsProgress",
    "LearnedCallsState",
    "call_features",
    "learned_calls",
    "learned_calls_policy",
    "learned_calls_step",
    "run_learned_calls",
]
