"""Mixed reranking (docs/method.md): direct scores where observed, else completions;
the answer context in chronological order."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.core.model import mixed_scores as mixed_scores
from earm_jax.types import Array, ArrayLike


def top_k_context(
    scores: ArrayLike,
    memories: ArrayLike,
    insert_order: ArrayLike,
    k: int,
    where: ArrayLike | None = None,
) -> tuple[Array, Array]:
    """The top ``k`` memories by ``scores``, restored to chronological order.

    The answer context lists the selected memories in the order they happened
    (docs/method.md), not in score order.

    Args:
      scores: ``float32[N]`` ranking scores.
      memories: ``int32[N]`` memory ids of the candidates.
      insert_order: ``[N]`` a chronological key per candidate (e.g. insertion
        index or timestamp).
      k: context size (static).
      where: ``bool[N]`` eligible candidates (default: finite scores).

    Returns:
      ``(memory ids int32[k], mask bool[k])`` in chronological order; the mask is
      False for slots left empty when fewer than ``k`` are eligible.
    """
    scores = jnp.asarray(scores, jnp.float32)
    eligible = jnp.isfinite(scores) if where is None else jnp.asarray(where, bool)
    k = min(k, scores.shape[0])
    _, top = jax.lax.top_k(jnp.where(eligible, scores, -jnp.inf), k)
    chosen = eligible[top]
    chrono = jnp.where(chosen, jnp.asarray(insert_order)[top], jnp.iinfo(jnp.int32).max)
    order = jnp.argsort(chrono, stable=True)
    return jnp.asarray(memories)[top][order], chosen[order]


def anchors_first(answers: ArrayLike, anchors: ArrayLike, fallback: ArrayLike) -> Array:
    """Scores that put every anchor (by its answer) above every other candidate
    (by ``fallback``), per query: a lexicographic key as one float."""
    answers = jnp.asarray(answers, jnp.float32)
    fallback = jnp.asarray(fallback, jnp.float32)
    finite_fallback = jnp.where(jnp.isfinite(fallback), fallback, 0.0)
    top_fallback = jnp.max(finite_fallback, axis=-1, keepdims=True)
    low_answer = jnp.min(jnp.where(anchors, answers, jnp.inf), axis=-1, keepdims=True)
    low_answer = jnp.where(jnp.isfinite(low_answer), low_answer, 0.0)
    offset = top_fallback - low_answer + 1.0
    return jnp.where(anchors, answers + offset, fallback)


__all__ = ["anchors_first", "mixed_scores", "top_k_context"]
