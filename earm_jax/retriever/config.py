"""The retriever's settings and answers: :class:`RetrieverConfig` (which EARM,
which shapes, which runtime options), :class:`Memory` and :class:`Retrieved`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from earm_jax.base import AnchorPolicy
from earm_jax.policies import top_similarity_policy
from earm_jax.policies.adaptive.embedding_calls import EMBEDDING_ORDERS
from earm_jax.policies.budget import constant_budget
from earm_jax.scoring.base import ScorerIdentity
from earm_jax.scoring.similarity_blend import SimilarityBlend
from earm_jax.settings import PRESETS, EarmSettings

MemoryId = int | str

# Fields that define the experience (stored, must match on reopen) vs. runtime
# options a caller may change on every open.
RUNTIME_FIELDS = (
    "top_k",
    "snapshot_every",
    "scorer_timeout",
    "lock_timeout",
    "synchronous",
    "precompile",
    "query_retention",
)

QUERY_RETENTIONS = ("keep", "hash-only", "none")

NO_SCORER = ScorerIdentity(kind="none", model="similarity order")
"""The scorer identity a folder opened with ``scorer=None`` records: its
queries were ranked by similarity alone, so no scorer's experience is in it."""


def similarity_score(similarity: np.ndarray) -> np.ndarray:
    """A cosine similarity shown as a score in [0, 1]: ``(1 + cos) / 2``
    (clipped, for a caller-given similarity outside [-1, 1]).

    >>> similarity_score(np.array([-1.0, 0.0, 0.5, 3.0])).tolist()
    [0.0, 0.5, 0.75, 1.0]
    """
    return np.clip((1.0 + np.asarray(similarity, np.float64)) / 2.0, 0.0, 1.0)


RETRIEVER_PRESETS = ("best", "learned_calls", "top_similarity", "paper")

ROUND_PRESETS = ("best", "learned_calls")
"""Presets whose queries pay in rounds, with a carry from query to query."""


