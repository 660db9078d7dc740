r"""Policies that complete the experience matrix from the texts.

Two policies put the side-information model
(:mod:`earm_jax.core.side_information`: shared weights over the query's and
memory's embeddings, a memory bias, a query offset, fitted online) where the
transductive low-rank completion sits today:

* ``mixed_side``: the paper's Mixed with the same anchors, the same calls and
  the same merge (a direct answer where paid, the completion elsewhere), but
  the completion comes from the side-information model
  (:func:`run_mixed_side`).
* ``best_side``: the adaptive policy (:mod:`earm_jax.policies.adaptive`) whose
  learned order of the unscored candidates reads the side-information
  completion where it would read the experience matrix's memory bias
  (:func:`run_best_side`). Before a query's first round the model has seen
  only earlier queries, so the feature is causal; the query's paid answers
  join the fit after it is ranked.

Both are one ``lax.scan`` over queries (``vmap`` over streams), pure and
shape-static, and take the embeddings as fixed inputs: ``query_embeddings``
``float32[T, D]`` and ``memory_embeddings`` ``float32[M, D]`` (unit rows, as
the semantic retriever computed them). Both start from ``model.init`` unless
given an ``initial_state``: e.g. another tenant's fit through
:func:`~earm_jax.core.side_information.shared_start` or
``model.pooled_start`` (a cold start made warm by shared weights).

>>> import jax.numpy as jnp
>>> from earm_jax.base import Query
>>> from earm_jax.core.side_information import side_information
>>> queries = Query(jnp.tile(jnp.arange(4, dtype=jnp.int32), (3, 1)),
...                 jnp.tile(jnp.linspace(1, 0, 4), (3, 1)), jnp.ones((3, 4), bool))
>>> answers = jnp.zeros((3, 4)).at[:, 2].set(1.0)
>>> anchors = jnp.zeros((3, 4), bool).at[:, :2].set(True)
>>> _, scores = run_mixed_side(side_information(), queries, answers, anchors,
...                            jnp.eye(3, 4), jnp.eye(4))
>>> scores.shape
(3, 4)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.base import Observation, Query, SideInputs
from earm_jax.core.model import mixed_scores
from earm_jax.core.side_information import SideInformation, SideInformationState
from earm_jax.policies.adaptive import (
    AdaptiveInfo,
    AdaptivePolicy,
    Ledger,
    adaptive_query,
)
from earm_jax.types import Array, ArrayLike


def _check_embeddings(
    queries: Query, query_embeddings: ArrayLike, memory_embeddings: ArrayLike
) -> tuple[Array, Array]:
    query_embeddings = jnp.asarray(query_embeddings, jnp.float32)
    memory_embeddings = jnp.asarray(memory_embeddings, jnp.float32)
    num_queries = jnp.shape(queries.candidates)[0]
    if query_embeddings.ndim != 2 or query_embeddings.shape[0] != num_queries:
        raise ValueError(
            f"query_embeddings must be [T={num_queries}, D], got "
            f"{query_embeddings.shape}"
        )
    if memory_embeddings.ndim != 2:
        raise ValueError(
            f"memory_embeddings must be [M, D], got {memory_embeddings.shape}"
        )
    if memory_embeddings.shape[1] != query_embeddings.shape[1]:
        raise ValueError(
            f"memory_embeddings are {memory_embeddings.shape[1]} wide, "
            f"query_embeddings {query_embeddings.shape[1]}"
        )
    return query_embeddings, memory_embeddings


def _initial(
    model: SideInformation,
    memory_embeddings: Array,
    initial_state: SideInformationState | None,
) -> SideInformationState:
    num_memories, width = memory_embeddings.shape
    if initial_state is None:
        return model.init(num_memories, width)
    expected = {
        "gram": (width + 1, width + 1),
        "moment": (width + 1,),
        "weights": (width + 1,),
        "memory_residual": (num_memories,),
        "memory_count": (num_memories,),
        "offset_sum": (),
        "count": (),
    }
    for name, shape in expected.items():
        actual = jnp.shape(getattr(initial_state, name))
        if actual != shape:
            raise ValueError(
                f"initial_state.{name} must have shape {shape} for "
                f"memory_embeddings {memory_embeddings.shape}, got {actual}"
            )
    return initial_state


def run_mixed_side(
    model: SideInformation,
    queries: Query,
    answers: ArrayLike,
    anchors: ArrayLike,
    query_embeddings: ArrayLike,
    memory_embeddings: ArrayLike,
    usable: ArrayLike | None = None,
    initial_state: SideInformationState | None = None,
) -> tuple[SideInformationState, Array]:
    """Mixed's anchors, completed by the side-information model.

    Args:
      model: from :func:`~earm_jax.core.side_information.side_information`.
      queries: :class:`Query` with a leading ``T`` axis.
      answers: ``float32[T, N]`` the scorer's answers (read only where anchored).
      anchors: ``bool[T, N]`` the candidates paid for (Mixed's anchors).
      query_embeddings: ``float32[T, D]``.
      memory_embeddings: ``float32[M, D]``.
      usable: ``bool[T, N]`` candidates that may be ranked (default: valid).
      initial_state: the model state before the first query (default:
        ``model.init``, a cold start).

    Returns:
      ``(final state, scores float32[T, N])``: the answer where anchored, the
      completion elsewhere, ``-inf`` where not usable.
    """
    query_embeddings, memory_embeddings = _check_embeddings(
        queries, query_embeddings, memory_embeddings
    )
    answers = jnp.asarray(answers, jnp.float32)
    anchors = jnp.asarray(anchors, bool)
    usable = jnp.asarray(queries.valid if usable is None else usable, bool)
    state = _initial(model, memory_embeddings, initial_state)

    def one_query(state, inputs):
        query, row, paid, use, embedding = inputs
        observation = Observation(row, paid & use)
        completed, _ = model.predict(
            state, query, embedding, memory_embeddings, observation
        )
        # One ulp below: at equal value the direct answer outranks the completion.
        shown = jnp.nextafter(completed, -jnp.inf)
        scores = mixed_scores(shown, row, paid & use, use)
        state = model.update(state, query, embedding, memory_embeddings, observation)
        return state, scores

    return jax.lax.scan(
        one_query, state, (queries, answers, anchors, usable, query_embeddings)
    )


def run_best_side(
    policy: AdaptivePolicy,
    model: SideInformation,
    queries: Query,
    answers: ArrayLike,
    query_embeddings: ArrayLike,
    memory_embeddings: ArrayLike,
    usable: ArrayLike | None = None,
    call_budget: ArrayLike | None = None,
    initial_state: SideInformationState | None = None,
) -> tuple[tuple[Ledger, SideInformationState], AdaptiveInfo]:
    """The adaptive policy, its unscored candidates ordered with the
    side-information completion (``lax.scan`` over queries; jit-able).

    Args:
      policy: from :func:`~earm_jax.policies.adaptive.adaptive_policy` (its
        ``unscored_order`` should be ``"learned"`` for the feature to matter).
      model: from :func:`~earm_jax.core.side_information.side_information`.
      queries: :class:`Query` with a leading ``T`` axis.
      answers: ``float32[T, N]`` the scorer's answers (read only where paid).
      query_embeddings: ``float32[T, D]``.
      memory_embeddings: ``float32[M, D]``.
      usable: ``bool[T, N]`` candidates that may be scored and ranked.
      call_budget: overrides ``policy.config.call_budget`` (may be traced).
      initial_state: the model state before the first query (default:
        ``model.init``, a cold start); the ledger always starts fresh, and
        its learned order weighs the completion only once it has learned to,
        so a shared start changes the ranking from the second query on.

    Returns:
      ``((final ledger, final model state), AdaptiveInfo with a leading T axis)``.
    """
    query_embeddings, memory_embeddings = _check_embeddings(
        queries, query_embeddings, memory_embeddings
    )
    answers = jnp.asarray(answers, jnp.float32)
    usable = jnp.asarray(queries.valid if usable is None else usable, bool)
    state = _initial(model, memory_embeddings, initial_state)
    nothing_paid = jnp.zeros(answers.shape[1:], bool)

    def one_query(carry, inputs):
        ledger, state = carry
        query, row, use, embedding = inputs
        # The completion before any of this query's answers: earlier queries only.
        prior, _ = model.predict(
            state, query, embedding, memory_embeddings, Observation(row, nothing_paid)
        )
        side = SideInputs(embedding, memory_embeddings[query.candidates])
        ledger, info = adaptive_query(policy, ledger, query, row, use, prior, side)
        state = model.update(
            state,
            query,
            embedding,
            memory_embeddings,
            Observation(row, info.anchors & use),
        )
        return (ledger, state), info

    return jax.lax.scan(
        one_query,
        (policy.init(None, call_budget), state),
        (queries, answers, usable, query_embeddings),
    )


__all__ = ["run_best_side", "run_mixed_side"]
