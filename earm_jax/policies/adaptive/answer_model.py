r"""The answer model: how likely a scored candidate is relevant, from its answer.

The scorer's noise is estimated online from the data, never from the truth: a
clean yes/no scorer answers 0 or 1, so the distance of an answer from the
nearer of where non-relevant and relevant answers sit measures its noise (for a
clipped Gaussian scorer :math:`E[d^2 \mid 0 < y < 1] \approx \sigma^2`). The
posterior that a scored candidate is relevant is then

.. math:: \operatorname{logit} q = \operatorname{logit} \pi_{b,f} +
   \log \frac{N(y; \mu_1, \sigma_1^2)}{N(y; \mu_{0,b}, \hat\sigma^2)},

the likelihood ratio of the relevant against the non-relevant answers times the
rate table's prior :math:`\pi` for the candidate's similarity-rank bucket ``b``
and found-state ``f`` (how many confirmed hits the query had when it was
scored). A hit counts as *confirmed* when :math:`q \ge 1/2`. At noise 0.1 one
answer of 0.6 already confirms; at noise 0.3 it takes about 0.8, so a single
noisy false hit rarely ends a search.

The model decides when a query is settled (:func:`AnswerModel.settled`) and,
for the ``confident_no`` and ``evidence`` merges, which answers sink.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.policies.adaptive.config import AdaptiveConfig
from earm_jax.policies.adaptive.state import Ledger, RoundState
from earm_jax.types import Array, ArrayLike


def truncation_corrected_variance(second_moment: ArrayLike, iterations: int = 4):
    r"""The noise variance :math:`\sigma^2` behind :math:`E[d^2]`, where
    :math:`d = \min(y, 1 - y)` is a half-normal distance truncated at 1/2.

    For :math:`d \sim |N(0, \sigma^2)|` conditioned on :math:`d < 1/2`,
    :math:`E[d^2] = \sigma^2 (1 - 2c\,\varphi(c) / (2\Phi(c) - 1))` with
    :math:`c = 1/(2\sigma)`; solved by a few fixed-point steps (4 steps
    leave a small bias, 0.293 for a true 0.3; the measured results use 4).

    >>> round(float(truncation_corrected_variance(0.3**2 * 0.6347)) ** 0.5, 3)
    0.293
    """
    second_moment = jnp.asarray(second_moment, jnp.float32)
    variance = second_moment
    for _ in range(iterations):
        c = 0.5 / jnp.sqrt(jnp.maximum(variance, 1e-8))
        pdf = jnp.exp(-0.5 * c**2) / jnp.sqrt(2.0 * jnp.pi)
        mass = jax.scipy.special.erf(c / jnp.sqrt(2.0))
        factor = jnp.clip(1.0 - 2.0 * c * pdf / jnp.maximum(mass, 1e-8), 0.2, 1.0)
        variance = second_moment / factor
    return variance


def _logit(p: Array) -> Array:
    p = jnp.clip(p, 1e-6, 1.0 - 1e-6)
    return jnp.log(p) - jnp.log1p(-p)


class AnswerModel(NamedTuple):
    """The answer model's pure functions over ``(ledger, round_state)``; build it
    with :func:`answer_model`.

    Attributes:
      rates: ``ledger -> float32[B, F]`` Beta-smoothed relevance rate per
        (rank bucket, found-state).
      bucket_of: ``rank -> int32[...]`` the rank bucket of similarity ranks.
      null_location: ``ledger -> float32[B]`` mean answer of non-relevant
        candidates per bucket.
      hit_location: ``ledger -> float32[]`` mean answer of relevant candidates.
      distances: ``float32[N]`` each answer's distance to the nearer location.
      noise_variance: ``float32[]`` the scorer-noise variance, this query's
        answers included.
      log_likelihood_ratio: ``float32[N]`` relevant against non-relevant.
      posterior: ``float32[N]`` relevance of the scored (0 elsewhere).
      found_state: ``int32[]`` confirmed hits so far (capped at ``F - 1``).
      settled: ``bool[]`` P(no relevant among the scored) <= ``settle_risk``.
    """

    rates: Callable[[Ledger], Array]
    bucket_of: Callable[[Array], Array]
    null_location: Callable[[Ledger], Array]
    hit_location: Callable[[Ledger], Array]
    distances: Callable[[Ledger, RoundState], Array]
    noise_variance: Callable[[Ledger, RoundState], Array]
    log_likelihood_ratio: Callable[[Ledger, RoundState], Array]
    posterior: Callable[[Ledger, RoundState], Array]
    found_state: Callable[[Ledger, RoundState], Array]
    settled: Callable[[Ledger, RoundState], Array]


def answer_model(config: AdaptiveConfig) -> AnswerModel:
    """Builds the :class:`AnswerModel` of a (validated) configuration."""
    edges = jnp.cumsum(jnp.asarray(config.round_sizes, jnp.int32))
    num_states = config.num_found_states
    prior_hits, prior_misses = (float(v) for v in config.rate_prior)
    noise_prior_sq = config.noise_prior**2 * config.noise_prior_weight

    def rates(ledger: Ledger) -> Array:
        return (ledger.hits + prior_hits) / (ledger.trials + prior_hits + prior_misses)

    def bucket_of(rank: Array) -> Array:
        return jnp.searchsorted(edges, rank, side="right").astype(jnp.int32)

    def null_location(ledger: Ledger) -> Array:
        return ledger.null_sum / (ledger.null_weight + config.noise_prior_weight)

    def hit_location(ledger: Ledger) -> Array:
        weight = jnp.sum(ledger.hits)
        prior = config.noise_prior_weight
        return (ledger.hit_sum + prior) / (weight + prior)

    def distances(ledger: Ledger, rs: RoundState) -> Array:
        location = null_location(ledger)[bucket_of(rs.rank)]
        return jnp.minimum(
            jnp.abs(rs.values - location), jnp.abs(rs.values - hit_location(ledger))
        )

    def noise_variance(ledger: Ledger, rs: RoundState) -> Array:
        inside = rs.scored & (rs.values > 0.0) & (rs.values < 1.0)
        distance = distances(ledger, rs)
        total = ledger.noise_sum + jnp.sum(jnp.where(inside, distance**2, 0.0))
        count = ledger.noise_count + jnp.sum(inside, dtype=ledger.noise_count.dtype)
        second_moment = (total + noise_prior_sq) / (count + config.noise_prior_weight)
        return truncation_corrected_variance(second_moment)

    def hit_variance(ledger: Ledger, variance: Array) -> Array:
        """Spread of relevant answers: at least the noise, more when relevance is
        graded (a heavier tail towards the middle than the noise alone)."""
        if not config.hit_spread:
            return variance
        weight = jnp.sum(ledger.hits) + config.noise_prior_weight
        mean = hit_location(ledger)
        second = (ledger.hit_square_sum + config.noise_prior_weight) / weight
        return jnp.maximum(variance, second - mean**2)

    def log_likelihood_ratio(ledger: Ledger, rs: RoundState) -> Array:
        variance = noise_variance(ledger, rs)
        high_variance = hit_variance(ledger, variance)
        location = null_location(ledger)[bucket_of(rs.rank)]
        high = hit_location(ledger)
        return (
            (rs.values - location) ** 2 / (2.0 * variance)
            - (rs.values - high) ** 2 / (2.0 * high_variance)
            - 0.5 * jnp.log(high_variance / variance)
        )

    def posterior(ledger: Ledger, rs: RoundState) -> Array:
        prior = rates(ledger)[bucket_of(rs.rank), jnp.maximum(rs.found_at, 0)]
        log_odds = _logit(prior) + log_likelihood_ratio(ledger, rs)
        return jnp.where(rs.scored, jax.nn.sigmoid(log_odds), 0.0)

    def found_state(ledger: Ledger, rs: RoundState) -> Array:
        confirmed = jnp.sum(posterior(ledger, rs) >= 0.5)
        return jnp.minimum(confirmed, num_states - 1).astype(jnp.int32)

    def settled(ledger: Ledger, rs: RoundState) -> Array:
        q = posterior(ledger, rs)
        log_none = jnp.sum(
            jnp.where(rs.scored, jnp.log1p(-jnp.minimum(q, 1 - 1e-6)), 0)
        )
        return log_none <= math.log(config.settle_risk)

    return AnswerModel(
        rates, bucket_of, null_location, hit_location, distances, noise_variance,
        log_likelihood_ratio, posterior, found_state, settled,
    )  # fmt: skip


__all__ = ["AnswerModel", "answer_model", "truncation_corrected_variance"]
