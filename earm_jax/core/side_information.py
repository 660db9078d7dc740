r"""Side-information completion: the experience matrix completed from the texts.

The transductive model :math:`\mu + b_m + c_t + u_m \cdot v_t` learns a memory's
factor only from the queries that paid for it, and a new query's only from its
own anchors, so nothing transfers between memories or queries that never met.
Every row and column already has side information the retriever computed
anyway: the memory's and the query's embeddings. This model puts it in:

.. math::

   \hat y_{m,t} = c_t + b_m + \theta^\top \phi_{m,t}, \qquad
   \phi_{m,t} = \bigl(\tilde s_{m,t},\ \sqrt{D}\, e_t \odot e_m\bigr),

with :math:`\tilde s` the similarity z-scored within the pool and
:math:`e_t \odot e_m` the elementwise product of the unit embeddings (a
diagonal bilinear metric: :math:`\theta_{1:}` reweights the embedding's
dimensions, and a uniform :math:`\theta_{1:}` is the cosine similarity). The
weights :math:`\theta` are shared by all pairs, so they predict for memories
that were never scored and rank a new query's pool before its first anchor.

Fitting is online, causal and closed-form, at a constant cost per query:

* :math:`\theta` is a ridge regression on every past anchor, centred within its
  query (which removes :math:`c_t` exactly): the normal equations
  :math:`G = \sum (\phi - \bar\phi_t)(\phi - \bar\phi_t)^\top`,
  :math:`h = \sum (\phi - \bar\phi_t)(y - \bar y_t)` are accumulated, and
  :math:`\theta = (G + \lambda I)^{-1} h` is refit after each query (one
  Cholesky solve of size ``D + 1``);
* :math:`c_t` is the mean anchored residual of query ``t`` (before its first
  anchor: the mean of past queries' offsets);
* :math:`b_m` is the shrunk mean residual of memory ``m`` over past queries,
  :math:`\sum r / (n_m + \lambda_b)`, kept as a running sum per memory.

At query ``t`` only queries ``< t`` have entered ``G``, ``h`` and the memory
sums; query ``t``'s anchors set ``c_t`` and join them afterwards
(:func:`side_information`'s ``update``). Pure functions over a NamedTuple
state; jit and vmap them at the outermost scope.

**A shared start.** :math:`\theta` and its normal equations :math:`(G, h)`
belong to no memory and no query, so a model fitted on one agent's (or
conversation's) paid scores can start another: :func:`shared_start` keeps
``gram``, ``moment`` and ``weights`` and starts the private terms (each
memory's residual sum and count, the query offsets) at zero;
``model.pooled_start`` sums several sources' normal equations and refits
:math:`\theta` with the model's penalty, the same fit as one stream made of
all of them. What crosses tenants is the ``(D + 1) x (D + 1)`` matrix ``G``,
the vector ``h`` and :math:`\theta`: no memory text or id, but aggregate
functions of every source's paid scores and embeddings.

>>> import jax, jax.numpy as jnp
>>> model = side_information(l2=1.0)
>>> state = model.init(num_memories=6, embedding_dim=4)
>>> embeddings = jnp.eye(6, 4)
>>> query = Query(jnp.arange(3, dtype=jnp.int32), jnp.array([0.9, 0.5, 0.1]),
...               jnp.ones(3, bool))
>>> obs = Observation(jnp.array([1.0, 0.0, 0.0]), jnp.array([True, True, False]))
>>> completed, offset = model.predict(state, query, embeddings[0], embeddings, obs)
>>> completed.shape
(3,)
>>> state = model.update(state, query, embeddings[0], embeddings, obs)
>>> int(state.count)
1
>>> start = model.pooled_start([state, state], num_memories=10)
>>> start.memory_residual.shape, int(start.count)
((10,), 0)
>>> bool(jnp.all(shared_start(state, 10).weights == state.weights))
True
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.base import Observation, Query
from earm_jax.types import Array, ArrayLike

_PRECISION = jax.lax.Precision.HIGHEST


class SideInformationState(NamedTuple):
    """What the side-information model carries from query to query.

    Attributes:
      gram: ``float32[F, F]`` centred normal equations of past anchors
        (``F = D + 1``).
      moment: ``float32[F]`` their right-hand side.
      weights: ``float32[F]`` :math:`\\theta`, fitted on past queries.
      memory_residual: ``float32[M]`` each memory's summed residual.
      memory_count: ``float32[M]`` how often each memory was anchored.
      offset_sum: ``float32[]`` the sum of past queries' offsets :math:`c_t`.
      count: ``int32[]`` queries seen.
    """

    gram: Array
    moment: Array
    weights: Array
    memory_residual: Array
    memory_count: Array
    offset_sum: Array
    count: Array


class SideInformation(NamedTuple):
    """The model's pure functions (see :func:`side_information`).

    Attributes:
      init: ``(num_memories, embedding_dim) -> state``.
      features: ``(query, query_embedding, memory_embeddings) -> float32[N, F]``.
      predict: ``(state, query, query_embedding, memory_embeddings,
        observation) -> (completed float32[N], offset float32[])``: the
        completion of every candidate, with this query's anchors setting the
        offset only.
      update: ``(state, query, query_embedding, memory_embeddings,
        observation) -> state``: this query's anchors join the fit.
      pooled_start: ``(sources, num_memories) -> state``: a new tenant's start
        from the normal equations of ``sources`` (states with a leading source
        axis, or a sequence of states) summed, :math:`\theta` refitted with
        this model's ``l2``, and every private term at zero.
    """

    init: Callable[[int, int], SideInformationState]
    features: Callable[..., Array]
    predict: Callable[..., tuple[Array, Array]]
    update: Callable[..., SideInformationState]
    pooled_start: Callable[..., SideInformationState]


def _standardised(values: Array, where: Array) -> Array:
    count = jnp.maximum(jnp.sum(where, dtype=values.dtype), 1.0)
    mean = jnp.sum(jnp.where(where, values, 0.0)) / count
    spread = jnp.sqrt(jnp.sum(jnp.where(where, (values - mean) ** 2, 0.0)) / count)
    return jnp.where(where, (values - mean) / jnp.maximum(spread, 1e-6), 0.0)


def _private_zeros(
    gram: Array, moment: Array, weights: Array, num_memories: int
) -> SideInformationState:
    try:
        if isinstance(num_memories, bool):
            raise TypeError
        num_memories = operator.index(num_memories)
    except TypeError:
        raise ValueError(
            f"num_memories must be an int >= 1, got {num_memories!r}"
        ) from None
    if num_memories < 1:
        raise ValueError(f"num_memories must be >= 1, got {num_memories}")
    return SideInformationState(
        gram=gram,
        moment=moment,
        weights=weights,
        memory_residual=jnp.zeros((num_memories,), jnp.float32),
        memory_count=jnp.zeros((num_memories,), jnp.float32),
        offset_sum=jnp.zeros((), jnp.float32),
        count=jnp.zeros((), jnp.int32),
    )


def shared_start(
    source: SideInformationState, num_memories: int
) -> SideInformationState:
    """A new tenant's start from one source's fit: the shared part only.

    Keeps the source's ``gram``, ``moment`` and ``weights`` (:math:`G`,
    :math:`h`, :math:`\theta`) as they are and starts every private term at
    zero for the new tenant's ``num_memories`` memories: no memory residual or
    count, no query offset, ``count`` 0. The new tenant's first query is
    ranked by the source's :math:`\theta`; its own anchors then join the same
    normal equations. Pure; jit-able with ``num_memories`` static.

    Args:
      source: a state fitted on another stream (``model.update``'s or a
        policy run's final state).
      num_memories: ``M`` of the new tenant.

    Returns:
      The new tenant's :class:`SideInformationState`.

    Raises:
      ValueError: ``num_memories`` not an int >= 1, or ``source`` has a
        leading source axis (pool several with ``model.pooled_start``).
    """
    if jnp.ndim(source.gram) != 2:
        raise ValueError(
            f"source.gram must be [F, F], got shape {jnp.shape(source.gram)}; "
            "pool several sources with model.pooled_start"
        )
    return _private_zeros(
        jnp.asarray(source.gram, jnp.float32),
        jnp.asarray(source.moment, jnp.float32),
        jnp.asarray(source.weights, jnp.float32),
        num_memories,
    )


def _stacked(
    sources: SideInformationState | Sequence[SideInformationState],
) -> SideInformationState:
    if not isinstance(sources, SideInformationState):
        sources = list(sources)
        if not sources:
            raise ValueError("pooled_start needs at least one source")
        sources = jax.tree.map(lambda *leaves: jnp.stack(leaves), *sources)
    if jnp.ndim(sources.gram) != 3:
        raise ValueError(
            "sources must have a leading source axis (gram [S, F, F]), got gram "
            f"of shape {jnp.shape(sources.gram)}"
        )
    return sources


def side_information(l2: float = 1.0, memory_l2: float = 2.0) -> SideInformation:
    """Builds the side-information completion model.

    Args:
      l2: ridge penalty :math:`\\lambda` on the shared weights.
      memory_l2: shrinkage :math:`\\lambda_b` of a memory's mean residual
        (pseudo-observations at zero).

    Returns:
      A :class:`SideInformation` of pure functions.

    Raises:
      ValueError: a penalty that is not a finite number > 0 (naming it).
    """
    for name, value in (("l2", l2), ("memory_l2", memory_l2)):
        if isinstance(value, bool) or not math.isfinite(value) or value <= 0:
            raise ValueError(f"{name} must be a finite number > 0, got {value!r}")

    def init(num_memories: int, embedding_dim: int) -> SideInformationState:
        if num_memories < 1 or embedding_dim < 1:
            raise ValueError(
                "num_memories and embedding_dim must be >= 1, got "
                f"{num_memories} and {embedding_dim}"
            )
        width = embedding_dim + 1
        return SideInformationState(
            gram=jnp.zeros((width, width), jnp.float32),
            moment=jnp.zeros((width,), jnp.float32),
            weights=jnp.zeros((width,), jnp.float32),
            memory_residual=jnp.zeros((num_memories,), jnp.float32),
            memory_count=jnp.zeros((num_memories,), jnp.float32),
            offset_sum=jnp.zeros((), jnp.float32),
            count=jnp.zeros((), jnp.int32),
        )

    def features(
        query: Query, query_embedding: ArrayLike, memory_embeddings: ArrayLike
    ) -> Array:
        memory_embeddings = jnp.asarray(memory_embeddings, jnp.float32)
        query_embedding = jnp.asarray(query_embedding, jnp.float32)
        if query_embedding.shape != memory_embeddings.shape[-1:]:
            raise ValueError(
                f"query_embedding has shape {query_embedding.shape}, memory "
                f"embeddings are {memory_embeddings.shape[-1]} wide"
            )
        valid = jnp.asarray(query.valid, bool)
        rows = jnp.clip(query.candidates, 0, memory_embeddings.shape[0] - 1)
        scale = math.sqrt(memory_embeddings.shape[-1])
        product = scale * memory_embeddings[rows] * query_embedding[None, :]
        similarity = _standardised(jnp.asarray(query.similarity, jnp.float32), valid)
        phi = jnp.concatenate([similarity[:, None], product], axis=-1)
        return jnp.where(valid[:, None], phi, 0.0)

    def _memory_bias(state: SideInformationState, candidates: Array) -> Array:
        rows = jnp.clip(candidates, 0, state.memory_residual.shape[0] - 1)
        return state.memory_residual[rows] / (state.memory_count[rows] + memory_l2)

    def _offset(
        state: SideInformationState, base: Array, observation: Observation
    ) -> Array:
        anchored = jnp.asarray(observation.mask, bool)
        count = jnp.sum(anchored, dtype=jnp.float32)
        values = jnp.asarray(observation.values, jnp.float32)
        anchored_mean = jnp.sum(jnp.where(anchored, values - base, 0.0)) / jnp.maximum(
            count, 1.0
        )
        prior = state.offset_sum / jnp.maximum(state.count, 1).astype(jnp.float32)
        return jnp.where(count > 0, anchored_mean, prior)

    def predict(
        state: SideInformationState,
        query: Query,
        query_embedding: ArrayLike,
        memory_embeddings: ArrayLike,
        observation: Observation,
    ) -> tuple[Array, Array]:
        phi = features(query, query_embedding, memory_embeddings)
        base = jnp.einsum(
            "nf,f->n", phi, state.weights, precision=_PRECISION
        ) + _memory_bias(state, query.candidates)
        offset = _offset(state, base, observation)
        return base + offset, offset

    def _refit(gram: Array, moment: Array) -> Array:
        regularised = gram + l2 * jnp.eye(gram.shape[0], dtype=gram.dtype)
        factor = jax.scipy.linalg.cho_factor(regularised, lower=True)
        return jax.scipy.linalg.cho_solve(factor, moment).astype(jnp.float32)

    def update(
        state: SideInformationState,
        query: Query,
        query_embedding: ArrayLike,
        memory_embeddings: ArrayLike,
        observation: Observation,
    ) -> SideInformationState:
        phi = features(query, query_embedding, memory_embeddings)
        anchored = jnp.asarray(observation.mask, bool) & jnp.asarray(query.valid, bool)
        values = jnp.asarray(observation.values, jnp.float32)
        count = jnp.sum(anchored)
        weight = anchored.astype(jnp.float32)
        denominator = jnp.maximum(count, 1).astype(jnp.float32)
        mean_phi = jnp.einsum("n,nf->f", weight, phi) / denominator
        mean_y = jnp.sum(weight * values) / denominator
        centred = (phi - mean_phi[None, :]) * weight[:, None]
        gram = state.gram + jnp.einsum(
            "nf,ng->fg", centred, centred, precision=_PRECISION
        )
        moment = state.moment + jnp.einsum(
            "nf,n->f", centred, weight * (values - mean_y), precision=_PRECISION
        )
        # Residuals of this query's anchors under the weights it was ranked by.
        base = jnp.einsum("nf,f->n", phi, state.weights, precision=_PRECISION)
        bias = _memory_bias(state, query.candidates)
        offset = _offset(state, base + bias, observation)
        residual = jnp.where(anchored, values - offset - base, 0.0)
        rows = jnp.clip(query.candidates, 0, state.memory_residual.shape[0] - 1)
        memory_residual = state.memory_residual.at[rows].add(residual)
        memory_count = state.memory_count.at[rows].add(weight)
        seen = count > 0
        return SideInformationState(
            gram=gram,
            moment=moment,
            weights=_refit(gram, moment),
            memory_residual=memory_residual,
            memory_count=memory_count,
            offset_sum=state.offset_sum + jnp.where(seen, offset, 0.0),
            count=state.count + seen.astype(jnp.int32),
        )

    def pooled_start(
        sources: SideInformationState | Sequence[SideInformationState],
        num_memories: int,
    ) -> SideInformationState:
        sources = _stacked(sources)
        gram = jnp.sum(jnp.asarray(sources.gram, jnp.float32), axis=0)
        moment = jnp.sum(jnp.asarray(sources.moment, jnp.float32), axis=0)
        return _private_zeros(gram, moment, _refit(gram, moment), num_memories)

    return SideInformation(
        init=init,
        features=features,
        predict=predict,
        update=update,
        pooled_start=pooled_start,
    )


__all__ = [
    "SideInformation",
    "SideInformationState",
    "shared_start",
    "side_information",
]
