"""Merges: how a query's direct answers and its unscored candidates share one
ranking (:data:`~earm_jax.policies.adaptive.config.MERGES`).

The default, ``answers_first``, ranks every direct answer above every unscored
candidate, by its answer; the unscored keep their learned order below. The
answer model decides when to stop, never whether an answer sinks: with a
trained cross-encoder (graded, calibrated answers, most of them near 0) the
model reads low answers of evidence as clean "no"s, and sinking them below the
unscored tail halved Recall@10 (0.29 against 0.61 held out, three LoCoMo
conversations). ``confident_no`` sinks answers a clean "no" explains: on the
independent-noise stand-in it gains about 0.013 Recall@10 over
``answers_first``, so it stays an option; ``evidence`` sinks every answer with
likelihood ratio <= 1; ``posterior`` ranks by the probability of relevance
(unscored by their bucket's rate); ``anchors_first`` is ``answers_first`` with
the unscored in similarity order; ``fused`` puts every candidate on the
answer's own scale (the embedding call orders only): a paid candidate by its
answer, an unpaid one by the posterior mean of the scorer's answer under the
regression those orders fit (:mod:`~earm_jax.policies.adaptive.embedding_calls`),
so a low answer sinks only below unpaid candidates the texts predict higher.

Each merge maps ``(config, model, ledger, round_state, posterior)`` to
``float32[N]`` scores; the caller sets unusable candidates to ``-inf``.
"""

from __future__ import annotations

from collections.abc import Callable

import jax.numpy as jnp

from earm_jax.policies.adaptive import embedding_calls
from earm_jax.policies.adaptive.answer_model import AnswerModel
from earm_jax.policies.adaptive.config import AdaptiveConfig
from earm_jax.policies.adaptive.order import unscored_tier
from earm_jax.policies.adaptive.state import Ledger, RoundState
from earm_jax.types import Array

Merge = Callable[[AdaptiveConfig, AnswerModel, Ledger, RoundState, Array], Array]


def answers_first(config, model, ledger, rs, q):
    """Every direct answer above every unscored candidate: no answer is read as
    a confident "no", which only a well-fitted noise model could justify (a
    calibrated reranker's low answers still hold evidence more often than the
    unscored tail does)."""
    return jnp.where(rs.scored, 2.0 + rs.values, unscored_tier(config, ledger, rs))


def confident_no(config, model, ledger, rs, q):
    """As :func:`evidence`, but only answers a clean "no" explains (within two
    noise deviations of where non-relevant answers sit) sink below the unscored
    ones: graded scorers give borderline relevant memories middling answers
    that are still worth more than an unscored guess."""
    bucket = model.bucket_of(rs.rank)
    sigma = jnp.sqrt(model.noise_variance(ledger, rs))
    clean_no = rs.values < model.null_location(ledger)[bucket] + 2.0 * sigma
    sink = (model.log_likelihood_ratio(ledger, rs) <= 0.0) & clean_no
    return jnp.where(
        rs.scored,
        jnp.where(sink, rs.values - 1.0, 2.0 + rs.values),
        unscored_tier(config, ledger, rs),
    )


def evidence(config, model, ledger, rs, q):
    """A direct answer lifts a candidate above the unscored ones only when it is
    evidence for relevance (likelihood ratio > 1); answers that speak against
    relevance sink below them."""
    favours = model.log_likelihood_ratio(ledger, rs) > 0.0
    return jnp.where(
        rs.scored,
        jnp.where(favours, 2.0 + rs.values, rs.values - 1.0),
        unscored_tier(config, ledger, rs),
    )


def posterior(config, model, ledger, rs, q):
    """Probability of relevance: the posterior of the scored, the rate table's
    cell of the unscored; ties by direct answer, then by similarity rank."""
    unscored_rate = model.rates(ledger)[
        model.bucket_of(rs.rank), model.found_state(ledger, rs)
    ]
    return jnp.where(
        rs.scored,
        q + 1e-4 * rs.values,
        unscored_rate - 1e-7 * rs.rank.astype(jnp.float32),
    )


def anchors_first(config, model, ledger, rs, q):
    """As :func:`answers_first`, with the unscored in similarity order."""
    return jnp.where(rs.scored, 2.0 + rs.values, -1e-3 * rs.rank.astype(jnp.float32))


def fused(config, model, ledger, rs, q):
    """One scale, the answer's: paid candidates by their answer, unpaid ones
    by the posterior mean of the embedding regression with the query's own
    answers folded in (its prior is the cosine, so with nothing learned the
    unpaid keep the similarity order). Unlike :func:`posterior`, the unpaid
    estimate is a prediction of this candidate's answer from its texts, not a
    bucket's base rate: a paid "no" stays above an unpaid candidate the texts
    give a lower expected answer."""
    fitted = embedding_calls.add_answers(
        ledger.embedding_fit, rs.phi, rs.values, rs.scored
    )
    mean, _ = embedding_calls.posterior(
        fitted, rs.phi, config.embedding_ridge, config.embedding_prior_cosine
    )
    return jnp.where(rs.scored, rs.values, mean - 1e-7 * rs.rank.astype(jnp.float32))


MERGE_FUNCTIONS: dict[str, Merge] = {
    "answers_first": answers_first,
    "confident_no": confident_no,
    "evidence": evidence,
    "posterior": posterior,
    "anchors_first": anchors_first,
    "fused": fused,
}
"""Every merge by its name in :data:`~earm_jax.policies.adaptive.config.MERGES`."""


__all__ = [
    "MERGE_FUNCTIONS",
    "Merge",
    "anchors_first",
    "answers_first",
    "confident_no",
    "evidence",
    "fused",
    "posterior",
]
