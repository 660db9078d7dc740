"""The data types every part of earm_jax speaks: queries, observations, streams.

All are NamedTuples of arrays (pytrees) with fixed shapes; masks mark padding so
that no shape ever depends on data.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol

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
    """

    scores: Float[Array, " N"]
    completed: Float[Array, " N"]
    anchors: Bool[Array, " N"]
    budget: Int[Array, ""]
    dropped: Int[Array, ""]


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


class Policy(NamedTuple):
    """How many direct scores to pay for, and which candidates get them.

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


__all__ = [
    "NOT_INSERTED",
    "AnchorFn",
    "BudgetFn",
    "Observation",
    "Policy",
    "Query",
    "StepInfo",
    "Stream",
]
