"""The seven policies on LoCoMo conversations, batched (host side + one jit).

Conversations differ in length and memory count; they are padded to a common
shape and run as one vmapped batch. Padding is safe by causality: padded
queries come after every real one (nothing of an earlier query depends on a
later one) and padded memory rows are never inserted. The paper's schedule
restarts per conversation, as each conversation is its own stream.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.base import NOT_INSERTED, Query, Stream
from earm_jax.core.config import SolverConfig
from earm_jax.core.side_information import SideInformation, side_information
from earm_jax.eval.compare import compare_policies, evaluate_policies
from earm_jax.locomo.streams import LocomoStream, StreamArrays
from earm_jax.scoring.base import Scorer
from earm_jax.settings import EarmSettings


@dataclasses.dataclass(frozen=True)
class LocomoRunSettings(EarmSettings):
    """Solver and policy settings of one LoCoMo run (recorded in the JSON):
    :class:`~earm_jax.settings.EarmSettings`, the cut-offs ``ks``, ``expand``
    (the search-expansion slots of policy ``mixed_expand``, 0: off) and
    ``expand_min_score`` (the completion an outside memory needs for a slot;
    0 admits any, the scores being clipped into [0, 1]); ``side_information``
    adds the policies ``mixed_side`` and ``best_side``, completed from the
    texts' embeddings (:mod:`earm_jax.policies.side_information`),
    ``mixed_fused`` (:mod:`earm_jax.policies.fused_mixed`) and
    ``learned_calls``."""

    ks: tuple[int, ...] = (10, 20)
    expand: int = 0
    expand_min_score: float = 0.0
    side_information: bool = False

    def side_model(self) -> SideInformation | None:
        """The side-information model, or ``None`` when it is off."""
        return side_information() if self.side_information else None

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.expand, int) or self.expand < 0:
            raise ValueError(
                f"{type(self).__name__}.expand must be an int >= 0, got {self.expand!r}"
            )


@dataclasses.dataclass(frozen=True)
class PerQuery:
    """Per-query results of every policy, real queries only, conversations in order.

    Attributes:
      metrics: ``{policy: {metric: float[Q]}}`` incl. ``calls``.
      has_relevant: ``bool[Q]`` queries that count for the ranking metrics.
      conversation: ``[Q]`` sample id of each query.
      category: ``int32[Q]`` LoCoMo category id.
      stage: ``int32[Q]`` budget stage (0 = full scoring, 4 = 35 of 200).
      query_index: ``int32[Q]`` index within its conversation.
    """

    metrics: dict[str, dict[str, np.ndarray]]
    has_relevant: np.ndarray
    conversation: np.ndarray
    category: np.ndarray
    stage: np.ndarray
    query_index: np.ndarray


def pad_and_stack(arrays: Sequence[StreamArrays]) -> tuple[Stream, np.ndarray]:
    """Pads conversations to a common (T, M) and stacks them on a stream axis.

    Returns:
      ``(streams with leading axis S, real bool[S, T_max])``.
    """
    if not arrays:
        raise ValueError("no conversation to evaluate")
    pool = arrays[0].candidates.shape[1]
    num_queries = max(a.candidates.shape[0] for a in arrays)
    num_memories = max(max(a.insert_time.shape[0] for a in arrays), 1)

    def pad(array, length, value, axis=0):
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - array.shape[axis])
        return np.pad(array, widths, constant_values=value)

    stacked: dict[str, list[np.ndarray]] = {
        name: []
        for name in (
            "candidates",
            "similarity",
            "valid",
            "scores",
            "relevant",
            "insert_time",
            "num_relevant",
            "category",
        )
    }
    real = np.zeros((len(arrays), num_queries), bool)
    for row, a in enumerate(arrays):
        if a.candidates.shape[1] != pool:
            raise ValueError("all conversations must share one pool size")
        real[row, : a.candidates.shape[0]] = True
        stacked["candidates"].append(pad(a.candidates, num_queries, 0))
        stacked["similarity"].append(pad(a.similarity, num_queries, -np.inf))
        stacked["valid"].append(pad(a.valid, num_queries, False))
        stacked["scores"].append(pad(a.scores, num_queries, 0.0))
        stacked["relevant"].append(pad(a.relevant, num_queries, False))
        stacked["insert_time"].append(pad(a.insert_time, num_memories, NOT_INSERTED))
        stacked["num_relevant"].append(pad(a.num_relevant, num_queries, 0))
        stacked["category"].append(pad(a.category, num_queries, 0))
    data = {name: np.stack(values) for name, values in stacked.items()}
    memory_embeddings = query_embeddings = None
    if all(a.memory_embeddings is not None for a in arrays):
        width = arrays[0].memory_embeddings.shape[1]
        memory_embeddings = np.zeros((len(arrays), num_memories, width), np.float32)
        query_embeddings = np.zeros((len(arrays), num_queries, width), np.float32)
        for row, a in enumerate(arrays):
            memory_embeddings[row, : a.memory_embeddings.shape[0]] = a.memory_embeddings
            query_embeddings[row, : a.query_embeddings.shape[0]] = a.query_embeddings
    relevant_memories = None
    if all(a.relevant_memories is not None for a in arrays):
        relevant_memories = np.zeros((len(arrays), num_queries, num_memories), bool)
        for row, a in enumerate(arrays):
            rows, width = a.relevant_memories.shape
            relevant_memories[row, :rows, :width] = a.relevant_memories
    streams = Stream(
        queries=Query(
            jnp.asarray(data["candidates"], jnp.int32),
            jnp.asarray(data["similarity"], jnp.float32),
            jnp.asarray(data["valid"]),
        ),
        scores=jnp.asarray(data["scores"], jnp.float32),
        relevant=jnp.asarray(data["relevant"]),
        insert_time=jnp.asarray(data["insert_time"], jnp.int32),
        num_relevant=jnp.asarray(data["num_relevant"], jnp.int32),
        category=jnp.asarray(data["category"], jnp.int32),
        relevant_memories=None
        if relevant_memories is None
        else jnp.asarray(relevant_memories),
        memory_embeddings=None
        if memory_embeddings is None
        else jnp.asarray(memory_embeddings),
        query_embeddings=None
        if query_embeddings is None
        else jnp.asarray(query_embeddings),
    )
    return streams, real


def _policy(config: SolverConfig, run: LocomoRunSettings):
    return run.policy(config.pool_size)


@functools.lru_cache(maxsize=16)
def _batched_job(config: SolverConfig, run: LocomoRunSettings) -> Callable:
    policy = _policy(config, run)

    def job(keys, streams):
        adaptive = run.adaptive_config(config.pool_size)
        return jax.vmap(
            lambda k, s: evaluate_policies(
                k,
                s,
                config,
                policy,
                run.ks,
                adaptive,
                run.expand,
                run.expand_min_score,
                run.side_model(),
            )
        )(keys, streams)

    return jax.jit(job)


@functools.lru_cache(maxsize=16)
def _contexts_job(config: SolverConfig, run: LocomoRunSettings, k: int) -> Callable:
    policy = _policy(config, run)

    def contexts(key, stream):
        adaptive = run.adaptive_config(config.pool_size)
        rankings = compare_policies(
            key,
            stream,
            config,
            policy,
            adaptive,
            run.expand,
            run.expand_min_score,
            run.side_model(),
        )
        out = {}
        for name, ranking in rankings.items():
            scores = jnp.where(ranking.eligible, ranking.scores, -jnp.inf)
            top_scores, top = jax.lax.top_k(scores, k)
            rows = (
                stream.queries.candidates
                if ranking.memories is None
                else ranking.memories
            )
            memory = jnp.take_along_axis(rows, top, axis=-1)
            out[name] = jnp.where(jnp.isfinite(top_scores), memory, -1)
        return out

    return jax.jit(jax.vmap(contexts))


def _config_for(batch: Stream, run: LocomoRunSettings) -> SolverConfig:
    _, num_queries, pool = batch.scores.shape
    return run.solver_config(int(batch.insert_time.shape[1]), num_queries, pool)


def _stream_keys(seed: int, num_streams: int) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(
        jnp.arange(num_streams)
    )


def policy_contexts(
    streams: Sequence[LocomoStream], run: LocomoRunSettings, seed: int, k: int
) -> dict[str, np.ndarray]:
    """Each policy's top-``k`` memory rows per real query, in chronological order.

    Memory rows of a LoCoMo conversation are in conversation order, so sorting
    the rows restores the order things happened (docs/method.md). The same key as
    :func:`evaluate_streams` gives the same anchors.

    Returns:
      ``{policy: int32[Q, k]}`` with ``-1`` for empty slots.
    """
    batch, real = pad_and_stack([s.arrays for s in streams])
    config = _config_for(batch, run)
    keys = _stream_keys(seed, batch.scores.shape[0])
    tops = jax.tree.map(np.asarray, _contexts_job(config, run, k)(keys, batch))
    out = {}
    for name, top in tops.items():
        rows = top[real]
        ordered = np.sort(np.where(rows < 0, np.iinfo(np.int32).max, rows), axis=-1)
        out[name] = np.where(ordered == np.iinfo(np.int32).max, -1, ordered)
    return out


def evaluate_streams(
    streams: Sequence[LocomoStream], run: LocomoRunSettings, seed: int
) -> PerQuery:
    """Runs all seven policies on every conversation (one compiled batch).

    Args:
      streams: one :class:`LocomoStream` per conversation (same setting).
      run: solver/policy settings.
      seed: anchor-sampling seed (conversation ``i`` uses ``fold_in(seed, i)``).
    """
    batch, real = pad_and_stack([s.arrays for s in streams])
    num_streams, num_queries, _ = batch.scores.shape
    config = _config_for(batch, run)
    keys = _stream_keys(seed, num_streams)
    metrics, has_relevant, _ = jax.tree.map(
        np.asarray, _batched_job(config, run)(keys, batch)
    )
    flat_metrics = {
        policy: {name: values[real] for name, values in row.items()}
        for policy, row in metrics.items()
    }
    query_index = np.broadcast_to(np.arange(num_queries), real.shape)
    stage = np.minimum(query_index // run.block_size, len(run.stage_ratios) - 1)
    ids = np.array([s.meta.sample_id for s in streams], dtype=object)
    return PerQuery(
        metrics=flat_metrics,
        has_relevant=has_relevant[real],
        conversation=np.broadcast_to(ids[:, None], real.shape)[real],
        category=np.asarray(batch.category)[real],
        stage=stage[real],
        query_index=query_index[real],
    )


def average_over_seeds(runs: Sequence[PerQuery]) -> PerQuery:
    """Per-query metrics averaged over seeds (same queries in the same order)."""
    first = runs[0]
    metrics = {
        policy: {
            name: np.mean([run.metrics[policy][name] for run in runs], axis=0)
            for name in row
        }
        for policy, row in first.metrics.items()
    }
    return dataclasses.replace(first, metrics=metrics)


SCORING_CHUNK = 16
"""Questions per scorer batch when scoring whole conversations (a length-sorted
batch of 16 x 200 pairs keeps the cross-encoder's batches full)."""


def scorer_scores(
    stream: LocomoStream, scorer: Scorer, on_query: Callable[[int], Any] | None = None
) -> tuple[np.ndarray, dict[str, int]]:
    """Scores every (query, pool candidate) pair of a conversation with ``scorer``.

    Failed pairs become NaN (never a made-up score): the solver treats them as
    not observed, and the Full ranking puts them last.

    Returns:
      ``(float32[T, N] scores, failure counts by reason)``.
    """
    arrays = stream.arrays
    memories = stream.meta.memory_texts
    queries = stream.meta.query_texts
    scores = np.full(arrays.scores.shape, np.nan, np.float32)
    failures: dict[str, int] = {}
    requests = []
    for t, query in enumerate(queries):
        positions = np.flatnonzero(arrays.valid[t])
        requests.append(
            (
                t,
                positions,
                (query, [memories[m] for m in arrays.candidates[t, positions]]),
            )
        )
    # In chunks of questions: a caching scorer stores each chunk as it is
    # answered, so a stopped hour-long scoring run resumes where it stopped.
    for start in range(0, len(requests), SCORING_CHUNK):
        chunk = requests[start : start + SCORING_CHUNK]
        answers = scorer.score_many([request for _, _, request in chunk])
        for (t, positions, _), row in zip(chunk, answers, strict=True):
            for position, answer in zip(positions, row, strict=True):
                if answer.ok:
                    scores[t, position] = answer.value
                else:
                    failures[answer.reason] = failures.get(answer.reason, 0) + 1
            if on_query is not None:
                on_query(t)
    return scores, failures


def with_scores(stream: LocomoStream, scores: np.ndarray) -> LocomoStream:
    """The same conversation with another scorer's answers."""
    return dataclasses.replace(
        stream, arrays=dataclasses.replace(stream.arrays, scores=scores)
    )


__all__ = [
    "LocomoRunSettings",
    "PerQuery",
    "average_over_seeds",
    "evaluate_streams",
    "pad_and_stack",
    "policy_contexts",
    "scorer_scores",
    "with_scores",
]
