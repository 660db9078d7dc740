"""The adaptive policy assembled: ``begin → (select → observe) × R → finish``
per query (the :class:`~earm_jax.base.Policy` protocol; the loops are
:func:`~earm_jax.core.rounds.traced_rounds` and
:func:`~earm_jax.core.rounds.pay_rounds`), and one stream's queries with the
policy alone (:func:`run_adaptive`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp

from earm_jax.base import Observation, Query, QueryContext, SideInputs
from earm_jax.core.config import InputValueError
from earm_jax.core.rounds import pay_rounds, traced_rounds
from earm_jax.policies.adaptive.answer_model import answer_model
from earm_jax.policies.adaptive.config import (
    UNITS,
    AdaptiveConfig,
    validate_adaptive_config,
)
from earm_jax.policies.adaptive.embedding_calls import EMBEDDING_ORDERS
from earm_jax.policies.adaptive.merges import MERGE_FUNCTIONS
from earm_jax.policies.adaptive.order import order_features
from earm_jax.policies.adaptive.state import (
    AdaptiveInfo,
    AdaptivePolicy,
    Ledger,
    RoundState,
    close_ledger,
    initial_ledger,
    similarity_ranks,
)
from earm_jax.policies.adaptive.stop_rules import round_selector, stop_rule
from earm_jax.policies.learned_calls import call_features
from earm_jax.types import Array, ArrayLike, PRNGKey


def adaptive_policy(config: AdaptiveConfig) -> AdaptivePolicy:
    """Builds the adaptive multi-round policy (see :mod:`earm_jax.policies.adaptive`).

    Args:
      config: static settings; validated here (``ValueError`` naming the field).

    Returns:
      An :class:`AdaptivePolicy` of pure functions (nothing jitted inside).
    """
    validate_adaptive_config(config)
    num = config.pool_size
    num_rounds = config.num_rounds
    cap = config.per_query_cap
    model = answer_model(config)
    merge = MERGE_FUNCTIONS[config.merge]
    select_round = round_selector(config, model)
    rule = stop_rule(config)

    def init(
        key: PRNGKey | None = None, call_budget: ArrayLike | None = None
    ) -> Ledger:
        del key  # the ledger starts empty: nothing random
        return initial_ledger(config, call_budget, rule.init(config))

    def begin(
        key: PRNGKey | None, ledger: Ledger, query: Query, context: QueryContext
    ) -> RoundState:
        del key  # the rounds are deterministic given the answers
        usable = jnp.asarray(context.usable, bool)
        phi = _embedding_features(config, query, usable, context)
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
            features=order_features(query.similarity, usable, context.memory_bias),
            phi=phi,
        )

    def observe(
        ledger: Ledger,
        rs: RoundState,
        requested: ArrayLike,
        observation: Observation,
    ) -> RoundState:
        values = jnp.asarray(observation.values, jnp.float32)
        requested = jnp.asarray(requested, bool) & rs.usable & ~rs.scored
        got = jnp.asarray(observation.mask, bool) & requested & jnp.isfinite(values)
        num_requested = jnp.sum(requested).astype(jnp.int32)
        state_now = model.found_state(ledger, rs)
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
        q = model.posterior(ledger, rs)
        scores = merge(config, model, ledger, rs, q)
        scores = jnp.where(rs.usable, scores, -jnp.inf)
        new_ledger = close_ledger(
            config,
            ledger,
            rs,
            bucket=model.bucket_of(rs.rank),
            posterior=q,
            distance=model.distances(ledger, rs),
            stop_state=rule.close(config, ledger, rs),
        )
        info = AdaptiveInfo(
            scores=scores,
            anchors=rs.scored,
            posterior=q,
            calls=rs.calls,
            rounds=rs.round,
            limit=rs.limit,
            noise=jnp.sqrt(model.noise_variance(ledger, rs)),
        )
        return new_ledger, info

    return AdaptivePolicy(init, begin, select_round, observe, finish, config)


def _embedding_features(
    config: AdaptiveConfig, query: Query, usable: Array, context: QueryContext
) -> Array:
    """``float32[N, F]``: what the embedding call orders read (``F = 0`` for
    the other orders)."""
    if config.call_order not in EMBEDDING_ORDERS:
        return jnp.zeros((config.pool_size, 0), jnp.float32)
    if context.side is None:
        raise InputValueError(
            f"call_order {config.call_order!r} reads the query's and the "
            "memories' embeddings: pass side=SideInputs(...) (a Stream with "
            "query_embeddings and memory_embeddings does it in run / run_batch)"
        )
    width = jnp.shape(context.side.query_embedding)[-1]
    if width != config.embedding_dim:
        raise InputValueError(
            f"the query embedding is {width} wide but the policy's embedding_dim "
            f"is {config.embedding_dim}"
        )
    similarity = jnp.where(usable, jnp.asarray(query.similarity, jnp.float32), 0.0)
    return call_features(
        similarity,
        usable,
        context.side.query_embedding,
        context.side.candidate_embeddings,
    )


def policy_context(
    query: Query,
    usable: ArrayLike | None = None,
    memory_bias=None,
    side: SideInputs | None = None,
):
    """The :class:`~earm_jax.base.QueryContext` of a policy run alone (no
    experience matrix beside it): ``usable`` defaults to ``query.valid``."""
    usable = jnp.asarray(query.valid if usable is None else usable, bool)
    count = jnp.zeros((), jnp.int32)
    room = jnp.asarray(usable.shape[-1], jnp.int32)
    return QueryContext(usable, count, room, memory_bias, side)


def adaptive_query(
    policy: AdaptivePolicy,
    ledger: Ledger,
    query: Query,
    answers: ArrayLike,
    usable: ArrayLike | None = None,
    memory_bias: ArrayLike | None = None,
    side: SideInputs | None = None,
) -> tuple[Ledger, AdaptiveInfo]:
    """One query's rounds with the answers known up front (jit-able): the
    policy alone, or beside a model that supplies ``memory_bias``; ``side``
    are the texts' embeddings the embedding call orders read."""
    context = policy_context(query, usable, memory_bias, side)
    return traced_rounds(policy, None, ledger, query, context, answers)


