"""An independent float64 NumPy reference of the completion model.

Written from docs/method.md, not from the JAX code: observations are a plain list
of ``(query, memory, value)`` triples, every block update builds its own dense
design matrix and calls ``np.linalg.lstsq``-style ridge solves.
"""

from __future__ import annotations

import numpy as np


def predict(mean, memory_bias, memory_factors, query_bias, query_factors, q, m):
    return mean + memory_bias[m] + query_bias[q] + memory_factors[m] @ query_factors[q]


def loss(params, triples, seen_memories, past_queries, l2):
    mean, b, u, c, v = params
    total = 0.0
    for q, m, y in triples:
        total += (y - predict(mean, b, u, c, v, q, m)) ** 2
    seen = sorted(seen_memories)
    past = sorted(past_queries)
    total += l2 * (np.sum(b[seen] ** 2) + np.sum(u[seen] ** 2))
    total += l2 * (np.sum(c[past] ** 2) + np.sum(v[past] ** 2))
    return total


def ridge(design, target, l2):
    """argmin_w |design w - target|^2 + l2 |w|^2 via an augmented lstsq."""
    dim = design.shape[1]
    augmented = np.vstack([design, np.sqrt(l2) * np.eye(dim)])
    padded = np.concatenate([target, np.zeros(dim)])
    return np.linalg.lstsq(augmented, padded, rcond=None)[0]


def als_sweep(params, triples, l2):
    """Queries, then memories, then the mean: each an exact block minimisation."""
    mean, b, u, c, v = (np.array(p, dtype=np.float64) for p in params)
    rank = u.shape[1]
    queries = sorted({q for q, _, _ in triples})
    memories = sorted({m for _, m, _ in triples})
    for q in queries:
        rows = [(m, y) for qq, m, y in triples if qq == q]
        design = np.array([np.concatenate([[1.0], u[m]]) for m, _ in rows])
        target = np.array([y - mean - b[m] for m, y in rows])
        w = ridge(design.reshape(-1, rank + 1), target, l2)
        c[q], v[q] = w[0], w[1:]
    for m in memories:
        rows = [(q, y) for q, mm, y in triples if mm == m]
        design = np.array([np.concatenate([[1.0], v[q]]) for q, _ in rows])
        target = np.array([y - mean - c[q] for q, y in rows])
        w = ridge(design.reshape(-1, rank + 1), target, l2)
        b[m], u[m] = w[0], w[1:]
    residuals = [y - (b[m] + c[q] + u[m] @ v[q]) for q, m, y in triples]
    mean = float(np.mean(residuals))
    return mean, b, u, c, v


def fold_in(mean, memory_bias, memory_factors, anchors, l2):
    """(c_t, v_t) from the new query's anchors ``[(memory, value), ...]`` alone."""
    rank = memory_factors.shape[1]
    if not anchors:
        return 0.0, np.zeros(rank)
    design = np.array([np.concatenate([[1.0], memory_factors[m]]) for m, _ in anchors])
    target = np.array([y - mean - memory_bias[m] for m, y in anchors])
    w = ridge(design.reshape(-1, rank + 1), target, l2)
    return w[0], w[1:]
