"""The data types every part of earm_jax speaks: queries, observations, streams.

All are NamedTuples of arrays (pytrees) with fixed shapes; masks mark padding so
that no shape ever depends on data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, Protocol, runtime_checkable

import jax.numpy as jnp
from jaxtyping import Bool, Float, Int

from earm_jax.types import Array, ArrayLike, PRNGKey


class Query(NamedTuple):
    """One query's candidate pool, as the retriever returned it.

    The annotations give the shapes in the dimension names of
    :mod:`earm_jax.types` (here and in the types below; floats are float32,
    integers int32); a stream stacks a leading ``T`` axis.

    Attributes:
      candidates: memory ids (rows of the experience matrix).
      similarity: retriever similarity of each candidate.
      valid: False marks padding (pools shorter than ``N``).
    """

    candidates: Int[Array, " N"]
    similarity: Float[Array, " N"]
    valid: Bool[Array, " N"]


class Observation(NamedTuple):
    """Direct relevance scores paid for at one query, aligned with the pool.

    Attributes:
      values: scores in [0, 1]; read only where ``mask``.
      mask: which candidates were scored successfully.
    """

    values: Float[Array, " N"]
    mask: Bool[Array, " N"]


class StepInfo(NamedTuple):
    """What one query produced (not carried to the next query).

    ``run`` stacks a leading ``T`` axis on every field, ``run_batch`` ``S, T``.

    Attributes:
      scores: mixed scores: the direct score where observed, the completion
        elsewhere, ``-inf`` at padding / not-yet-inserted candidates.
      completed: the model's prediction for every candidate
        (``mu + b_m + c_t + u_m . v_t``), also where observed.
      anchors: which candidates were observed (and stored) at this query.
      budget: the direct-scoring budget the policy allowed, after the clip to
        ``[0, SolverConfig.max_budget]`` (the anchors can be fewer when fewer
        candidates are usable).
      dropped: observations that could not be stored (row full or history at
        capacity). Zero in every normal run; reported, never hidden.
      calls: calls the policy paid at this query, failed ones included.
      rounds: rounds with at least one call (1 for a one-round policy that
        paid anything).

    With a policy that ranks by itself (``best``, learned calls) ``scores``
    is the policy's ranking and ``budget`` the most calls it was allowed.
    """

    scores: Float[Array, " N"]
    completed: Float[Array, " N"]
    anchors: Bool[Array, " N"]
    budget: Int[Array, ""]
    dropped: Int[Array, ""]
    calls: Int[Array, ""]
    rounds: Int[Array, ""]


class Stream(NamedTuple):
    """A whole query stream for simulation / offline evaluation.

    Attributes:
      queries: ``Query`` with a leading ``T`` axis.
      scores: the scorer's answer for every (query, candidate); the solver sees
        an entry only where it anchors.
      relevant: ground truth (may be all False where unknown).
      insert_time: index of the first query at which each memory exists.
      num_relevant: relevant memories per query including those the retriever
        missed (the recall denominator); ``None`` means ``relevant.sum(-1)``.
      category: an optional per-query label (e.g. LoCoMo category id).
      relevant_memories: optional ground truth over every memory row, in the
        pool or not (labels for search expansion, docs/design-notes.md);
        ``None`` where unknown.
      memory_embeddings: optional unit embeddings of the memories (side
        information, ``D`` wide); ``None`` where not kept.
      query_embeddings: optional unit embeddings of the queries, with
        ``memory_embeddings``.
    """

    queries: Query
    scores: Float[Array, "T N"]
    relevant: Bool[Array, "T N"]
    insert_time: Int[Array, " M"]
    num_relevant: Int[Array, " T"] | None = None
    category: Int[Array, " T"] | None = None
    relevant_memories: Bool[Array, "T M"] | None = None
    memory_embeddings: Float[Array, "M D"] | None = None
    query_embeddings: Float[Array, "T D"] | None = None


NOT_INSERTED = 2**31 - 1
"""``insert_time`` of a memory row that holds no memory yet (int32 max): never
usable, however many queries pass."""

BudgetFn = Callable[[ArrayLike], Array]
"""``count -> int32[]``: the direct-scoring budget of query number ``count``."""


class AnchorFn(Protocol):
    def __call__(
        self, key: PRNGKey, query: Query, budget: ArrayLike, usable: ArrayLike
    ) -> Array:
        """Returns ``bool[N]``: at most ``budget`` of the ``usable`` candidates."""


class SideInputs(NamedTuple):
    """The query's and its candidates' unit text embeddings.

    Attributes:
      query_embedding: the query's embedding.
      candidate_embeddings: each candidate's memory embedding (rows of
        padding are arbitrary).
    """

    query_embedding: Float[Array, " D"]
    candidate_embeddings: Float[Array, "N D"]


class QueryContext(NamedTuple):
    """What the caller knows about one query besides its pool, handed to a
    policy's ``begin``.

    Attributes:
      usable: candidates that may be paid for and ranked (valid, and their
        memory exists at this query).
      count: the query's index in its stream (queries seen before it).
      room: the most answers the history can store for this query
        (``SolverConfig.max_budget``); a schedule's budget is clipped to it.
      memory_bias: the candidates' biases :math:`b_m` in the experience matrix,
        fitted on earlier queries only; ``None`` where no matrix runs beside
        the policy.
      side: side information (:class:`SideInputs`) where the stream carries
        embeddings; ``None`` otherwise.
    """

    usable: Bool[Array, " N"]
    count: Int[Array, ""]
    room: Int[Array, ""]
    memory_bias: Float[Array, " N"] | None = None
    side: SideInputs | None = None


@runtime_checkable
class Decision(Protocol):
    """What one query's rounds decided (the bundle a policy's ``finish``
    returns; a policy may add fields of its own)."""

    anchors: Array
    """``bool[N]`` the candidates paid for whose answer came back (stored)."""
    scores: Array | None
    """``float32[N]`` the policy's own ranking (``-inf`` where not usable), or
    ``None``: the solver's mixed scores rank."""
    calls: Array
    """``int32[]`` calls paid, failed ones included."""
    rounds: Array
    """``int32[]`` rounds with at least one call."""
    limit: Array
    """``int32[]`` the most calls the query was allowed."""


