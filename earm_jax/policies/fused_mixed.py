r"""Fused Mixed (``mixed_fused``): the paper's anchors and calls, every
candidate ranked on the scorer's own answer scale.

The paper's Mixed ranks a paid candidate by its answer and an unpaid one by
the low-rank completion alone, so the similarity order is thrown away for the
unpaid, and with a strong scorer it falls below Semantic at 10-15% of the
calls. This policy keeps Mixed's anchors (so it pays exactly Mixed's calls)
and changes only the merge: an unpaid candidate is ranked by the posterior
mean of the scorer's answer under a Bayesian ridge regression fitted causally
on every answer paid so far,

.. math::

   y \approx w^\top \phi, \qquad
   \phi = (\cos,\ [\sqrt{D}\, q \odot m],\ 1,\ [\tilde b_m]),
   \qquad w \sim \mathcal N(w_0, \sigma^2/\lambda\, I),

where the element-wise product of the two unit embeddings is there when the
stream carries them, and :math:`\tilde b_m` is the memory's prior from the
experience matrix (:func:`memory_prior`: its bias fitted on the earlier
queries, less its pool's mean) when one is given. The prior mean :math:`w_0`
puts ``prior_cosine`` on the cosine and 0 elsewhere, so before any answer
the unpaid keep the similarity order, and the texts and the memory's history
move them only as far as the paid answers agree. A paid candidate is ranked
by its answer on the same scale: a low answer sinks below the unpaid
candidates whose predicted answer is higher, and only those.

Every feature is one the query's own answers have not shaped. Mixed's
completion is not one: its row part (:math:`c_t + u_m \cdot v_t`) is fitted
on the very anchors the regression learns from, so at a paid candidate it
nearly repeats the answer, the regression learns to trust it, and unpaid
candidates inherit a completion that is far weaker out of sample
(docs/design-notes.md measures it).
The answers of the query being ranked join the fit before it is ranked, as a
round's would.

One ``lax.scan`` over queries, ``vmap`` over streams; the state is the
regression's sums (:class:`~earm_jax.policies.adaptive.embedding_calls.EmbeddingFit`),
so a query costs one ``F``-wide Cholesky solve whatever the history.

>>> import jax.numpy as jnp
>>> from earm_jax.base import Query
>>> queries = Query(jnp.tile(jnp.arange(4, dtype=jnp.int32), (2, 1)),
...                 jnp.tile(jnp.linspace(1, 0, 4), (2, 1)), jnp.ones((2, 4), bool))
>>> answers = jnp.zeros((2, 4)).at[:, 3].set(1.0)
>>> paid = jnp.zeros((2, 4), bool).at[:, 0].set(True)
>>> _, scores = run_mixed_fused(queries, answers, paid)
>>> scores.shape
(2, 4)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.base import Query
from earm_jax.core.config import InputValueError
from earm_jax.policies.adaptive.embedding_calls import (
    EmbeddingFit,
    add_answers,
    empty_fit,
    posterior,
)
from earm_jax.policies.adaptive.state import similarity_ranks
from earm_jax.policies.learned_calls import call_features
from earm_jax.types import Array, ArrayLike


def memory_prior(completed: ArrayLike, usable: ArrayLike) -> Array:
    r"""``float32[..., N]``: each usable candidate's memory bias relative to its
    pool's mean, from a rank-0 solver's completion (Bias-only's
    :attr:`~earm_jax.base.StepInfo.completed`, :math:`\mu + b_m + c_t`, whose
    :math:`\mu + b_m` were fitted on earlier queries only); the query's own
    :math:`c_t`, fitted on its anchors, cancels. 0 where not usable."""
    usable = jnp.asarray(usable, bool)
    completed = jnp.where(usable, jnp.asarray(completed, jnp.float32), 0.0)
    count = jnp.maximum(jnp.sum(usable, axis=-1, keepdims=True), 1).astype(jnp.float32)
    centred = completed - jnp.sum(completed, axis=-1, keepdims=True) / count
    return jnp.where(usable, centred, 0.0)


def fused_features(
    similarity: ArrayLike,
    usable: ArrayLike,
    prior: ArrayLike | None = None,
    query_embedding: ArrayLike | None = None,
    candidate_embeddings: ArrayLike | None = None,
) -> Array:
    """``float32[N, F]``: the cosine, ``sqrt(D) q * m`` (with embeddings), 1,
    and the memory prior (when given); rows of unusable candidates are 0.
    ``F = D + 2`` with embeddings, else 2, plus 1 with a prior."""
    usable = jnp.asarray(usable, bool)
    similarity = jnp.where(usable, jnp.asarray(similarity, jnp.float32), 0.0)
    if query_embedding is None:
        base = jnp.stack([similarity, usable.astype(jnp.float32)], axis=-1)
    else:
        base = call_features(similarity, usable, query_embedding, candidate_embeddings)
    if prior is None:
        return base
    prior = jnp.asarray(prior, jnp.float32)
    prior = jnp.where(usable & jnp.isfinite(prior), prior, 0.0)
    return jnp.concatenate([base, prior[:, None]], axis=-1)


def run_mixed_fused(
    queries: Query,
    answers: ArrayLike,
    anchors: ArrayLike,
    prior: ArrayLike | None = None,
    usable: ArrayLike | None = None,
    query_embeddings: ArrayLike | None = None,
    memory_embeddings: ArrayLike | None = None,
    ridge: float = 10.0,
    prior_cosine: float = 1.0,
) -> tuple[EmbeddingFit, Array]:
    """Mixed's anchors ranked on the answer's scale (see the module).

    Args:
      queries: :class:`Query` with a leading ``T`` axis.
      answers: ``float32[T, N]`` the scorer's answers (read only where anchored).
      anchors: ``bool[T, N]`` the candidates paid for (Mixed's anchors).
      prior: ``float32[T, N]`` a feature the query's answers have not shaped,
        e.g. :func:`memory_prior`; ``None``: the regression reads the cosine,
        the texts and a bias only.
      usable: ``bool[T, N]`` candidates that may be ranked (default: valid).
      query_embeddings: ``float32[T, D]`` unit embeddings, or ``None`` (then
        the regression reads the cosine, a bias and the completion only).
      memory_embeddings: ``float32[M, D]``, with ``query_embeddings``.
      ridge: the prior precision :math:`\\lambda` (> 0).
      prior_cosine: the prior mean of the cosine's weight.

    Returns:
      ``(final fit, scores float32[T, N])``: the answer where anchored, the
      posterior mean elsewhere (ties by similarity), ``-inf`` where not usable.
    """
    if not ridge > 0:
        raise InputValueError(f"ridge must be > 0, got {ridge!r}")
    if (query_embeddings is None) != (memory_embeddings is None):
        raise InputValueError(
            "query_embeddings and memory_embeddings come together (or neither)"
        )
    answers = jnp.asarray(answers, jnp.float32)
    anchors = jnp.asarray(anchors, bool)
    with_prior = prior is not None
    prior = (jnp.zeros_like(answers) if prior is None else jnp.asarray(prior)).astype(
        jnp.float32
    )
    usable = jnp.asarray(queries.valid if usable is None else usable, bool)
    if query_embeddings is None:
        width = 2 + with_prior
        texts = jnp.zeros((answers.shape[0], 0), jnp.float32)
        memories = None
    else:
        texts = jnp.asarray(query_embeddings, jnp.float32)
        memories = jnp.asarray(memory_embeddings, jnp.float32)
        width = texts.shape[-1] + 2 + with_prior

    def one_query(fit, inputs):
        query, row, paid, prior_row, use, embedding = inputs
        prior_row = prior_row if with_prior else None  # a static choice
        if memories is None:
            phi = fused_features(query.similarity, use, prior_row)
        else:
            phi = fused_features(
                query.similarity, use, prior_row, embedding, memories[query.candidates]
            )
        paid = paid & use
        fit = add_answers(fit, phi, row, paid)
        mean, _ = posterior(fit, phi, ridge, prior_cosine)
        rank = similarity_ranks(query.similarity, use)
        unpaid = mean - 1e-7 * rank.astype(jnp.float32)
        scores = jnp.where(paid, row, unpaid)
        return fit, jnp.where(use, scores, -jnp.inf)

    return jax.lax.scan(
        one_query,
        empty_fit(width),
        (queries, answers, anchors, prior, usable, texts),
    )


__all__ = ["fused_features", "memory_prior", "run_mixed_fused"]