@dataclasses.dataclass(frozen=True)
class RetrieverConfig(EarmSettings):
    """Settings of an online retriever: the shared
    :class:`~earm_jax.settings.EarmSettings` (which EARM: rank, l2, solver,
    stratum, schedule) plus the retriever's own.

    Experience settings (stored in the journal; reopening with different ones
    raises): every :class:`~earm_jax.settings.EarmSettings` field, ``pool_size``,
    ``initial_memories``, ``initial_queries``, ``seed``, ``free_order``.

    The order a query goes down its pool (``free_order``): ``None`` (the
    default), the retriever's cosine similarity; else a
    :class:`~earm_jax.scoring.similarity_blend.SimilarityBlend` of the texts
    alone (``logit_weight`` 0) that re-sorts every pool, before any call, by
    ``similarity_weight * cos + coverage_weight * word coverage + shift``
    (:mod:`earm_jax.retriever.pool_order`). ``earm train-scorer`` fits one
    next to each model (``free_order.json``; read it with
    :func:`~earm_jax.scoring.scorer_manifest.free_order_from` of the model
    folder or the build); with a strong scorer on LoCoMo
    turns every preset then pays for the evidence that shares the question's
    words but not its sentence embedding (docs/when-earm-pays.md). Its
    ``embedding_model`` must be the embedder's ``identity``: the weights were
    fitted on that model's cosine.

    Presets (``preset``; a folder keeps the one it was created with):
      ``"best"`` (the default for new folders): the adaptive multi-round
        policy under a hard cap of ``call_budget`` times the pool per query
        on average (:mod:`earm_jax.policies.adaptive`); by default each query
        spends its allowance, 40% down the similarity order and the rest where
        a Bayesian regression of every answer paid so far on the question's
        and the memory's embeddings points (``call_order="embedding"``,
        ``stop_rule="spend"``). It keeps each query's embedding in the
        query's record, to rebuild the regression on reopen, so
        ``query_retention="none"`` is refused with it
        (``call_order="similarity"`` keeps no embedding);
      ``"learned_calls"``: Top-similarity's calls (``ceil(call_budget *
        pool_size)`` per query) in two rounds: the 40% most similar, then
        where a regression of every answer paid so far on the question's and
        the memory's embeddings points (:mod:`earm_jax.policies.learned_calls`);
        paid candidates rank by their answer, the rest by similarity
        (docs/trained-scorer.md). It keeps each query's
        embedding in the query's record, to rebuild the regression on reopen,
        so ``query_retention="none"`` is refused with it;
      ``"top_similarity"``: scores the ``ceil(call_budget * pool_size)`` most
        similar candidates of every query (the equal-calls baseline to compare
        ``best`` against on one's own traffic);
      ``"paper"``: the paper's stage schedule and stratified anchors (a new
        agent scores the whole pool for its first ``block_size`` queries).

    Runtime options (free to change on each open):
      top_k: default ``k``.
      snapshot_every: queries between solver-state snapshots (replay on open is
        at most this many queries).
      scorer_timeout: seconds one scorer request may take before its pairs
        count as failed (``None``: wait forever).
      lock_timeout: ``0`` fails at once when another process holds the folder,
        ``> 0`` waits that long, ``None`` waits forever.
      synchronous: SQLite durability, ``"FULL"`` (survives power loss) or
        ``"NORMAL"`` (survives a process crash).
      precompile: compile the next (doubled) buffer shapes in a background
        thread before they are needed, so growth does not stall one query.
      query_retention: what the folder keeps of a query's text.
        ``"hash-only"`` (the default): no text; its paid scores are keyed by
        an unkeyed 16-byte SHA-256 prefix of the text (so a repeated query
        is never paid twice, across reopens too); that prefix confirms a
        guessed query to whoever reads the folder. ``"keep"``: also the text,
        in the query's record (for audits), and its embedding in an
        embedding cache that has one. ``"none"``: no text and no digest of
        it on disk; a repeated query is not paid twice while the folder is
        open (its scores are kept in memory), but is paid again after a
        reopen. Queries recorded while ``"keep"`` was set lose their text
        when the folder is next opened with another setting.
    """

    # Constant cost per query however long the agent lives (see
    # earm_jax/core/solvers/incremental.py); "als" refits the whole history.
    solver: str = "incremental"
    # Beats the paper's policy at equal calls and never scores a whole pool.
    preset: str = "best"
    pool_size: int = 200
    top_k: int = 10
    initial_memories: int = 1024
    initial_queries: int = 1024
    seed: int = 0
    snapshot_every: int = 100
    scorer_timeout: float | None = 120.0
    lock_timeout: float | None = 0.0
    synchronous: str = "FULL"
    precompile: bool = True
    query_retention: str = "hash-only"
    free_order: SimilarityBlend | None = None

    def __post_init__(self) -> None:
        if self.preset not in RETRIEVER_PRESETS:
            raise ValueError(
                f"RetrieverConfig.preset must be one of {RETRIEVER_PRESETS}, got "
                f"{self.preset!r}"
            )
        if self.preset in PRESETS:
            super().__post_init__()
        else:
            # The shared settings know the presets every entry point has; the
            # retriever's own is checked as the paper's (same fields).
            preset = self.preset
            object.__setattr__(self, "preset", "paper")
            try:
                super().__post_init__()
            finally:
                object.__setattr__(self, "preset", preset)
        for name in (
            "pool_size",
            "top_k",
            "initial_memories",
            "initial_queries",
            "snapshot_every",
        ):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(
                    f"RetrieverConfig.{name} must be a positive int, got {value!r}"
                )
        if not is_int(self.seed) or self.seed < 0:
            raise ValueError(
                f"RetrieverConfig.seed must be an int >= 0, got {self.seed!r}"
            )
        ratios = tuple(self.stage_ratios)
        if not ratios or not all(0 <= r <= 1 for r in ratios):
            raise ValueError(
                f"RetrieverConfig.stage_ratios must be fractions in [0, 1], got "
                f"{self.stage_ratios!r}"
            )
        object.__setattr__(self, "stage_ratios", tuple(float(r) for r in ratios))
        for name in ("scorer_timeout", "lock_timeout"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not value >= 0
            ):
                raise ValueError(
                    f"RetrieverConfig.{name} must be None or a number >= 0, got "
                    f"{value!r}"
                )
        if self.query_retention not in QUERY_RETENTIONS:
            raise ValueError(
                f"RetrieverConfig.query_retention must be one of {QUERY_RETENTIONS}, "
                f"got {self.query_retention!r}"
            )
        if self.reads_embeddings and self.query_retention == "none":
            raise ValueError(
                "RetrieverConfig.query_retention='none' keeps nothing of a query, "
                f"but preset={self.preset!r} with call_order={self.call_order!r} "
                "rebuilds its regression from each query's embedding on reopen: "
                "use query_retention='hash-only' or 'keep', or "
                "call_order='similarity'"
            )
        object.__setattr__(self, "free_order", checked_free_order(self.free_order))
        if self.synchronous not in ("FULL", "NORMAL"):
            raise ValueError(
                f"RetrieverConfig.synchronous must be 'FULL' or 'NORMAL', got "
                f"{self.synchronous!r}"
            )

    @property
    def reads_embeddings(self) -> bool:
        """Whether the preset's calls follow a regression on the texts'
        embeddings (``learned_calls``; ``best`` with an embedding call order),
        which every query's embedding feeds and a reopen rebuilds."""
        return self.preset == "learned_calls" or (
            self.preset == "best" and self.call_order in EMBEDDING_ORDERS
        )

    def policy(self, pool_size: int, budget_scale=None) -> AnchorPolicy:
        """The anchor policy of ``paper`` and ``top_similarity`` (``best`` and
        ``learned_calls`` pick their anchors in rounds:
        :meth:`earm_jax.retriever.experience.Experience.rounds`; the solver
        stores what they paid)."""
        if self.preset not in ("top_similarity", "learned_calls"):
            return super().policy(pool_size, budget_scale)
        calls = min(pool_size, math.ceil(self.call_budget * pool_size))
        return top_similarity_policy(pool_size, budget=constant_budget(calls))

    @property
    def pool_order(self) -> str:
        """``"free"`` when :attr:`free_order` re-sorts the pools, else
        ``"similarity"``."""
        return "similarity" if self.free_order is None else "free"

    def experience(self) -> dict[str, Any]:
        """The stored settings (what a reopen must agree with)."""
        settings = dataclasses.asdict(self)
        for name in RUNTIME_FIELDS:
            settings.pop(name)
        settings["stage_ratios"] = list(settings["stage_ratios"])
        settings["free_order"] = (
            None if self.free_order is None else self.free_order.to_json()
        )
        return settings


