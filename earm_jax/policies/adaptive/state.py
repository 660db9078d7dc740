r"""What the adaptive policy carries: the :class:`Ledger` from query to query,
the :class:`RoundState` through one query's rounds, and what a query produced."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp

from earm_jax.policies.adaptive.config import ORDER_FEATURES, UNITS, AdaptiveConfig
from earm_jax.policies.adaptive.embedding_calls import (
    EmbeddingFit,
    add_answers,
    empty_fit,
)
from earm_jax.types import Array, ArrayLike


class Ledger(NamedTuple):
    r"""What the adaptive policy carries from one query to the next.

    Attributes:
      balance: ``int32[]`` unspent allowance, in 1/1024 call (always >= 0).
      accrued: ``float32[]`` total allowance accrued (calls; for reports).
      spent: ``float32[]`` total calls spent (for reports).
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
      stop_state: what the stop rule carries from query to query
        (:class:`~earm_jax.policies.adaptive.stop_rules.StopRule`); ``()``
        for the default rule, which carries nothing.
      embedding_fit: the ``"embedding"`` call orders' regression over every
        answer paid so far
        (:class:`~earm_jax.policies.adaptive.embedding_calls.EmbeddingFit`,
        0 features wide when the call order does not read the texts).
    """

    balance: Array
    accrued: Array
    spent: Array
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
    stop_state: Any
    embedding_fit: EmbeddingFit


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
      phi: ``float32[N, F]`` the embedding call orders' features (``F = 0``
        when the call order does not read the texts).
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
    phi: Array


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
    """The adaptive policy's pure functions, a :class:`~earm_jax.base.Policy`;
    build it with :func:`~earm_jax.policies.adaptive.adaptive_policy`.

    Attributes:
      init: ``(key, call_budget=None) -> Ledger``; ``call_budget`` (may be
        traced, so a budget sweep does not recompile) overrides
        ``config.call_budget``. The key is not read: the ledger starts empty.
      begin: ``(key, ledger, query, context) -> RoundState``; the context's
        ``memory_bias`` (the candidates' biases in the experience matrix,
        fitted on earlier queries only) feeds the learned order.
      select: ``(ledger, round_state) -> bool[N]`` the next round's
        candidates (all False when the query is done).
      observe: ``(ledger, round_state, requested, observation) -> RoundState``
        folds one round's answers in (``requested`` count as calls, answered
        or not).
      finish: ``(ledger, round_state) -> (ledger, AdaptiveInfo)``.
      config: the :class:`~earm_jax.policies.adaptive.AdaptiveConfig`.
    """

    init: Callable[..., Ledger]
    begin: Callable[..., RoundState]
    select: Callable[[Ledger, RoundState], Array]
    observe: Callable[..., RoundState]
    finish: Callable[[Ledger, RoundState], tuple[Ledger, AdaptiveInfo]]
    config: AdaptiveConfig

    @property
    def pool_size(self) -> int:
        """The pool size ``N`` the policy was built for."""
        return self.config.pool_size

    @property
    def num_rounds(self) -> int:
        """The most rounds one query takes."""
        return self.config.num_rounds

    @property
    def max_calls(self) -> int:
        """The most calls one query may pay (``config.per_query_cap``)."""
        return self.config.per_query_cap


def initial_ledger(
    config: AdaptiveConfig,
    call_budget: ArrayLike | None = None,
    stop_state: Any = (),
) -> Ledger:
    """The empty :class:`Ledger`: no balance, no answers, the priors only.

    ``call_budget`` (may be traced) overrides ``config.call_budget``;
    ``stop_state`` is the stop rule's initial carry.
    """
    num_buckets = config.num_rounds + 1
    num_states = config.num_found_states
    budget = config.call_budget if call_budget is None else call_budget
    return Ledger(
        balance=jnp.zeros((), jnp.int32),
        accrued=jnp.zeros((), jnp.float32),
        spent=jnp.zeros((), jnp.float32),
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
        stop_state=stop_state,
        embedding_fit=empty_fit(config.embedding_features),
    )


def close_ledger(
    config: AdaptiveConfig,
    ledger: Ledger,
    rs: RoundState,
    bucket: Array,
    posterior: Array,
    distance: Array,
    stop_state: Any = (),
) -> Ledger:
    """The ledger after one query: its calls paid, its balance carried (up to the
    carry cap), and its answers added to the rate table, the noise and location
    sums and the learned order's normal equations.

    Args:
      config: the policy's settings.
      ledger: the ledger the query began with.
      rs: the query's final round state.
      bucket: ``int32[N]`` each candidate's rank bucket.
      posterior: ``float32[N]`` posterior relevance of the scored (0 elsewhere).
      distance: ``float32[N]`` each answer's distance to the nearer location.
      stop_state: what the stop rule carries after this query.
    """
    q = posterior
    num_states = config.num_found_states
    carry_units = config.carry_cap * UNITS
    cells = bucket * num_states + jnp.maximum(rs.found_at, 0)
    weight = rs.scored.astype(jnp.float32)
    shape = ledger.hits.shape
    hits = ledger.hits.reshape(-1).at[cells].add(weight * q).reshape(shape)
    trials = ledger.trials.reshape(-1).at[cells].add(weight).reshape(shape)
    inside = rs.scored & (rs.values > 0.0) & (rs.values < 1.0)
    not_hit = weight * (1.0 - q)
    null_sum = ledger.null_sum.at[bucket].add(not_hit * rs.values)
    null_weight = ledger.null_weight.at[bucket].add(not_hit)
    balance = ledger.balance + rs.allowance - rs.calls * UNITS
    balance = jnp.minimum(balance, carry_units)
    accrual = rs.allowance.astype(jnp.float32) / UNITS
    return Ledger(
        balance=balance.astype(jnp.int32),
        accrued=ledger.accrued + accrual,
        spent=ledger.spent + rs.calls.astype(jnp.float32),
        hits=hits,
        trials=trials,
        noise_sum=ledger.noise_sum + jnp.sum(jnp.where(inside, distance**2, 0.0)),
        noise_count=ledger.noise_count
        + jnp.sum(inside, dtype=ledger.noise_count.dtype),
        null_sum=null_sum,
        null_weight=null_weight,
        hit_sum=ledger.hit_sum + jnp.sum(weight * q * rs.values),
        hit_square_sum=ledger.hit_square_sum + jnp.sum(weight * q * rs.values**2),
        count=ledger.count + 1,
        call_budget=ledger.call_budget,
        order_gram=ledger.order_gram
        + jnp.einsum("n,ni,nj->ij", weight, rs.features, rs.features),
        order_rhs=ledger.order_rhs + jnp.einsum("n,ni->i", weight * q, rs.features),
        stop_state=stop_state,
        embedding_fit=add_answers(ledger.embedding_fit, rs.phi, rs.values, rs.scored),
    )


def similarity_ranks(similarity: ArrayLike, usable: ArrayLike) -> Array:
    """``int32[N]``: rank by similarity among the usable (0 = most similar);
    unusable candidates rank after every usable one."""
    priority = jnp.where(usable, jnp.asarray(similarity, jnp.float32), -jnp.inf)
    order = jnp.argsort(-priority, stable=True)
    return jnp.argsort(order, stable=True).astype(jnp.int32)


__all__ = [
    "AdaptiveInfo",
    "AdaptivePolicy",
    "Ledger",
    "RoundState",
    "close_ledger",
    "initial_ledger",
    "similarity_ranks",
]
