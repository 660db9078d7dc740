"""LoCoMo conversations as query streams: semantic candidate pools and labels.

For each query (a category 1-4 question, in file order) the pool is the top
``pool_size`` inserted memories by cosine similarity of normalized embeddings,
in descending order (ties: lower row first). Pools shorter than ``pool_size``
are padded like :mod:`earm_jax.eval.simulate` pads them: ``valid = False``,
``candidates = 0``, ``similarity = -inf``, ``scores = 0``, ``relevant = False``.

A conversation becomes a :class:`LocomoStream`: the numpy arrays of an
:class:`earm_jax.base.Stream` (:class:`StreamArrays`) plus host-side text and
provenance (:class:`StreamMetadata`) for the LLM scorer and for reports.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import jax.numpy as jnp
import numpy as np

from earm_jax.base import Query, Stream
from earm_jax.locomo.data import Conversation, DataFault
from earm_jax.locomo.evidence import (
    DEFAULT_KNOBS,
    STAND_IN_NOTE,
    EvidenceNoise,
    evidence_scores,
    pool_percentiles,
    text_keys64,
)
from earm_jax.locomo.memories import (
    InsertionRule,
    MemorySet,
    Setting,
    build_memories,
    insertion_times,
)
from earm_jax.scoring.base import ScorerIdentity
from earm_jax.store.embeddings import IdentifiedEmbedder

POOL_SIZE = 200
"""``N``: candidates per query (docs/method.md)."""


@dataclasses.dataclass(frozen=True)
class StreamArrays:
    """Numpy twin of :class:`earm_jax.base.Stream` for one conversation.

    Attributes:
      candidates: ``int32[T, N]`` memory rows of each pool (0 at padding).
      similarity: ``float32[T, N]`` cosine similarity (``-inf`` at padding).
      valid: ``bool[T, N]`` False marks padding.
      scores: ``float32[T, N]`` the evidence stand-in's answers (0 at padding).
      relevant: ``bool[T, N]`` gold relevance of each candidate.
      insert_time: ``int32[M]`` first query index at which each memory exists.
      num_relevant: ``int32[T]`` relevant memories inserted by query ``t``,
        inside the pool or not: the recall denominator (0 = unlabelled query).
      category: ``int32[T]`` LoCoMo category id of each query.
      relevant_memories: ``bool[T, M]`` gold relevance of every memory row, in
        the pool or not (labels for search expansion); ``None`` if not built.
      memory_embeddings: ``float32[M, D]`` the memories' unit embeddings (side
        information); ``None`` if not kept.
      query_embeddings: ``float32[T, D]`` the questions' unit embeddings.
    """

    candidates: np.ndarray
    similarity: np.ndarray
    valid: np.ndarray
    scores: np.ndarray
    relevant: np.ndarray
    insert_time: np.ndarray
    num_relevant: np.ndarray
    category: np.ndarray
    relevant_memories: np.ndarray | None = None
    memory_embeddings: np.ndarray | None = None
    query_embeddings: np.ndarray | None = None

    def to_stream(self) -> Stream:
        """The :class:`earm_jax.base.Stream` of ``jnp`` arrays."""
        return Stream(
            queries=Query(
                candidates=jnp.asarray(self.candidates, dtype=jnp.int32),
                similarity=jnp.asarray(self.similarity, dtype=jnp.float32),
                valid=jnp.asarray(self.valid, dtype=bool),
            ),
            scores=jnp.asarray(self.scores, dtype=jnp.float32),
            relevant=jnp.asarray(self.relevant, dtype=bool),
            insert_time=jnp.asarray(self.insert_time, dtype=jnp.int32),
            num_relevant=jnp.asarray(self.num_relevant, dtype=jnp.int32),
            category=jnp.asarray(self.category, dtype=jnp.int32),
            relevant_memories=None
            if self.relevant_memories is None
            else jnp.asarray(self.relevant_memories, dtype=bool),
            memory_embeddings=None
            if self.memory_embeddings is None
            else jnp.asarray(self.memory_embeddings, dtype=jnp.float32),
            query_embeddings=None
            if self.query_embeddings is None
            else jnp.asarray(self.query_embeddings, dtype=jnp.float32),
        )


@dataclasses.dataclass(frozen=True)
class StreamMetadata:
    """Host-side facts about one stream: texts, ids, provenance.

    Attributes:
      memory_set: memories (text, dia ids, session, date), queries (text,
        answer, category, evidence) and relevant rows.
      pool_size: ``N``.
      insertion: the insertion rule used for ``insert_time``.
      embedding_model: the embedder's identity.
      scorer: identity of the scorer that produced ``scores``.
      scorer_note: the line a report must print about that scorer.
    """

    memory_set: MemorySet
    pool_size: int
    insertion: str
    embedding_model: str
    scorer: ScorerIdentity
    scorer_note: str = STAND_IN_NOTE

    @property
    def sample_id(self) -> str:
        return self.memory_set.sample_id

    @property
    def setting(self) -> str:
        return self.memory_set.setting

    @property
    def faults(self) -> tuple[DataFault, ...]:
        return self.memory_set.faults

    @property
    def query_texts(self) -> tuple[str, ...]:
        return tuple(question.question for question in self.memory_set.queries)

    @property
    def memory_texts(self) -> tuple[str, ...]:
        return tuple(memory.text for memory in self.memory_set.memories)

    @property
    def num_unlabelled(self) -> int:
        """Queries with no relevant memory: run, but left out of recall."""
        return len(self.memory_set.unlabelled)


@dataclasses.dataclass(frozen=True)
class LocomoStream:
    """One conversation in one memory setting: arrays plus host metadata."""

    meta: StreamMetadata
    arrays: StreamArrays

    def to_stream(self) -> Stream:
        """The :class:`earm_jax.base.Stream` of ``jnp`` arrays."""
        return self.arrays.to_stream()


def candidate_pools(
    query_vectors: np.ndarray,
    memory_vectors: np.ndarray,
    insert_time: np.ndarray,
    pool_size: int = POOL_SIZE,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Top-``pool_size`` inserted memories per query by cosine similarity.

    Args:
      query_vectors: ``float32[T, D]`` unit-norm query embeddings.
      memory_vectors: ``float32[M, D]`` unit-norm memory embeddings.
      insert_time: ``int32[M]``; memory ``m`` is a candidate for queries
        ``t >= insert_time[m]``.
      pool_size: ``N``.

    Returns:
      ``(candidates int32[T, N], similarity float32[T, N], valid bool[T, N])``
      in descending similarity, ties by lower row, padded as the module says.

    Raises:
      ValueError: mismatched shapes or ``pool_size < 1``.
    """
    query_vectors = np.asarray(query_vectors, dtype=np.float32)
    memory_vectors = np.asarray(memory_vectors, dtype=np.float32)
    insert_time = np.asarray(insert_time)
    if pool_size < 1:
        raise ValueError(f"pool_size must be >= 1, got {pool_size}")
    if query_vectors.ndim != 2 or memory_vectors.ndim != 2:
        raise ValueError(
            f"query_vectors and memory_vectors must be 2-D, got shapes "
            f"{query_vectors.shape} and {memory_vectors.shape}"
        )
    if query_vectors.shape[1] != memory_vectors.shape[1]:
        raise ValueError(
            f"embedding widths differ: queries {query_vectors.shape[1]}, "
            f"memories {memory_vectors.shape[1]}"
        )
    if insert_time.shape != (memory_vectors.shape[0],):
        raise ValueError(
            f"insert_time must have shape ({memory_vectors.shape[0]},), "
            f"got {insert_time.shape}"
        )
    num_queries = query_vectors.shape[0]
    similarity = query_vectors @ memory_vectors.T  # [T, M]
    inserted = insert_time[None, :] <= np.arange(num_queries)[:, None]
    masked = np.where(inserted, similarity, -np.inf)
    order = np.argsort(-masked, axis=1, kind="stable")[:, :pool_size]
    width = order.shape[1]
    pool_similarity = np.take_along_axis(masked, order, axis=1)
    valid = np.take_along_axis(inserted, order, axis=1)
    candidates = np.zeros((num_queries, pool_size), dtype=np.int32)
    pool = np.full((num_queries, pool_size), -np.inf, dtype=np.float32)
    pool_valid = np.zeros((num_queries, pool_size), dtype=bool)
    candidates[:, :width] = np.where(valid, order, 0)
    pool[:, :width] = np.where(valid, pool_similarity, -np.inf)
    pool_valid[:, :width] = valid
    return candidates, pool, pool_valid


