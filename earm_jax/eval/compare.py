"""The seven policies (docs/policies.md) on the same streams, seeds and pools.

Every policy becomes a ranking of each query's pool: a score per candidate (higher
first) and an eligibility mask (candidates that may enter the context at all).
``compare_policies`` runs the solver twice (rank ``r`` for Mixed, rank 0 for
Bias-only) with the same key, so both see exactly the same anchors; the other
policies need no solver. ``policy_metrics`` turns rankings into per-query metrics.

| policy | calls per query | ranking |
| --- | --- | --- |
| ``semantic`` | 0 | similarity |
| ``full`` | usable candidates | the scorer's answer for every candidate |
| ``observed`` | ``B_t`` | anchors by answer; the context holds anchors only |
| ``observed_backfill`` | ``B_t`` | anchors by answer, then similarity order |
| ``mixed`` | ``B_t`` | answer on anchors, completion elsewhere (EARM) |
| ``bias_only`` | ``B_t`` | ``mixed`` with rank 0 |
| ``top_similarity`` | ``B_t`` | the ``B_t`` most similar by answer, then similarity |

With a side-information model (``side=``, :mod:`earm_jax.core.side_information`)
and a stream that carries embeddings, ``mixed_side`` (Mixed's anchors and calls,
completed from the texts) and, with ``adaptive``, ``best_side`` (``best`` whose
learned order reads that completion): :mod:`earm_jax.policies.side_information`;
``mixed_fused`` (Mixed's anchors and calls, every candidate on the answer's
scale: the unpaid by a regression of the answers on the cosine, the texts and
the memory's bias from earlier queries): :mod:`earm_jax.policies.fused_mixed`;
and ``learned_calls`` (Top-similarity's calls, the later ones where a function
of the embeddings learned from the paid answers points):
:mod:`earm_jax.policies.learned_calls`.

With ``expand=E > 0`` an eighth (or ninth) policy ``mixed_expand``: Mixed's
ranking of the pool plus ``E`` expansion slots, the eligible memories outside
the pool with the highest completion (docs/design-notes.md,
:mod:`earm_jax.contrib.expand`); same anchors and calls as ``mixed``. Its ranking
has ``N + E`` items, its own relevance labels (from
``Stream.relevant_memories``) and per-query rows ``expanded@K`` (expansion
memories in the top K) and ``expanded_relevant@K`` (those that are relevant).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.base import AnchorPolicy, Stream
from earm_jax.core.config import SolverConfig
from earm_jax.core.online import online_solver
from earm_jax.core.run import run
from earm_jax.core.side_information import SideInformation
from earm_jax.eval.metrics import ranking_metrics, ranking_positions
from earm_jax.policies.adaptive import AdaptiveConfig, adaptive_policy, run_adaptive
from earm_jax.policies.adaptive.embedding_calls import EMBEDDING_ORDERS
from earm_jax.policies.adaptive_history import run_adaptive_with_history
from earm_jax.policies.anchors import top_similarity_anchors
from earm_jax.policies.fused_mixed import memory_prior, run_mixed_fused
from earm_jax.policies.learned_calls import learned_calls, run_learned_calls
from earm_jax.policies.rerank import anchors_first
from earm_jax.policies.side_information import run_best_side, run_mixed_side
from earm_jax.types import Array, PRNGKey

POLICIES = (
    "semantic",
    "full",
    "observed",
    "observed_backfill",
    "mixed",
    "bias_only",
    "top_similarity",
)


class PolicyRanking(NamedTuple):
    """One policy's rankings of a stream.

    Attributes:
      scores: ``float32[T, N]`` ranking scores (higher first).
      eligible: ``bool[T, N]`` candidates that may enter the ranking.
      calls: ``int32[T]`` direct-scoring calls paid at each query.
      rounds: ``int32[T]`` scoring rounds per query (multi-round policies only).
      relevant: ``bool[T, W]`` labels of the ranked items when they are not the
        pool (``W = N + E`` for ``mixed_expand``); ``None``: ``stream.relevant``.
      memories: ``int32[T, W]`` memory rows of the ranked items when they are
        not the pool's candidates; ``None``: ``stream.queries.candidates``.
      expanded: ``bool[T, W]`` items from outside the pool (search expansion).
    """

    scores: Array
    eligible: Array
    calls: Array
    rounds: Array | None = None
    relevant: Array | None = None
    memories: Array | None = None
    expanded: Array | None = None


def usable_mask(stream: Stream) -> Array:
    """``bool[T, N]``: valid candidates whose memory exists at their query."""
    num_queries = stream.scores.shape[0]
    inserted = (
        stream.insert_time[stream.queries.candidates]
        <= jnp.arange(num_queries)[:, None]
    )
    return jnp.asarray(stream.queries.valid, bool) & inserted


def compare_policies(
    key: PRNGKey,
    stream: Stream,
    config: SolverConfig,
    policy: AnchorPolicy,
    adaptive: AdaptiveConfig | None = None,
    expand: int = 0,
    expand_min_score: float = -float("inf"),
    side: SideInformation | None = None,
) -> dict[str, PolicyRanking]:
    """Rankings of all seven policies on one stream (jit-able; vmap over streams).

    Args:
      key: PRNG key (the same key gives Mixed and Bias-only the same anchors).
      stream: one stream.
      config: the solver configuration for Mixed (Bias-only uses ``rank=0``).
      policy: budget schedule and anchor sampler of the anchored policies
        (Top-similarity uses the same budget schedule, with top-similarity anchors).
      adaptive: when given, an eighth policy ``"best"``: the adaptive multi-round
        policy under its hard call budget
        (:mod:`earm_jax.policies.adaptive`; with ``unscored_order="learned"`` it
        runs beside a solver of ``config``, :mod:`~earm_jax.policies.adaptive_history`);
        its ranking's ``rounds`` field holds the rounds per query.
      expand: ``E`` expansion slots (a Python int); ``> 0`` adds the policy
        ``"mixed_expand"`` (needs ``stream.relevant_memories``).
      expand_min_score: an outside memory takes a slot only with a completion
        at least this (``-inf``: no gate).
      side: a side-information model; adds ``"mixed_side"``, ``"mixed_fused"``,
        ``"learned_calls"`` (and ``"best_side"`` with ``adaptive``); needs
        ``stream.query_embeddings`` and ``stream.memory_embeddings``.

    Returns:
      ``{policy name: PolicyRanking}`` for every name in :data:`POLICIES`
      (and ``"best"``, ``"mixed_expand"``, ``"mixed_side"``, ``"best_side"``).
    """
    if side is not None and (
        stream.query_embeddings is None or stream.memory_embeddings is None
    ):
        raise ValueError(
            "side needs stream.query_embeddings and stream.memory_embeddings"
        )
    usable = usable_mask(stream)
    answers = jnp.asarray(stream.scores, jnp.float32)
    similarity = jnp.where(usable, stream.queries.similarity, -jnp.inf)
    solver = online_solver(config, policy)
    expanded = {}
    if expand > 0:
        # Search expansion measured negative and lives outside the traced core
        # (docs/design-notes.md): imported only when asked for.
        from earm_jax.contrib.expand import expanded_ranking, run_expanded

        if stream.relevant_memories is None:
            raise ValueError(
                "expand > 0 needs stream.relevant_memories (labels of the memories "
                "outside the pool)"
            )
        _, mixed, expansion = run_expanded(
            solver, key, stream, expand, expand_min_score
        )
        scores, eligible, memories = expanded_ranking(
            mixed.scores, usable, stream.queries.candidates, expansion
        )
        outside_relevant = jnp.take_along_axis(
            jnp.asarray(stream.relevant_memories, bool), expansion.memories, axis=-1
        )
        expanded["mixed_expand"] = PolicyRanking(
            scores,
            eligible,
            jnp.sum(mixed.anchors, axis=-1, dtype=jnp.int32),
            relevant=jnp.concatenate(
                [
                    jnp.asarray(stream.relevant, bool),
                    outside_relevant & expansion.valid,
                ],
                axis=-1,
            ),
            memories=memories,
            expanded=jnp.concatenate(
                [jnp.zeros_like(usable), expansion.valid], axis=-1
            ),
        )
    else:
        _, mixed = run(solver, key, stream)
    _, bias = run(online_solver(config._replace(rank=0), policy), key, stream)
    anchors = mixed.anchors
    calls = jnp.sum(anchors, axis=-1, dtype=jnp.int32)

    num_queries = stream.scores.shape[0]
    budgets = jnp.clip(
        jax.vmap(policy.budget)(jnp.arange(num_queries)), 0, config.max_budget
    )
    top_anchor_fn = top_similarity_anchors()
    top_anchors = jax.vmap(lambda q, b, u: top_anchor_fn(None, q, b, u))(
        stream.queries, budgets, usable
    )
    observed_scores = jnp.where(anchors, answers, -jnp.inf)
    extra = {}
    if adaptive is not None:
        reads_texts = adaptive.call_order in EMBEDDING_ORDERS
        if reads_texts and (
            stream.query_embeddings is None or stream.memory_embeddings is None
        ):
            raise ValueError(
                f"call_order {adaptive.call_order!r} needs stream.query_embeddings "
                "and stream.memory_embeddings"
            )
        if reads_texts and adaptive.embedding_dim == 0:
            adaptive = adaptive._replace(
                embedding_dim=int(jnp.shape(stream.query_embeddings)[-1])
            )
        texts = (
            (stream.query_embeddings, stream.memory_embeddings)
            if reads_texts
            else (None, None)
        )
        best_policy = adaptive_policy(adaptive)
        if adaptive.unscored_order == "learned" or reads_texts:
            # The experience matrix beside the policy: the same solver settings
            # as Mixed, with rows wide enough for what one query may pay.
            history_solver = online_solver(
                config._replace(max_budget=config.pool_size),
                policy,
            )
            _, best = run_adaptive_with_history(
                best_policy,
                history_solver,
                key,
                stream.queries,
                answers,
                stream.insert_time,
                usable,
                None,
                *texts,
            )
        else:
            _, best = run_adaptive(best_policy, stream.queries, answers, usable)
        extra["best"] = PolicyRanking(best.scores, usable, best.calls, best.rounds)
        if side is not None:
            _, best_side = run_best_side(
                best_policy,
                side,
                stream.queries,
                answers,
                stream.query_embeddings,
                stream.memory_embeddings,
                usable,
            )
            extra["best_side"] = PolicyRanking(
                best_side.scores, usable, best_side.calls, best_side.rounds
            )
    if side is not None:
        _, mixed_side = run_mixed_side(
            side,
            stream.queries,
            answers,
            anchors,
            stream.query_embeddings,
            stream.memory_embeddings,
            usable,
        )
        extra["mixed_side"] = PolicyRanking(mixed_side, usable, calls)
        _, mixed_fused = run_mixed_fused(
            stream.queries,
            answers,
            anchors,
            memory_prior(bias.completed, usable),
            usable,
            stream.query_embeddings,
            stream.memory_embeddings,
        )
        extra["mixed_fused"] = PolicyRanking(mixed_fused, usable, calls)
        top_calls = jnp.sum(top_anchors, axis=-1, dtype=jnp.int32)
        _, learned_paid = run_learned_calls(
            learned_calls(),
            stream.queries,
            answers,
            top_calls,
            stream.query_embeddings,
            stream.memory_embeddings,
            usable,
        )
        extra["learned_calls"] = PolicyRanking(
            anchors_first(answers, learned_paid, similarity),
            usable,
            jnp.sum(learned_paid, axis=-1, dtype=jnp.int32),
        )
    return (
        extra
        | {
            "semantic": PolicyRanking(similarity, usable, jnp.zeros_like(calls)),
            "full": PolicyRanking(
                jnp.where(usable, answers, -jnp.inf),
                usable,
                jnp.sum(usable, axis=-1, dtype=jnp.int32),
            ),
            "observed": PolicyRanking(observed_scores, anchors, calls),
            "observed_backfill": PolicyRanking(
                anchors_first(answers, anchors, similarity), usable, calls
            ),
            "mixed": PolicyRanking(mixed.scores, usable, calls),
            "bias_only": PolicyRanking(
                bias.scores, usable, jnp.sum(bias.anchors, axis=-1, dtype=jnp.int32)
            ),
            "top_similarity": PolicyRanking(
                anchors_first(answers, top_anchors, similarity),
                usable,
                jnp.sum(top_anchors, axis=-1, dtype=jnp.int32),
            ),
        }
        | expanded
    )


def policy_metrics(
    rankings: dict[str, PolicyRanking], stream: Stream, ks: Sequence[int] = (10, 20)
) -> tuple[dict[str, dict[str, Array]], Array]:
    """Per-query metrics of every policy.

    Returns:
      ``({policy: {"recall@K", "hit@K", "ndcg@K", "mrr", "calls": float32[..., T]}},
      has_relevant bool[..., T])``. MRR does not depend on K.
    """
    relevant = jnp.asarray(stream.relevant, bool)
    num_relevant = stream.num_relevant
    results: dict[str, dict[str, Array]] = {}
    has_relevant = None
    for name, ranking in rankings.items():
        row: dict[str, Array] = {}
        labels = relevant if ranking.relevant is None else ranking.relevant
        for k in ks:
            metrics = ranking_metrics(
                ranking.scores,
                labels,
                k=k,
                where=ranking.eligible,
                num_relevant=num_relevant,
            )
            row[f"recall@{k}"] = metrics.recall
            row[f"hit@{k}"] = metrics.hit
            row[f"ndcg@{k}"] = metrics.ndcg
            row["mrr"] = metrics.mrr
            has_relevant = metrics.has_relevant
        if ranking.expanded is not None:
            positions = ranking_positions(ranking.scores, where=ranking.eligible)
            slots = ranking.expanded & ranking.eligible
            row["slots_filled"] = slots.sum(-1).astype(jnp.float32)
            row["slots_relevant"] = (slots & labels).sum(-1).astype(jnp.float32)
            in_pool = (labels & ~ranking.expanded).sum(-1)
            total = in_pool if num_relevant is None else num_relevant
            row["missed_relevant"] = jnp.maximum(total - in_pool, 0).astype(jnp.float32)
            row["slots_recall"] = jnp.where(
                total > 0,
                row["slots_relevant"] / jnp.maximum(total, 1).astype(jnp.float32),
                0.0,
            )
            for k in ks:
                entered = ranking.expanded & ranking.eligible & (positions < k)
                row[f"expanded@{k}"] = entered.sum(-1).astype(jnp.float32)
                row[f"expanded_relevant@{k}"] = (
                    (entered & labels).sum(-1).astype(jnp.float32)
                )
        row["calls"] = ranking.calls.astype(jnp.float32)
        if ranking.rounds is not None:
            row["rounds"] = ranking.rounds.astype(jnp.float32)
        results[name] = row
    return results, has_relevant


def evaluate_policies(
    key: PRNGKey,
    stream: Stream,
    config: SolverConfig,
    policy: AnchorPolicy,
    ks: Sequence[int] = (10, 20),
    adaptive: AdaptiveConfig | None = None,
    expand: int = 0,
    expand_min_score: float = -float("inf"),
    side: SideInformation | None = None,
) -> tuple[dict[str, dict[str, Array]], Array, Array]:
    """``compare_policies`` then ``policy_metrics`` for one stream.

    Returns:
      ``(metrics, has_relevant bool[T], budgets int32[T])``; jit with
      ``config``, ``policy`` and ``ks`` closed over.
    """
    rankings = compare_policies(
        key, stream, config, policy, adaptive, expand, expand_min_score, side
    )
    metrics, has_relevant = policy_metrics(rankings, stream, ks)
    return metrics, has_relevant, rankings["mixed"].calls


__all__ = [
    "POLICIES",
    "PolicyRanking",
    "anchors_first",
    "compare_policies",
    "evaluate_policies",
    "policy_metrics",
    "usable_mask",
]
