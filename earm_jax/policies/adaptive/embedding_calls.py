r"""Where ``best``'s later rounds pay when they follow the texts
(``call_order="embedding"`` or ``"embedding_gain"``).

A strong scorer's room above Top-similarity sits deep in the pool, where a
memory's earlier answers say little. What points there is a function of the
question's and the memory's embeddings learned from every answer paid so far
(:mod:`earm_jax.policies.learned_calls`): a Bayesian ridge regression of the
answer on :math:`\phi(q, m) = (\cos, \sqrt{D}\, q \odot m, 1)` with the prior
:math:`w \sim \mathcal N(w_0, \sigma^2 / \lambda\, I)`, where :math:`w_0`
puts weight ``prior_cosine`` on the cosine and 0 elsewhere: before any answer
the posterior mean is the similarity order, and answers move it away only as
far as they agree. Its posterior, with
:math:`A = \lambda I + \sum \phi\phi^\top` and :math:`b = \sum \phi y`, is

.. math::

   \mu(\phi) = \phi^\top A^{-1} (b + \lambda w_0), \qquad
   s^2(\phi) = \hat\sigma^2 \,(1 + \phi^\top A^{-1} \phi),

where :math:`\hat\sigma^2` is the mean squared residual of the answers fitted.
The query's own answers join the fit as soon as they are paid (causal within
the query, as a round is), and the ledger carries the sums for every earlier
query. A query factors the earlier queries' system :math:`A_0` once
(:func:`query_fit`: an ``F``-wide Cholesky solve, ``F = D + 2``, whatever the
history) and sees it through its ``N`` candidates,
:math:`G = \Phi A_0^{-1} \Phi^\top`. Each round then adds its paid rows
:math:`W` by the Woodbury identity,

.. math::

   \Phi A^{-1} (b + \lambda w_0) = u - G W (I + W G W)^{-1} W u, \qquad
   u = \Phi A_0^{-1} (b_0 + \lambda w_0) + G W y,

an ``N``-wide solve instead of refolding ``N`` rows into the ``F``-wide sums
and factoring them again (:func:`posterior_with_answers`; the same posterior
as :func:`posterior` of the refolded sums, up to float rounding).

Two call orders read it. ``"embedding"`` pays the unscored candidates the
posterior mean puts highest. ``"embedding_gain"`` pays those with the highest
expected gain over the query's current ``K``-th best value (the paid answers
and the unpaid means together),
:math:`\mathbb E[\max(y - \tau, 0)] = s\,\varphi(z) + (\mu - \tau)\,\Phi(z)`,
:math:`z = (\mu - \tau)/s`: the value of a call is how far it may lift the
top ``K``, so an uncertain candidate can outbid a slightly higher mean. Without
a useful embedding signal the fit leans on the cosine feature, and both orders
fall back towards the similarity order.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax.scipy.linalg import cho_factor, cho_solve, solve_triangular
from jax.scipy.stats import norm

from earm_jax.core.one_at_a_time_on_cpu import one_at_a_time_on_cpu
from earm_jax.types import Array, ArrayLike

_PRECISION = jax.lax.Precision.HIGHEST

EMBEDDING_ORDERS = ("embedding", "embedding_gain")
"""The call orders that read the texts' embeddings."""


class EmbeddingFit(NamedTuple):
    """The regression's sufficient statistics over the answers fitted.

    Attributes:
      gram: ``float32[F, F]`` :math:`\\sum \\phi \\phi^\\top`.
      moment: ``float32[F]`` :math:`\\sum \\phi y`.
      square_sum: ``float32[]`` :math:`\\sum y^2` (for the residual variance).
      count: ``float32[]`` answers fitted.
    """

    gram: Array
    moment: Array
    square_sum: Array
    count: Array


def empty_fit(features: int) -> EmbeddingFit:
    """No answers yet: ``features`` wide (0 when the order reads no texts)."""
    return EmbeddingFit(
        jnp.zeros((features, features), jnp.float32),
        jnp.zeros((features,), jnp.float32),
        jnp.zeros((), jnp.float32),
        jnp.zeros((), jnp.float32),
    )


def add_answers(
    fit: EmbeddingFit, phi: ArrayLike, answers: ArrayLike, paid: ArrayLike
) -> EmbeddingFit:
    """``fit`` with the ``paid`` rows of ``phi`` and their ``answers`` added."""
    phi = jnp.asarray(phi, jnp.float32)
    weight = jnp.asarray(paid, bool).astype(jnp.float32)
    answers = jnp.where(weight > 0, jnp.asarray(answers, jnp.float32), 0.0)
    weighted = phi * weight[:, None]
    return EmbeddingFit(
        fit.gram + jnp.einsum("nf,ng->fg", weighted, phi, precision=_PRECISION),
        fit.moment + jnp.einsum("nf,n->f", weighted, answers, precision=_PRECISION),
        fit.square_sum + jnp.sum(weight * answers**2),
        fit.count + jnp.sum(weight),
    )


