"""Random unit embeddings for memories and queries, and each query's pool:
what the tests of the policies that read the texts start from (NumPy,
deterministic by the generator handed in)."""

from __future__ import annotations

import numpy as np


def random_text_pools(
    rng: np.random.Generator,
    num_memories: int,
    num_queries: int,
    pool: int,
    dim: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(memories [M, D], queries [T, D], candidates [T, N], similarity
    [T, N])``: unit embeddings, ``pool`` distinct memories per query, and
    their cosine with the query (pools in draw order)."""
    memories = rng.normal(size=(num_memories, dim))
    memories /= np.linalg.norm(memories, axis=1, keepdims=True)
    queries = rng.normal(size=(num_queries, dim))
    queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    candidates = np.stack(
        [rng.choice(num_memories, pool, replace=False) for _ in range(num_queries)]
    )
    similarity = np.einsum("td,tnd->tn", queries, memories[candidates])
    return memories, queries, candidates, similarity
