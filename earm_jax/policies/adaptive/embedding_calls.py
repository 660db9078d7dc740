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
query, so one step costs an ``F``-wide Cholesky solve (``F = D + 2``) whatever
the history.

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
from jax.scipy.linalg import cho_factor, cho_solve
from jax.scipy.stats import norm

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
    phi: ArrayLike,
    values: ArrayLike,
    scored: ArrayLike,
    usable: ArrayLike,
    ridge: float,
    top_k: int,
    prior_cosine: float = 0.0,
) -> Array:
    """``float32[N]``: the unscored candidates' priority for the next round
    under ``order`` (one of :data:`EMBEDDING_ORDERS`), the query's own paid
    answers folded into ``fit`` first."""
    scored = jnp.asarray(scored, bool)
    usable = jnp.asarray(usable, bool)
    now = add_answers(fit, phi, values, scored)
    mean, sd = posterior(now, phi, ridge, prior_cosine)
    if order == "embedding":
        return mean
    current = jnp.where(scored, jnp.asarray(values, jnp.float32), mean)
    threshold = kth_best(current, usable, top_k)
    return expected_gain(mean, sd, threshold)


__all__ = [
    "EMBEDDING_ORDERS",
    "EmbeddingFit",
    "add_answers",
    "embedding_priority",
    "empty_fit",
    "expected_gain",
    "kth_best",
    "posterior",
]