def checked_free_order(value: Any) -> SimilarityBlend | None:
    """``RetrieverConfig.free_order`` checked: a free blend, its stored JSON
    (read back), or ``None``.

    >>> checked_free_order(None) is None
    True
    >>> checked_free_order(SimilarityBlend(1.0, 2.0, 0.0, "m"))
    Traceback (most recent call last):
    ...
    ValueError: RetrieverConfig.free_order must be a blend of the texts alone \
(logit_weight 0), got logit_weight 1: a free order is known before any call
    """
    if value is None:
        return None
    if isinstance(value, Mapping):
        try:
            value = SimilarityBlend.from_json(dict(value))
        except (TypeError, ValueError) as error:
            raise ValueError(f"RetrieverConfig.free_order: {error}") from error
    if not isinstance(value, SimilarityBlend):
        raise ValueError(
            "RetrieverConfig.free_order must be a SimilarityBlend (e.g. "
            "load_blend(model_folder, FREE_ORDER_FILE)) or None, got "
            f"{type(value).__name__}"
        )
    if not value.is_free:
        raise ValueError(
            "RetrieverConfig.free_order must be a blend of the texts alone "
            f"(logit_weight 0), got logit_weight {value.logit_weight:g}: a free "
            "order is known before any call"
        )
    return value


