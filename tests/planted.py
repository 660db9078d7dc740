"""Small planted streams for the solver tests (NumPy, deterministic by seed)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

import earm_jax as ej


def planted_stream(
    seed: int,
    num_memories: int = 60,
    num_queries: int = 30,
    pool_size: int = 20,
    rank: int = 2,
    noise: float = 0.0,
    insert_spread: bool = False,
) -> tuple[ej.Stream, np.ndarray]:
    """A stream whose scores are a noiseless (or noisy) planted rank-``rank`` matrix.

    Returns the stream and the full truth matrix ``[T, M]``.
    """
    rng = np.random.default_rng(seed)
    memory_factors = rng.normal(size=(num_memories, rank)) / np.sqrt(max(rank, 1))
    query_factors = rng.normal(size=(num_queries, rank))
    memory_bias = 0.05 * rng.normal(size=num_memories)
    query_bias = 0.05 * rng.normal(size=num_queries)
    truth = (
        0.5
        + memory_bias[None, :]
        + query_bias[:, None]
        + 0.15 * query_factors @ memory_factors.T
    )
    if insert_spread:
        insert_time = rng.integers(0, num_queries // 2, size=num_memories)
        insert_time[:pool_size] = 0
    else:
        insert_time = np.zeros(num_memories, np.int64)
    candidates = np.zeros((num_queries, pool_size), np.int32)
    valid = np.ones((num_queries, pool_size), bool)
    for t in range(num_queries):
        present = np.flatnonzero(insert_time <= t)
        chosen = rng.choice(present, size=min(pool_size, len(present)), replace=False)
        candidates[t, : len(chosen)] = chosen
        valid[t, len(chosen) :] = False
    scores = np.take_along_axis(truth, candidates, axis=1)
    scores = scores + noise * rng.normal(size=scores.shape)
    similarity = scores + 0.2 * rng.normal(size=scores.shape)
    stream = ej.Stream(
        queries=ej.Query(
            jnp.asarray(candidates, jnp.int32),
            jnp.asarray(similarity, jnp.float32),
            jnp.asarray(valid),
        ),
        scores=jnp.asarray(scores, jnp.float32),
        relevant=jnp.asarray(scores > 0.6),
        insert_time=jnp.asarray(insert_time, jnp.int32),
    )
    return stream, truth


def config_for(stream: ej.Stream, **overrides) -> ej.SolverConfig:
    num_queries, pool_size = stream.scores.shape
    settings = dict(
        num_memories=int(stream.insert_time.shape[0]),
        capacity=num_queries,
        pool_size=pool_size,
        max_budget=pool_size,
        rank=2,
        # The setting these tests were written against (full refits, 5 sweeps),
        # kept explicit so that a change of the library's default solver does
        # not change what they check.
        solver="als",
        num_sweeps=5,
    )
    settings.update(overrides)
    return ej.SolverConfig(**settings)


def perturb_future(stream: ej.Stream, t: int, seed: int) -> ej.Stream:
    """Replaces scores, candidates and similarities of queries > t with others."""
    rng = np.random.default_rng(seed)
    num_queries, pool = stream.scores.shape
    num_memories = stream.insert_time.shape[0]
    future = np.arange(num_queries) > t
    candidates = np.asarray(stream.queries.candidates).copy()
    for row in np.flatnonzero(future):
        candidates[row] = rng.choice(num_memories, pool, replace=False)
    scores = np.where(
        future[:, None], rng.uniform(size=(num_queries, pool)), stream.scores
    )
    similarity = np.where(
        future[:, None], rng.normal(size=(num_queries, pool)), stream.queries.similarity
    )
    return stream._replace(
        queries=ej.Query(
            jnp.asarray(candidates, jnp.int32),
            jnp.asarray(similarity, jnp.float32),
            stream.queries.valid,
        ),
        scores=jnp.asarray(scores, jnp.float32),
    )


def stack_streams(streams: list[ej.Stream]) -> ej.Stream:
    """Streams of one shape stacked on a leading ``S`` axis (for ``run_batch``)."""
    return jax.tree.map(lambda *leaves: np.stack(leaves), *streams)