def posterior(
    fit: EmbeddingFit,
    phi: ArrayLike,
    ridge: float,
    prior_cosine: float = 0.0,
    noise_floor: float = 1e-3,
) -> tuple[Array, Array]:
    """``(mean, sd)``, each ``float32[N]``: the predictive posterior of the
    answer at each row of ``phi`` (``sd`` includes the answer noise, at least
    ``noise_floor``); the prior mean of the weights is ``prior_cosine`` on the
    first feature (the cosine), 0 on the others."""
    phi = jnp.asarray(phi, jnp.float32)
    features = phi.shape[-1]
    system = fit.gram + ridge * jnp.eye(features, dtype=jnp.float32)
    factor = cho_factor(system)
    prior = jnp.zeros((features,), jnp.float32).at[0].set(prior_cosine)
    weights = cho_solve(factor, fit.moment + ridge * prior)
    mean = jnp.einsum("nf,f->n", phi, weights, precision=_PRECISION)
    # Residual sum of squares of the ridge fit, from the sums alone.
    fitted = jnp.einsum("f,fg,g->", weights, fit.gram, weights, precision=_PRECISION)
    residual = fit.square_sum - 2.0 * weights @ fit.moment + fitted
    variance = jnp.maximum(residual / jnp.maximum(fit.count, 1.0), noise_floor**2)
    spread = jnp.einsum("nf,fn->n", phi, cho_solve(factor, phi.T), precision=_PRECISION)
    return mean, jnp.sqrt(variance * (1.0 + jnp.maximum(spread, 0.0)))


class QueryFit(NamedTuple):
    """The fit of the earlier queries seen from one query's candidates.

    Attributes:
      factor: ``float32[F, F]`` :math:`L`, the lower Cholesky factor of
        :math:`A_0 = \\lambda I + \\sum \\phi\\phi^\\top` (earlier queries).
      kernel: ``float32[N, N]`` :math:`G = \\Phi A_0^{-1} \\Phi^\\top`.
      prior_mean: ``float32[N]`` :math:`\\Phi w_0'`, the posterior mean before
        the query's own answers.
      weights: ``float32[F]`` :math:`w_0' = A_0^{-1} (b_0 + \\lambda w_0)`.
    """

    factor: Array
    kernel: Array
    prior_mean: Array
    weights: Array


def empty_query_fit() -> QueryFit:
    """What a call order that reads no texts carries: nothing (zero sizes)."""
    return QueryFit(
        jnp.zeros((0, 0), jnp.float32),
        jnp.zeros((0, 0), jnp.float32),
        jnp.zeros((0,), jnp.float32),
        jnp.zeros((0,), jnp.float32),
    )


def query_fit(
    fit: EmbeddingFit, phi: ArrayLike, ridge: float, prior_cosine: float = 0.0
) -> QueryFit:
    """Factors the earlier queries' system once for the query whose
    candidates' features are ``phi`` (``float32[N, F]``). Batched, it runs
    one stream at a time on CPU (:mod:`earm_jax.core.one_at_a_time_on_cpu`):
    its three LAPACK calls in one loop step could otherwise stop the program."""
    return _query_fit(
        fit,
        jnp.asarray(phi, jnp.float32),
        jnp.float32(ridge),
        jnp.float32(prior_cosine),
    )


@one_at_a_time_on_cpu
def _query_fit(
    fit: EmbeddingFit, phi: Array, ridge: Array, prior_cosine: Array
) -> QueryFit:
    features = phi.shape[-1]
    system = fit.gram + ridge * jnp.eye(features, dtype=jnp.float32)
    factor = jnp.linalg.cholesky(system)
    prior = jnp.zeros((features,), jnp.float32).at[0].set(prior_cosine)
    weights = cho_solve((factor, True), fit.moment + ridge * prior)
    whitened = solve_triangular(factor, phi.T, lower=True)
    kernel = jnp.einsum("fn,fm->nm", whitened, whitened, precision=_PRECISION)
    # Symmetric in exact arithmetic; the round's N-wide Cholesky reads one half.
    kernel = 0.5 * (kernel + kernel.T)
    prior_mean = jnp.einsum("nf,f->n", phi, weights, precision=_PRECISION)
    return QueryFit(factor, kernel, prior_mean, weights)


def posterior_with_answers(
    fit: EmbeddingFit,
    query: QueryFit,
    phi: ArrayLike,
    values: ArrayLike,
    scored: ArrayLike,
    noise_floor: float = 1e-3,
) -> tuple[Array, Array]:
    """``(mean, sd)``: :func:`posterior` of ``fit`` with the query's ``scored``
    rows of ``phi`` and their ``values`` added (``add_answers``), computed
    from ``query`` (:func:`query_fit` of ``fit``) by the Woodbury identity:
    one ``N``-wide Cholesky solve per round (batched, one stream at a time on
    CPU, as :func:`query_fit`)."""
    return _posterior_with_answers(
        fit,
        query,
        jnp.asarray(phi, jnp.float32),
        jnp.asarray(values, jnp.float32),
        jnp.asarray(scored, bool),
        jnp.float32(noise_floor),
    )