def runtime_of(config: RetrieverConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in RUNTIME_FIELDS}


def runtime_options(runtime: Any) -> dict[str, Any]:
    """``runtime`` (a mapping of runtime options, or ``None``) checked: only
    :data:`RUNTIME_FIELDS` (their values are checked with the config).

    >>> runtime_options({"query_retention": "none"})
    {'query_retention': 'none'}
    >>> runtime_options({"rank": 4})
    Traceback (most recent call last):
    ...
    ValueError: runtime takes the runtime options (top_k, snapshot_every, \
scorer_timeout, lock_timeout, synchronous, precompile, query_retention), not \
rank: pass a config for the others
    """
    if runtime is None:
        return {}
    if not isinstance(runtime, Mapping):
        raise ValueError(
            f"runtime must be a mapping of runtime options, got "
            f"{type(runtime).__name__}"
        )
    unknown = sorted(str(name) for name in runtime if name not in RUNTIME_FIELDS)
    if unknown:
        raise ValueError(
            f"runtime takes the runtime options ({', '.join(RUNTIME_FIELDS)}), "
            f"not {', '.join(unknown)}: pass a config for the others"
        )
    return dict(runtime)


def is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class Memory:
    """One live memory: its id, text and metadata."""

    id: MemoryId
    text: str
    metadata: dict


@dataclasses.dataclass(frozen=True)
class Retrieved:
    """One query's answer.

    Attributes:
      memory_ids: the top-``k`` memory ids, in chronological order.
      texts: their texts.
      metadata: their metadata.
      scores: their scores in [0, 1]: the scorer's direct answer where
        anchored at this query, else the completion's estimate of it (the
        solver's mixed score). The order is the policy's: ``best`` ranks every
        paid answer above the unpaid candidates, so a score need not fall
        along ``ranked_ids``. Without a scorer (similarity mode) it is the
        query's cosine similarity with the memory mapped to [0, 1],
        ``(1 + cos) / 2`` (:func:`similarity_score`), and the order is that
        similarity's; under a free order (``RetrieverConfig.free_order``),
        the order's fitted probability that the memory is evidence, in that
        order.
      anchored: whether each was scored directly at this query.
      calls: pairs sent to the scorer for this query (unpaid before).
      cache_hits: anchors answered from scores paid earlier.
      failures: ``(memory id, reason)`` for anchors the scorer failed on; they
        count as not observed, never as a made-up score.
      budget: the policy's direct-scoring budget for this query.
      query_index: this query's index in the retriever's life.
      ranked_ids: the same memories best first (ties: earlier in the pool's
        order first).
      rounds: scorer requests this query made (``preset="best"``: 0 to 4
        rounds of growing size, each one batched request; else 1).
    """

    memory_ids: list[MemoryId]
    texts: list[str]
    metadata: list[dict]
    scores: list[float]
    anchored: list[bool]
    calls: int
    cache_hits: int
    failures: list[tuple[MemoryId, str]]
    budget: int
    query_index: int
    ranked_ids: list[MemoryId]
    rounds: int = 1

    def by_score(self) -> list[MemoryId]:
        """The ids best first (instead of chronological)."""
        return list(self.ranked_ids)


@dataclasses.dataclass(frozen=True)
class Usage:
    """What a retriever has paid over its life (from its journal).

    Attributes:
      memories: live memories now.
      queries: queries answered.
      calls: pairs sent to the scorer.
      cache_hits: anchors answered from scores paid earlier.
      full_pool_calls: pairs a reranker that scores every candidate of every
        query's pool would have sent.
    """

    memories: int
    queries: int
    calls: int
    cache_hits: int
    full_pool_calls: int


__all__ = [
    "NO_SCORER",
    "Memory",
    "MemoryId",
    "Retrieved",
    "RetrieverConfig",
    "Usage",
    "similarity_score",
]