def score_query(
    policy: AdaptivePolicy,
    ledger: Ledger,
    query: Query,
    scorer: Callable[[Array], ArrayLike],
    usable: ArrayLike | None = None,
    memory_bias: ArrayLike | None = None,
) -> tuple[Ledger, AdaptiveInfo]:
    """One query's rounds on the host (:func:`~earm_jax.core.rounds.pay_rounds`)
    with ``scorer(mask) -> float32[N]`` called once per round; a non-finite
    answer at a requested candidate is a failed call."""

    def pay(positions):
        mask = jnp.zeros(jnp.shape(query.candidates), bool).at[positions].set(True)
        values = jnp.asarray(scorer(mask), jnp.float32)[positions]
        return values, jnp.isfinite(values)

    context = policy_context(query, usable, memory_bias)
    return pay_rounds(policy, None, ledger, query, context, pay)


def run_adaptive(
    policy: AdaptivePolicy,
    queries: Query,
    scores: ArrayLike,
    usable: ArrayLike | None = None,
    call_budget: ArrayLike | None = None,
) -> tuple[Ledger, AdaptiveInfo]:
    """The adaptive policy alone over one stream's queries (``lax.scan``;
    jit-able): no experience matrix beside it, so the learned order reads no
    memory bias (:func:`~earm_jax.run` with
    ``online_solver(config, policy)`` runs it beside one).

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
        return adaptive_query(policy, ledger, query, row, use)

    return jax.lax.scan(
        one_query,
        policy.init(None, call_budget),
        (queries, jnp.asarray(scores, jnp.float32), usable),
    )


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
    "adaptive_policy",
    "adaptive_query",
    "policy_context",
    "rounds_summary",
    "run_adaptive",
    "score_query",
]