@runtime_checkable
class Policy(Protocol):
    """Every policy, in one shape: per query a loop of rounds, ``begin`` then
    ``select`` → pay → ``observe`` until ``select`` asks for nothing (or
    ``num_rounds`` rounds), then ``finish``; a carry passes from query to
    query.

    A one-round policy (the paper's, :class:`AnchorPolicy`) is the case
    ``num_rounds == 1`` with an empty carry; ``best``
    (:func:`~earm_jax.policies.adaptive.adaptive_policy`) pays growing rounds
    under a ledger it carries; learned calls
    (:func:`~earm_jax.policies.learned_calls.learned_calls_policy`) carry a
    regression. :func:`~earm_jax.online_solver` (and so :func:`~earm_jax.run`
    and :func:`~earm_jax.run_batch`) accepts any of them;
    :func:`~earm_jax.core.rounds.pay_rounds` drives the loop on the host with
    a live scorer.

    Key first wherever a key is taken; all functions pure and shape-static.
    """

    pool_size: int | None
    """The pool size the policy was built for, or ``None`` when it does not
    depend on one."""
    num_rounds: int
    """The most rounds one query may take (static)."""
    max_calls: int | None
    """The most calls one query may pay (the history must store them all), or
    ``None`` when the solver's ``max_budget`` clips it."""

    def init(self, key: PRNGKey) -> Any:
        """The carry before the first query."""

    def begin(
        self, key: PRNGKey, carry: Any, query: Query, context: QueryContext
    ) -> Any:
        """A query's progress before its first round."""

    def select(self, carry: Any, progress: Any) -> Array:
        """``bool[N]`` the next round's calls; all False when the query is done."""

    def observe(
        self, carry: Any, progress: Any, requested: Array, observation: Observation
    ) -> Any:
        """The progress after one round: ``requested`` were paid for,
        ``observation.mask`` marks the answers that came back."""

    def finish(self, carry: Any, progress: Any) -> tuple[Any, Decision]:
        """The carry for the next query and what this query decided."""