def stream_arrays(
    memory_set: MemorySet,
    query_vectors: np.ndarray,
    memory_vectors: np.ndarray,
    *,
    pool_size: int = POOL_SIZE,
    insertion: InsertionRule = "all_at_start",
    knobs: EvidenceNoise = DEFAULT_KNOBS,
) -> StreamArrays:
    """The arrays of one conversation's stream, from precomputed embeddings.

    Args:
      memory_set: memories, queries and labels.
      query_vectors: ``float32[T, D]`` unit-norm, one per query.
      memory_vectors: ``float32[M, D]`` unit-norm, one per memory.
      pool_size: ``N``.
      insertion: the insertion rule (:data:`earm_jax.locomo.memories.InsertionRule`).
      knobs: the evidence stand-in scorer's knobs.
    """
    num_queries = len(memory_set.queries)
    num_memories = len(memory_set.memories)
    if query_vectors.shape[0] != num_queries:
        raise ValueError(
            f"query_vectors has {query_vectors.shape[0]} rows for {num_queries} queries"
        )
    if memory_vectors.shape[0] != num_memories:
        raise ValueError(
            f"memory_vectors has {memory_vectors.shape[0]} rows for "
            f"{num_memories} memories"
        )
    insert_time = insertion_times(memory_set, insertion)
    candidates, similarity, valid = candidate_pools(
        query_vectors, memory_vectors, insert_time, pool_size
    )
    truth = memory_set.relevance_matrix()  # [T, M]
    inserted = insert_time[None, :] <= np.arange(num_queries)[:, None]
    if num_memories:
        relevant = valid & np.take_along_axis(truth, candidates, axis=1)
    else:
        relevant = np.zeros_like(valid)
    query_keys = text_keys64(
        [question.question for question in memory_set.queries]
    ).reshape(-1, 1)
    memory_keys = text_keys64([memory.text for memory in memory_set.memories])
    pair_memory_keys = (
        memory_keys[candidates]
        if num_memories
        else np.zeros_like(candidates, np.uint64)
    )
    scores = evidence_scores(
        relevant,
        knobs,
        query_keys=query_keys,
        memory_keys=pair_memory_keys,
        percentile=pool_percentiles(valid),
    )
    scores = np.where(valid, scores, 0.0).astype(np.float32)
    return StreamArrays(
        candidates=candidates,
        similarity=similarity,
        valid=valid,
        scores=scores,
        relevant=relevant,
        insert_time=insert_time,
        num_relevant=(truth & inserted).sum(axis=1).astype(np.int32),
        category=np.array(
            [question.category for question in memory_set.queries], dtype=np.int32
        ),
        relevant_memories=np.asarray(truth, dtype=bool).reshape(
            num_queries, num_memories
        ),
        memory_embeddings=np.asarray(memory_vectors, np.float32),
        query_embeddings=np.asarray(query_vectors, np.float32),
    )