@one_at_a_time_on_cpu
def _posterior_with_answers(
    fit: EmbeddingFit,
    query: QueryFit,
    phi: Array,
    values: Array,
    scored: Array,
    noise_floor: Array,
) -> tuple[Array, Array]:
    paid = scored.astype(jnp.float32)
    answers = jnp.where(scored, values, 0.0)
    kernel = query.kernel
    size = kernel.shape[0]
    u = query.prior_mean + jnp.einsum(
        "nm,m->n", kernel, paid * answers, precision=_PRECISION
    )
    system = jnp.eye(size, dtype=jnp.float32) + paid[:, None] * kernel * paid[None, :]
    factor = cho_factor(system)
    correction = paid * cho_solve(factor, paid * u)
    mean = u - jnp.einsum("nm,m->n", kernel, correction, precision=_PRECISION)
    # The weights and the residual variance of the refolded fit, from its sums.
    weights = query.weights + cho_solve(
        (query.factor, True),
        jnp.einsum("nf,n->f", phi, paid * answers - correction, precision=_PRECISION),
    )
    row_fit = jnp.einsum("nf,f->n", phi, weights, precision=_PRECISION)
    fitted = jnp.einsum(
        "f,fg,g->", weights, fit.gram, weights, precision=_PRECISION
    ) + jnp.sum(paid * row_fit**2)
    moment = weights @ fit.moment + jnp.sum(paid * answers * row_fit)
    square_sum = fit.square_sum + jnp.sum(paid * answers**2)
    count = fit.count + jnp.sum(paid)
    residual = square_sum - 2.0 * moment + fitted
    variance = jnp.maximum(residual / jnp.maximum(count, 1.0), noise_floor**2)
    # diag(Φ A⁻¹ Φᵀ) = diag(G) − diag(G W (I + W G W)⁻¹ W G).
    solved = cho_solve(factor, paid[:, None] * kernel)
    spread = jnp.diagonal(kernel) - jnp.sum(kernel * paid[None, :] * solved.T, axis=1)
    return mean, jnp.sqrt(variance * (1.0 + jnp.maximum(spread, 0.0)))


def expected_gain(mean: ArrayLike, sd: ArrayLike, threshold: ArrayLike) -> Array:
    """``E[max(y - threshold, 0)]`` for ``y ~ N(mean, sd^2)``, element-wise."""
    mean = jnp.asarray(mean, jnp.float32)
    sd = jnp.asarray(sd, jnp.float32)
    z = (mean - threshold) / sd
    return sd * norm.pdf(z) + (mean - threshold) * norm.cdf(z)


def kth_best(values: ArrayLike, valid: ArrayLike, k: int) -> Array:
    """``float32[]``: the ``k``-th largest valid value (the smallest valid one
    when fewer than ``k`` are valid; ``-inf`` when none is)."""
    keyed = jnp.where(
        jnp.asarray(valid, bool), jnp.asarray(values, jnp.float32), -jnp.inf
    )
    ordered = jnp.sort(keyed)[::-1]
    count = jnp.sum(jnp.isfinite(ordered))
    index = jnp.clip(jnp.minimum(k, count) - 1, 0, ordered.shape[0] - 1)
    return ordered[index]


def embedding_priority(
    order: str,
    fit: EmbeddingFit,
    query: QueryFit,
    phi: ArrayLike,
    values: ArrayLike,
    scored: ArrayLike,
    usable: ArrayLike,
    top_k: int,
) -> Array:
    """``float32[N]``: the unscored candidates' priority for the next round
    under ``order`` (one of :data:`EMBEDDING_ORDERS`), the query's own paid
    answers folded into ``fit`` (seen through ``query``, its
    :func:`query_fit`) first."""
    scored = jnp.asarray(scored, bool)
    usable = jnp.asarray(usable, bool)
    mean, sd = posterior_with_answers(fit, query, phi, values, scored)
    if order == "embedding":
        return mean
    current = jnp.where(scored, jnp.asarray(values, jnp.float32), mean)
    threshold = kth_best(current, usable, top_k)
    return expected_gain(mean, sd, threshold)


__all__ = [
    "EMBEDDING_ORDERS",
    "EmbeddingFit",
    "QueryFit",
    "add_answers",
    "embedding_priority",
    "empty_fit",
    "empty_query_fit",
    "expected_gain",
    "kth_best",
    "posterior",
    "posterior_with_answers",
    "query_fit",
]