class AnchorProgress(NamedTuple):
    """A one-round policy's query: the anchors it plans, what came back."""

    planned: Bool[Array, " N"]
    answered: Bool[Array, " N"]
    calls: Int[Array, ""]
    round: Int[Array, ""]
    limit: Int[Array, ""]


class RoundsDecision(NamedTuple):
    """A :class:`Decision` (see there for the fields)."""

    anchors: Bool[Array, " N"]
    scores: Float[Array, " N"] | None
    calls: Int[Array, ""]
    rounds: Int[Array, ""]
    limit: Int[Array, ""]


class AnchorPolicy(NamedTuple):
    """A one-round :class:`Policy`: how many direct scores to pay for (a
    budget schedule), and which candidates get them (an anchor sampler); the
    solver's mixed scores rank. The paper's policies and its baselines
    (:func:`~earm_jax.paper_policy`, :func:`~earm_jax.top_similarity_policy`,
    ...) are built this way.

    Attributes:
      budget: ``count -> int32[]`` the budget schedule.
      anchors: ``(key, query, budget, usable) -> bool[N]`` the anchor sampler.
      pool_size: the pool size ``N`` the schedule was built for (its budgets are
        fractions of it), so a solver of another pool size refuses it; ``None``
        when the policy does not depend on it.
    """

    budget: BudgetFn
    anchors: AnchorFn
    pool_size: int | None = None

    num_rounds = 1
    max_calls = None

    def init(self, key: PRNGKey) -> tuple[()]:
        """Nothing is carried from query to query."""
        del key
        return ()

    def budget_at(self, context: QueryContext) -> Array:
        """The schedule's budget at this query, clipped to ``[0, room]``."""
        budget = jnp.asarray(self.budget(context.count), jnp.int32)
        return jnp.clip(budget, 0, context.room)

    def begin(
        self, key: PRNGKey, carry: tuple[()], query: Query, context: QueryContext
    ) -> AnchorProgress:
        del carry
        usable = jnp.asarray(context.usable, bool)
        limit = self.budget_at(context)
        # The sampler's promise, enforced: never an unusable candidate.
        planned = jnp.asarray(self.anchors(key, query, limit, usable), bool) & usable
        nothing = jnp.zeros_like(planned)
        zero = jnp.zeros((), jnp.int32)
        return AnchorProgress(planned, nothing, zero, zero, limit)

    def select(self, carry: tuple[()], progress: AnchorProgress) -> Array:
        del carry
        return progress.planned & (progress.round == 0)

    def observe(
        self,
        carry: tuple[()],
        progress: AnchorProgress,
        requested: ArrayLike,
        observation: Observation,
    ) -> AnchorProgress:
        del carry
        requested = jnp.asarray(requested, bool)
        came_back = requested & jnp.asarray(observation.mask, bool)
        came_back = came_back & jnp.isfinite(jnp.asarray(observation.values))
        paid = jnp.sum(requested, dtype=jnp.int32)
        return progress._replace(
            answered=progress.answered | came_back,
            calls=progress.calls + paid,
            round=progress.round + (paid > 0).astype(jnp.int32),
        )

    def finish(
        self, carry: tuple[()], progress: AnchorProgress
    ) -> tuple[tuple[()], RoundsDecision]:
        return carry, RoundsDecision(
            anchors=progress.answered,
            scores=None,
            calls=progress.calls,
            rounds=progress.round,
            limit=progress.limit,
        )


__all__ = [
    "NOT_INSERTED",
    "AnchorFn",
    "AnchorPolicy",
    "AnchorProgress",
    "BudgetFn",
    "Decision",
    "Observation",
    "Policy",
    "Query",
    "QueryContext",
    "RoundsDecision",
    "SideInputs",
    "StepInfo",
    "Stream",
]
