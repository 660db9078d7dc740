r"""Adaptive, multi-round anchor scoring under a hard call budget.

A query is scored in up to ``len(round_sizes)`` rounds of growing size (default
5, 15, 45, 135 candidates, in similarity order). Before each round the policy
decides, from what it has learned on earlier queries and on this query's earlier
rounds, whether the next round is worth its calls; after each round it folds
the scores in. Three
pieces of experience are carried from query to query in a :class:`Ledger`:

1. **A hard call budget.** Every query accrues an allowance of
   ``call_budget`` times its usable pool (so the total accrued is
   ``call_budget`` times Full's calls); unspent calls carry over (up to
   ``max_carry`` calls); a query may spend at most ``max_per_query`` and never
   more than the balance. The balance is kept in exact integer units of
   1/1024 call, so *the running total of calls never exceeds the allowance
   accrued so far* (no float drift).
2. **Where the evidence is.** A table of relevance rates by similarity-rank
   bucket (the rounds' rank ranges) and by how many confirmed hits the query
   had when the candidate was scored (0, 1, 2+): Beta-smoothed soft counts of
   the posterior relevance of every scored candidate. It says how likely the
   next round is to hold evidence *given what this query has already found*.
3. **How noisy the scorer is.** The scorer's noise is estimated online from
   the data, never from the truth: a clean yes/no scorer answers 0 or 1, so the
   distance of an answer from the nearest of 0 and 1, :math:`d = \min(y, 1-y)`,
   measures its noise (for a clipped Gaussian scorer
   :math:`E[d^2 \mid 0 < y < 1] \approx \sigma^2`). The posterior that a
   scored candidate is relevant is then

   .. math:: \operatorname{logit} q = \operatorname{logit} \pi_{b,f} +
      \frac{2y - 1}{2\hat\sigma^2},

   the likelihood ratio of :math:`N(1, \hat\sigma^2)` against
   :math:`N(0, \hat\sigma^2)` times the table's prior :math:`\pi` for the
   candidate's bucket ``b`` and found-state ``f``. A hit counts as *confirmed*
   when :math:`q \ge 1/2`. At noise 0.1 one answer of 0.6 already confirms; at
   noise 0.3 it takes about 0.8, so a single noisy false hit rarely ends a
   search, and when it does the table still decides whether to go on.

**Stopping** (default ``stop_rule="settle_or_spill"``): a query is *settled*
once the posterior probability that none of its scored candidates is relevant,
:math:`\prod (1 - q)`, is at most ``settle_risk`` (0.1). Before that every round
is scored (within the ledger); after it, a round is cut to the calls the carry
cap would otherwise discard ("use it or lose it"), so an easy query stops after
its first round while calls are scarce, and spends what would be lost when they
are not. One noisy false hit (at noise 0.3, :math:`q \approx 1/2`) does not
settle a query. Other rules (a paced price per call, "settle_or_overflow")
are kept in :data:`STOP_RULES` as measured negatives.

**Ranking** (default ``merge="answers_first"``): every direct answer ranks
above every unscored candidate, by its answer; the unscored keep their learned
order below. The noise model decides when to stop, never whether an answer
sinks: with a trained cross-encoder (graded, calibrated answers, most of them
near 0) the model reads low answers of evidence as clean "no"s, and sinking
them below the unscored tail halved Recall@10 (0.29 against 0.61 held out,
three LoCoMo conversations). ``merge="confident_no"`` sinks answers a clean
"no" explains (likelihood ratio <= 1 and within two noise deviations of where
non-relevant answers sit): on the independent-noise stand-in it gains about
0.013 Recall@10 over ``answers_first``, so it stays as an option;
``merge="evidence"`` sinks every answer with likelihood ratio <= 1.

**Ordering the unscored** (default ``unscored_order="learned"``): among
themselves, the unscored candidates are ordered by a relevance model learned
online: the ridge regression of the scored candidates' posterior relevance on
(1, standardised similarity, standardised memory bias), where the memory bias
:math:`b_m` comes from the experience matrix of earlier queries
(:mod:`earm_jax.policies.adaptive_history` runs the solver beside the policy).
Where history says a memory is often evidence, it rises among the unscored;
where it says little (observations), the fit leans on similarity. Without a
memory bias the order is by similarity (or its reverse, should the data say so).

Every function here is pure and shape-static: the simulator runs
``begin → (select_round → observe_round) × R → finish`` inside ``jit``,
``lax.scan`` and ``vmap`` (:func:`run_adaptive`), and a host loop calls the same
functions with one batched scorer request per round (:func:`score_query`).

>>> import jax.numpy as jnp
>>> import earm_jax.policies.adaptive as ad
>>> policy = ad.adaptive_policy(ad.AdaptiveConfig(pool_size=8, round_sizes=(2, 2)))
>>> ledger = policy.init()
>>> query = ad.Query(jnp.arange(8, dtype=jnp.int32), jnp.linspace(1, 0, 8),
...                  jnp.ones(8, bool))
>>> truth = jnp.array([0, 1, 0, 0, 0, 0, 0, 0], jnp.float32)
>>> ledger, info = policy.score_query(ledger, query, lambda mask: truth)
>>> int(info.calls), int(info.rounds), int(jnp.argmax(info.scores))
(2, 1, 1)
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.base import Observation, Query
from earm_jax.core.model import standardised_similarity
from earm_jax.types import Array, ArrayLike

STOP_RULES = (
    "settle_or_spill",
    "settle_or_overflow",
    "settle",
    "price",
    "settle_and_price",
    "settle_or_price",
    "settle_or_marginal",
    "settle_or_expected",
)
"""Stopping rules; the first is the default (the others are measured negatives)."""

UNSCORED_ORDERS = ("learned", "similarity")
"""How the unscored candidates are ordered among themselves; the first is the
default: ``"learned"`` by a relevance model fitted online on the scored ones
(similarity and the memory's bias in the experience matrix),
``"similarity"`` by similarity alone."""

ORDER_FEATURES = 3
"""Features of the learned order: 1, standardised similarity, standardised
memory bias."""

MERGES = ("answers_first", "confident_no", "evidence", "posterior", "anchors_first")
"""How direct scores and unscored candidates share one ranking; the first is the
default."""

UNITS = 1024
"""Ledger units per call: allowances are exact multiples of 1/1024 call."""


class AdaptiveConfig(NamedTuple):
    r"""Static settings of the adaptive policy (closed over, never traced).

    Attributes:
      pool_size: ``N``.
      round_sizes: candidates per round; the number of rounds is the most a
        query may take (so the p95 of rounds is at most ``len(round_sizes)``).
      call_budget: allowance per query as a fraction of its usable pool (the
        hard cap on calls as a fraction of Full's calls).
      max_per_query: the most calls one query may spend (0: the sum of
        ``round_sizes``, clipped to ``N``).
      max_carry: the most unspent calls carried to later queries (0: ``2 N``,
        two pools).
      num_found_states: found-states of the rate table (0, 1, ..., this - 1 or
        more confirmed hits).
      initial_price: the price of a call before any pacing (a relevance rate).
      pacing_rate: :math:`\eta`, the step of the price's dual ascent.
      noise_prior: prior scorer noise :math:`\sigma_0`.
      noise_prior_weight: pseudo-answers behind ``noise_prior``.
      rate_prior: ``(hits, misses)`` Beta pseudo-counts of every table cell.
      stop_rule: one of :data:`STOP_RULES` (the first is the default).
      settle_risk: a query is settled when P(no relevant among its scored)
        is at most this.
      merge: one of :data:`MERGES` (the first is the default).
      hit_spread: let relevant answers spread more than the noise (graded
        scorers).
      unscored_order: one of :data:`UNSCORED_ORDERS` (the first is the default);
        applies to the ``answers_first``, ``confident_no`` and ``evidence`` merges.
      order_ridge: ridge penalty of the learned order's regression.
    """

    pool_size: int
    round_sizes: tuple[int, ...] = (5, 15, 45, 135)
    call_budget: float = 0.25
    max_per_query: int = 0
    max_carry: int = 0
    num_found_states: int = 3
    initial_price: float = 0.05
    pacing_rate: float = 0.1
    noise_prior: float = 0.2
    noise_prior_weight: float = 10.0
    rate_prior: tuple[float, float] = (1.0, 19.0)
    stop_rule: str = "settle_or_spill"
    settle_risk: float = 0.1
    merge: str = "answers_first"
    hit_spread: bool = True
    unscored_order: str = "learned"
    order_ridge: float = 1.0

    @property
    def num_rounds(self) -> int:
        return len(self.round_sizes)

    @property
    def per_query_cap(self) -> int:
        cap = self.max_per_query or sum(self.round_sizes)
        return min(cap, self.pool_size)

    @property
    def carry_cap(self) -> int:
        return self.max_carry or 2 * self.pool_size


class Ledger(NamedTuple):
    r"""What the adaptive policy carries from one query to the next.

    Attributes:
      balance: ``int32[]`` unspent allowance, in 1/1024 call (always >= 0).
      accrued: ``float32[]`` total allowance accrued (calls; for reports).
      spent: ``float32[]`` total calls spent (for reports).
      price: ``float32[]`` the paced price of a call :math:`\lambda`.
      hits: ``float32[B, F]`` soft relevant counts per (rank bucket, found-state).
      trials: ``float32[B, F]`` scored candidates per cell.
      noise_sum: ``float32[]`` :math:`\sum d^2` over answers strictly in (0, 1).
      noise_count: ``float32[]`` how many such answers.
      null_sum: ``float32[B]`` per bucket, :math:`\sum (1 - q) y`: where
        non-relevant answers sit (their location :math:`\mu_{0,b}`).
      null_weight: ``float32[B]`` per bucket, :math:`\sum (1 - q)`.
      hit_sum: ``float32[]`` :math:`\sum q y`: where relevant answers sit
        (their location :math:`\mu_1`, prior 1).
      hit_square_sum: ``float32[]`` :math:`\sum q y^2`: their spread.
      count: ``int32[]`` queries seen.
      call_budget: ``float32[]`` the allowance per usable candidate (traced, so a
        budget sweep does not recompile; ``init(call_budget)`` sets it).
      order_gram: ``float32[3, 3]`` :math:`\sum x x^\top` over scored candidates,
        ``x`` = (1, standardised similarity, standardised memory bias).
      order_rhs: ``float32[3]`` :math:`\sum x q`, ``q`` their posterior
        relevance: the learned order is the ridge fit of ``q`` on ``x``.
    """

    balance: Array
    accrued: Array
    spent: Array
    price: Array
    hits: Array
    trials: Array
    noise_sum: Array
    noise_count: Array
    null_sum: Array
    null_weight: Array
    hit_sum: Array
    hit_square_sum: Array
    count: Array
    call_budget: Array
    order_gram: Array
    order_rhs: Array


class RoundState(NamedTuple):
    """One query's progress through its rounds (not carried across queries).

    Attributes:
      usable: ``bool[N]`` candidates that may be scored and ranked.
      rank: ``int32[N]`` similarity rank among the usable (0 = most similar).
      scored: ``bool[N]`` candidates with a direct score.
      values: ``float32[N]`` direct scores (0 where not scored).
      found_at: ``int32[N]`` the query's found-state when each was scored.
      round: ``int32[]`` rounds scored so far.
      done: ``bool[]`` no more rounds.
      limit: ``int32[]`` calls this query may spend.
      calls: ``int32[]`` calls spent so far (failed pairs included).
      allowance: ``int32[]`` this query's accrual, in ledger units.
      features: ``float32[N, 3]`` the learned order's features (1, standardised
        similarity, standardised memory bias; 0 where not usable).
    """

    usable: Array
    rank: Array
    scored: Array
    values: Array
    found_at: Array
    round: Array
    done: Array
    limit: Array
    calls: Array
    allowance: Array
    features: Array


class AdaptiveInfo(NamedTuple):
    """What one query produced.

    Attributes:
      scores: ``float32[N]`` ranking scores (probability of relevance; ``-inf``
        where not usable).
      anchors: ``bool[N]`` candidates scored directly.
      posterior: ``float32[N]`` posterior relevance of the scored ones (0 elsewhere).
      calls: ``int32[]`` calls paid.
      rounds: ``int32[]`` rounds with at least one call.
      limit: ``int32[]`` the most the query was allowed to spend.
      noise: ``float32[]`` the scorer-noise estimate at the end of the query.
    """

    scores: Array
    anchors: Array
    posterior: Array
    calls: Array
    rounds: Array
    limit: Array
    noise: Array


class AdaptivePolicy(NamedTuple):
    """The adaptive policy's pure functions; build it with :func:`adaptive_policy`.

    Attributes:
      init: ``(call_budget=None) -> Ledger``.
      begin: ``(ledger, query, usable=None, memory_bias=None) -> RoundState``;
        ``memory_bias`` (``float32[N]``, the candidates' biases in the experience
        matrix, fitted on earlier queries only) feeds the learned order.
      select_round: ``(ledger, round_state) -> bool[N]`` the next round's
        candidates (all False when the query is done).
      observe_round: ``(ledger, round_state, observation, requested=None) ->
        RoundState`` folds one round's scores in.
      finish: ``(ledger, round_state) -> (ledger, AdaptiveInfo)``.
      score_query: ``(ledger, query, scorer, usable=None, memory_bias=None) ->
        (ledger, info)``, the
        host loop: ``scorer(mask) -> float32[N]`` is called once per round.
      step: ``(ledger, query, scores_row, usable=None, memory_bias=None) ->
        (ledger, info)``, the
        traced loop (``lax.fori_loop`` over the rounds) for simulation.
      config: the :class:`AdaptiveConfig`.
    """

    init: Callable[[], Ledger]
    begin: Callable[..., RoundState]
    select_round: Callable[[Ledger, RoundState], Array]
    observe_round: Callable[..., RoundState]
    finish: Callable[[Ledger, RoundState], tuple[Ledger, AdaptiveInfo]]
    score_query: Callable[..., tuple[Ledger, AdaptiveInfo]]
    step: Callable[..., tuple[Ledger, AdaptiveInfo]]
    config: AdaptiveConfig


def validate_adaptive_config(config: AdaptiveConfig) -> None:
    """Raises ``ValueError`` naming the first bad field."""
    if not isinstance(config.pool_size, int) or config.pool_size < 1:
        raise ValueError(f"pool_size must be a positive int, got {config.pool_size!r}")
    sizes = tuple(config.round_sizes)
    if not sizes or any(not isinstance(s, int) or s < 1 for s in sizes):
        raise ValueError(f"round_sizes must be positive ints, got {sizes!r}")
    if not 0.0 <= config.call_budget <= 1.0:
        raise ValueError(f"call_budget must be in [0, 1], got {config.call_budget!r}")
    for name in ("max_per_query", "max_carry"):
        value = getattr(config, name)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an int >= 0, got {value!r}")
    if config.num_found_states < 1:
        raise ValueError(
            f"num_found_states must be >= 1, got {config.num_found_states!r}"
        )
    if not 0.0 < config.initial_price < 1.0:
        raise ValueError(
            f"initial_price must be in (0, 1), got {config.initial_price!r}"
        )
    if config.pacing_rate < 0:
        raise ValueError(f"pacing_rate must be >= 0, got {config.pacing_rate!r}")
    if not config.noise_prior > 0 or config.noise_prior_weight < 0:
        raise ValueError("noise_prior must be > 0 and noise_prior_weight >= 0")
    if config.stop_rule not in STOP_RULES:
        raise ValueError(
            f"stop_rule must be one of {STOP_RULES}, got {config.stop_rule!r}"
        )
    if config.merge not in MERGES:
        raise ValueError(f"merge must be one of {MERGES}, got {config.merge!r}")
    if not 0.0 < config.settle_risk < 1.0:
        raise ValueError(f"settle_risk must be in (0, 1), got {config.settle_risk!r}")
    if len(config.rate_prior) != 2 or min(config.rate_prior) <= 0:
        raise ValueError(f"rate_prior must be two counts > 0, got {config.rate_prior}")
    if config.unscored_order not in UNSCORED_ORDERS:
        raise ValueError(
            f"unscored_order must be one of {UNSCORED_ORDERS}, "
            f"got {config.unscored_order!r}"
        )
    if not config.order_ridge > 0:
        raise ValueError(f"order_ridge must be > 0, got {config.order_ridge!r}")


def similarity_ranks(similarity: ArrayLike, usable: ArrayLike) -> Array:
    """``int32[N]``: rank by similarity among the usable (0 = most similar);
    unusable candidates rank after every usable one."""
    priority = jnp.where(usable, jnp.asarray(similarity, jnp.float32), -jnp.inf)
    order = jnp.argsort(-priority, stable=True)
    return jnp.argsort(order, stable=True).astype(jnp.int32)


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


def order_features(
    similarity: ArrayLike, usable: ArrayLike, memory_bias: ArrayLike | None = None
) -> Array:
    """``float32[N, 3]``: (1, similarity, memory bias), both z-scored over the
    usable candidates; rows of unusable candidates are 0, and so is the bias
    column when no memory bias is given (or it has no spread)."""
    usable = jnp.asarray(usable, bool)
    similarity_z = standardised_similarity(similarity, usable)
    if memory_bias is None:
        bias_z = jnp.zeros_like(similarity_z)
    else:
        bias_z = standardised_similarity(memory_bias, usable)
    ones = usable.astype(jnp.float32)
    return jnp.stack([ones, similarity_z, bias_z], axis=-1)


def order_weights(gram: ArrayLike, rhs: ArrayLike, ridge: float) -> Array:
    """``float32[3]``: the ridge solution of the learned order's regression."""
    gram = jnp.asarray(gram, jnp.float32)
    return jnp.linalg.solve(
        gram + ridge * jnp.eye(gram.shape[-1], dtype=gram.dtype),
        jnp.asarray(rhs, jnp.float32),
    )


def _logit(p: Array) -> Array:
    p = jnp.clip(p, 1e-6, 1.0 - 1e-6)
    return jnp.log(p) - jnp.log1p(-p)


def adaptive_policy(config: AdaptiveConfig) -> AdaptivePolicy:
    """Builds the adaptive multi-round policy (see the module docstring).

    Args:
      config: static settings; validated here (``ValueError`` naming the field).

    Returns:
      An :class:`AdaptivePolicy` of pure functions (nothing jitted inside).
    """
    validate_adaptive_config(config)
    num = config.pool_size
    sizes = jnp.asarray(config.round_sizes, jnp.int32)
    edges = jnp.cumsum(sizes)
    num_rounds = config.num_rounds
    num_buckets = num_rounds + 1
    num_states = config.num_found_states
    cap = config.per_query_cap
    carry_units = config.carry_cap * UNITS
    prior_hits, prior_misses = (float(v) for v in config.rate_prior)
    noise_prior_sq = config.noise_prior**2 * config.noise_prior_weight

    def init(call_budget: ArrayLike | None = None) -> Ledger:
        budget = config.call_budget if call_budget is None else call_budget
        return Ledger(
            balance=jnp.zeros((), jnp.int32),
            accrued=jnp.zeros((), jnp.float32),
            spent=jnp.zeros((), jnp.float32),
            price=jnp.asarray(config.initial_price, jnp.float32),
            hits=jnp.zeros((num_buckets, num_states), jnp.float32),
            trials=jnp.zeros((num_buckets, num_states), jnp.float32),
            noise_sum=jnp.zeros((), jnp.float32),
            noise_count=jnp.zeros((), jnp.float32),
            null_sum=jnp.zeros((num_buckets,), jnp.float32),
            null_weight=jnp.zeros((num_buckets,), jnp.float32),
            hit_sum=jnp.zeros((), jnp.float32),
            hit_square_sum=jnp.zeros((), jnp.float32),
            count=jnp.zeros((), jnp.int32),
            call_budget=jnp.clip(jnp.asarray(budget, jnp.float32), 0.0, 1.0),
            order_gram=jnp.zeros((ORDER_FEATURES, ORDER_FEATURES), jnp.float32),
            order_rhs=jnp.zeros((ORDER_FEATURES,), jnp.float32),
        )

    def rates(ledger: Ledger) -> Array:
        return (ledger.hits + prior_hits) / (ledger.trials + prior_hits + prior_misses)

    def bucket_of(rank: Array) -> Array:
        return jnp.searchsorted(edges, rank, side="right").astype(jnp.int32)

    def null_location(ledger: Ledger) -> Array:
        """``float32[B]``: mean answer of non-relevant candidates per bucket."""
        return ledger.null_sum / (ledger.null_weight + config.noise_prior_weight)

    def hit_location(ledger: Ledger) -> Array:
        """``float32[]``: mean answer of relevant candidates (prior 1)."""
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
        count = ledger.noise_count + jnp.sum(inside)
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
        """P(no relevant candidate among the scored) <= settle_risk."""
        q = posterior(ledger, rs)
        log_none = jnp.sum(
            jnp.where(rs.scored, jnp.log1p(-jnp.minimum(q, 1 - 1e-6)), 0)
        )
        return log_none <= math.log(config.settle_risk)

    def begin(
        ledger: Ledger,
        query: Query,
        usable: ArrayLike | None = None,
        memory_bias: ArrayLike | None = None,
    ):
        usable = jnp.asarray(query.valid if usable is None else usable, bool)
        num_usable = jnp.sum(usable)
        allowance = jnp.floor(
            ledger.call_budget * UNITS * num_usable.astype(jnp.float32)
        )
        allowance = allowance.astype(jnp.int32)
        available = (ledger.balance + allowance) // UNITS
        limit = jnp.clip(available, 0, jnp.minimum(cap, num_usable))
        return RoundState(
            usable=usable,
            rank=similarity_ranks(query.similarity, usable),
            scored=jnp.zeros((num,), bool),
            values=jnp.zeros((num,), jnp.float32),
            found_at=jnp.full((num,), -1, jnp.int32),
            round=jnp.zeros((), jnp.int32),
            done=jnp.zeros((), bool),
            limit=limit.astype(jnp.int32),
            calls=jnp.zeros((), jnp.int32),
            allowance=allowance,
            features=order_features(query.similarity, usable, memory_bias),
        )

    def select_round(ledger: Ledger, rs: RoundState) -> Array:
        open_ = rs.usable & ~rs.scored
        # Next candidates: the most similar unscored ones (ranks among the open).
        open_rank = similarity_ranks(-rs.rank.astype(jnp.float32), open_)
        size = sizes[jnp.minimum(rs.round, num_rounds - 1)]
        size = jnp.minimum(size, rs.limit - rs.calls)
        unsettled = ~settled(ledger, rs)
        if config.stop_rule == "settle_or_spill":
            # Once settled, score only the calls the carry cap would discard.
            spill = ledger.balance + rs.allowance - rs.calls * UNITS - carry_units
            spill = jnp.maximum(spill // UNITS, 0)
            size = jnp.where(unsettled, size, jnp.minimum(size, spill))
        chosen = open_ & (open_rank < size)
        rate = rates(ledger)[bucket_of(rs.rank), found_state(ledger, rs)]
        num_chosen = jnp.sum(chosen)
        expected = jnp.sum(jnp.where(chosen, rate, 0.0)) / jnp.maximum(num_chosen, 1)
        priced = expected >= ledger.price
        if config.stop_rule == "settle_or_spill":
            worth = jnp.ones((), bool)  # settled rounds were cut to the spill
        elif config.stop_rule == "settle":
            worth = unsettled
        elif config.stop_rule == "price":
            worth = priced
        elif config.stop_rule == "settle_and_price":
            worth = unsettled & priced
        elif config.stop_rule == "settle_or_expected":
            # Settled, but the next round is still expected to find one more.
            worth = unsettled | (expected * num_chosen >= 1.0)
        elif config.stop_rule == "settle_or_overflow":
            # Use it or lose it: calls the carry cap would discard cost nothing.
            after = ledger.balance + rs.allowance - (rs.calls + num_chosen) * UNITS
            worth = unsettled | (after >= carry_units)
        elif config.stop_rule == "settle_or_price":
            worth = unsettled | priced
        else:  # "settle_or_marginal"
            # After settling, a round is still worth it when its rate beats the
            # least valuable call an unsettled search would make: the deepest
            # round's rate with nothing found.
            marginal = rates(ledger)[num_rounds - 1, 0]
            worth = unsettled | (expected >= marginal)
        go = ~rs.done & (rs.round < num_rounds) & (num_chosen > 0) & worth
        return chosen & go

    def observe_round(
        ledger: Ledger,
        rs: RoundState,
        observation: Observation,
        requested: ArrayLike | None = None,
    ) -> RoundState:
        values = jnp.asarray(observation.values, jnp.float32)
        got = jnp.asarray(observation.mask, bool) & rs.usable & ~rs.scored
        got = got & jnp.isfinite(values)
        requested = got if requested is None else jnp.asarray(requested, bool)
        requested = requested & rs.usable & ~rs.scored
        num_requested = jnp.sum(requested).astype(jnp.int32)
        state_now = found_state(ledger, rs)
        calls = rs.calls + num_requested
        round_ = rs.round + (num_requested > 0).astype(jnp.int32)
        done = rs.done | (num_requested == 0) | (round_ >= num_rounds)
        return rs._replace(
            scored=rs.scored | got,
            values=jnp.where(got, jnp.clip(values, 0.0, 1.0), rs.values),
            found_at=jnp.where(got, state_now, rs.found_at),
            round=round_,
            done=done | (calls >= rs.limit),
            calls=calls,
        )

    def finish(ledger: Ledger, rs: RoundState) -> tuple[Ledger, AdaptiveInfo]:
        q = posterior(ledger, rs)
        final_state = found_state(ledger, rs)
        table = rates(ledger)
        bucket = bucket_of(rs.rank)
        unscored_rate = table[bucket, final_state]
        # Probability of relevance; ties: direct score, then similarity rank.
        scores = jnp.where(
            rs.scored,
            q + 1e-4 * rs.values,
            unscored_rate - 1e-7 * rs.rank.astype(jnp.float32),
        )
        # The unscored candidates' place among themselves (in (0.5, 1.5)): by
        # similarity, or by the order learned from earlier queries' answers.
        unscored_tier = 1.0 - 1e-3 * rs.rank.astype(jnp.float32)
        if config.unscored_order == "learned":
            weights = order_weights(
                ledger.order_gram, ledger.order_rhs, config.order_ridge
            )
            # Scale-free: only the direction of the weights orders candidates.
            direction = weights[1:] / (jnp.sum(jnp.abs(weights[1:])) + 1e-6)
            learned = rs.features[:, 1:] @ direction
            unscored_tier = (
                1.0 + 0.45 * jnp.tanh(learned) - 1e-7 * rs.rank.astype(jnp.float32)
            )
        if config.merge == "evidence":
            # A direct answer lifts a candidate above the unscored ones only when
            # it is evidence for relevance (likelihood ratio > 1); answers that
            # speak against relevance sink below them.
            favours = log_likelihood_ratio(ledger, rs) > 0.0
            scores = jnp.where(
                rs.scored,
                jnp.where(favours, 2.0 + rs.values, rs.values - 1.0),
                unscored_tier,
            )
        if config.merge == "confident_no":
            # As "evidence", but only answers a clean "no" explains (within two
            # noise deviations of where non-relevant answers sit) sink below the
            # unscored ones: graded scorers give borderline relevant memories
            # middling answers that are still worth more than an unscored guess.
            sigma = jnp.sqrt(noise_variance(ledger, rs))
            clean_no = rs.values < null_location(ledger)[bucket] + 2.0 * sigma
            sink = (log_likelihood_ratio(ledger, rs) <= 0.0) & clean_no
            scores = jnp.where(
                rs.scored,
                jnp.where(sink, rs.values - 1.0, 2.0 + rs.values),
                unscored_tier,
            )
        if config.merge == "answers_first":
            # Every direct answer above every unscored candidate: no answer is
            # read as a confident "no", which only a well-fitted noise model
            # could justify (a calibrated reranker's low answers still hold
            # evidence more often than the unscored tail does).
            scores = jnp.where(rs.scored, 2.0 + rs.values, unscored_tier)
        if config.merge == "anchors_first":
            # As "answers_first", with the unscored in similarity order.
            scores = jnp.where(
                rs.scored, 2.0 + rs.values, -1e-3 * rs.rank.astype(jnp.float32)
            )
        scores = jnp.where(rs.usable, scores, -jnp.inf)
        cells = bucket * num_states + jnp.maximum(rs.found_at, 0)
        weight = rs.scored.astype(jnp.float32)
        hits = ledger.hits.reshape(-1).at[cells].add(weight * q).reshape(table.shape)
        trials = ledger.trials.reshape(-1).at[cells].add(weight).reshape(table.shape)
        inside = rs.scored & (rs.values > 0.0) & (rs.values < 1.0)
        distance = distances(ledger, rs)
        not_hit = weight * (1.0 - q)
        null_sum = ledger.null_sum.at[bucket].add(not_hit * rs.values)
        null_weight = ledger.null_weight.at[bucket].add(not_hit)
        balance = ledger.balance + rs.allowance - rs.calls * UNITS
        balance = jnp.minimum(balance, carry_units)
        accrual = rs.allowance.astype(jnp.float32) / UNITS
        overspend = (rs.calls.astype(jnp.float32) - accrual) / jnp.maximum(accrual, 1.0)
        price = ledger.price * jnp.exp(config.pacing_rate * overspend)
        new_ledger = Ledger(
            balance=balance.astype(jnp.int32),
            accrued=ledger.accrued + accrual,
            spent=ledger.spent + rs.calls.astype(jnp.float32),
            price=jnp.clip(price, 1e-4, 1.0),
            hits=hits,
            trials=trials,
            noise_sum=ledger.noise_sum + jnp.sum(jnp.where(inside, distance**2, 0.0)),
            noise_count=ledger.noise_count + jnp.sum(inside),
            null_sum=null_sum,
            null_weight=null_weight,
            hit_sum=ledger.hit_sum + jnp.sum(weight * q * rs.values),
            hit_square_sum=ledger.hit_square_sum + jnp.sum(weight * q * rs.values**2),
            count=ledger.count + 1,
            call_budget=ledger.call_budget,
            order_gram=ledger.order_gram
            + jnp.einsum("n,ni,nj->ij", weight, rs.features, rs.features),
            order_rhs=ledger.order_rhs + jnp.einsum("n,ni->i", weight * q, rs.features),
        )
        info = AdaptiveInfo(
            scores=scores,
            anchors=rs.scored,
            posterior=q,
            calls=rs.calls,
            rounds=rs.round,
            limit=rs.limit,
            noise=jnp.sqrt(noise_variance(ledger, rs)),
        )
        return new_ledger, info

    def score_query(
        ledger: Ledger,
        query: Query,
        scorer: Callable[[Array], ArrayLike],
        usable: ArrayLike | None = None,
        memory_bias: ArrayLike | None = None,
    ) -> tuple[Ledger, AdaptiveInfo]:
        rs = begin(ledger, query, usable, memory_bias)
        for _ in range(num_rounds):
            mask = select_round(ledger, rs)
            if not bool(jnp.any(mask)):
                break
            values = jnp.asarray(scorer(mask), jnp.float32)
            ok = mask & jnp.isfinite(values)
            rs = observe_round(ledger, rs, Observation(values, ok), requested=mask)
        return finish(ledger, rs)

    def step(
        ledger: Ledger,
        query: Query,
        scores_row: ArrayLike,
        usable: ArrayLike | None = None,
        memory_bias: ArrayLike | None = None,
    ) -> tuple[Ledger, AdaptiveInfo]:
        scores_row = jnp.asarray(scores_row, jnp.float32)
        rs = begin(ledger, query, usable, memory_bias)

        def one_round(_, rs):
            mask = select_round(ledger, rs)
            return observe_round(ledger, rs, Observation(scores_row, mask))

        rs = jax.lax.fori_loop(0, num_rounds, one_round, rs)
        return finish(ledger, rs)

    return AdaptivePolicy(
        init, begin, select_round, observe_round, finish, score_query, step, config
    )


def run_adaptive(
    policy: AdaptivePolicy,
    queries: Query,
    scores: ArrayLike,
    usable: ArrayLike | None = None,
    call_budget: ArrayLike | None = None,
) -> tuple[Ledger, AdaptiveInfo]:
    """The adaptive policy over one stream's queries (``lax.scan``; jit-able).

    Args:
      policy: from :func:`adaptive_policy`.
      queries: :class:`Query` with a leading ``T`` axis.
      scores: ``float32[T, N]`` the scorer's answers (read only where scored).
      usable: ``bool[T, N]`` (default ``queries.valid``).
      call_budget: overrides ``config.call_budget`` (may be traced).

    Returns:
      ``(final ledger, AdaptiveInfo with a leading T axis)``.
    """
    usable = queries.valid if usable is None else usable

    def one_query(ledger, inputs):
        query, row, use = inputs
        return policy.step(ledger, query, row, use)

    return jax.lax.scan(
        one_query,
        policy.init(call_budget),
        (queries, jnp.asarray(scores, jnp.float32), usable),
    )


def geometric_round_sizes(first: int, num_rounds: int, factor: float = 2.0):
    """``first, first * factor, ...`` (``num_rounds`` sizes, rounded).

    >>> geometric_round_sizes(10, 4)
    (10, 20, 40, 80)
    """
    return tuple(int(round(first * factor**i)) for i in range(num_rounds))


def rounds_summary(rounds: Sequence[int] | ArrayLike) -> dict[str, float]:
    """``{"mean", "p95", "max"}`` of rounds per query (host side)."""
    import numpy as np

    values = np.asarray(rounds, dtype=float)
    if values.size == 0:
        return {"mean": math.nan, "p95": math.nan, "max": math.nan}
    return {
        "mean": float(values.mean()),
        "p95": float(np.percentile(values, 95)),
        "max": float(values.max()),
    }


__all__ = [
    "MERGES",
    "ORDER_FEATURES",
    "STOP_RULES",
    "UNSCORED_ORDERS",
    "UNITS",
    "AdaptiveConfig",
    "AdaptiveInfo",
    "AdaptivePolicy",
    "Ledger",
    "RoundState",
    "adaptive_policy",
    "geometric_round_sizes",
    "order_features",
    "order_weights",
    "rounds_summary",
    "run_adaptive",
    "similarity_ranks",
    "validate_adaptive_config",
]