def build_streams(
    conversations: Sequence[Conversation],
    embedder: IdentifiedEmbedder,
    *,
    setting: Setting = "turns",
    pool_size: int = POOL_SIZE,
    insertion: InsertionRule = "all_at_start",
    knobs: EvidenceNoise = DEFAULT_KNOBS,
) -> list[LocomoStream]:
    """One :class:`LocomoStream` per conversation (all texts embedded in one call).

    Args:
      conversations: loaded conversations.
      embedder: e.g. :class:`earm_jax.store.embeddings.Embedder` (cached).
      setting: ``"turns"`` (primary) or ``"observations"``.
      pool_size: ``N``.
      insertion: when memories enter (default: all before the first query).
      knobs: the evidence stand-in scorer's knobs.
    """
    memory_sets = [
        build_memories(conversation, setting) for conversation in conversations
    ]
    texts: list[str] = []
    for memory_set in memory_sets:
        texts += [question.question for question in memory_set.queries]
        texts += [memory.text for memory in memory_set.memories]
    vectors = embedder.embed(texts)
    streams: list[LocomoStream] = []
    offset = 0
    for memory_set in memory_sets:
        num_queries, num_memories = len(memory_set.queries), len(memory_set.memories)
        query_vectors = vectors[offset : offset + num_queries]
        offset += num_queries
        memory_vectors = vectors[offset : offset + num_memories]
        offset += num_memories
        arrays = stream_arrays(
            memory_set,
            query_vectors,
            memory_vectors,
            pool_size=pool_size,
            insertion=insertion,
            knobs=knobs,
        )
        meta = StreamMetadata(
            memory_set=memory_set,
            pool_size=pool_size,
            insertion=insertion,
            embedding_model=embedder.identity,
            scorer=knobs.identity(),
        )
        streams.append(LocomoStream(meta=meta, arrays=arrays))
    return streams


def build_stream(
    conversation: Conversation,
    embedder: IdentifiedEmbedder,
    *,
    setting: Setting = "turns",
    pool_size: int = POOL_SIZE,
    insertion: InsertionRule = "all_at_start",
    knobs: EvidenceNoise = DEFAULT_KNOBS,
) -> LocomoStream:
    """:func:`build_streams` for one conversation."""
    return build_streams(
        [conversation],
        embedder,
        setting=setting,
        pool_size=pool_size,
        insertion=insertion,
        knobs=knobs,
    )[0]


__all__ = [
    "POOL_SIZE",
    "LocomoStream",
    "StreamArrays",
    "StreamMetadata",
    "build_stream",
    "build_streams",
    "candidate_pools",
    "stream_arrays",
]
