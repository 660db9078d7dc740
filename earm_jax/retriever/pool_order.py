r"""The order a retriever's query goes down its pool: the cosine similarity, or
a free order read from the two texts before any call.

With ``RetrieverConfig.free_order`` set, every pool (drawn by
:meth:`~earm_jax.retriever.online.OnlineRetriever.query`, or given to
:meth:`~earm_jax.retriever.online.OnlineRetriever.rerank`) is re-sorted by

.. math::

   f(q, m) = \beta \cos(e_q, e_m) + \delta \operatorname{cov}(q, m) + \gamma,

the cosine of this retriever's embedder and the word coverage of
:mod:`earm_jax.scoring.word_coverage`, and ``similarity`` becomes :math:`f`.
The pool's members stay the same (so do the calls a budget allows); every
preset then pays down :math:`f`'s order and ranks its unpaid candidates by it.
A caller's own ``score`` in :meth:`rerank` does not enter :math:`f`: the
weights were fitted on this embedder's cosine, and another retriever's score
is on another scale.

The journal records each query's pool as it went down it, so a reopen
replays the order every query was given without reading a text again.
:math:`f` is the logit of a logistic regression fitted on labelled pools, so
where no scorer is called (similarity mode) a memory is shown
:math:`\sigma(f)`, the fitted probability that it is evidence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from earm_jax.base import Query
from earm_jax.retriever.memory_rows import pool_of
from earm_jax.scoring.similarity_blend import SimilarityBlend
from earm_jax.scoring.word_coverage import word_coverage


def in_free_order(
    pool: Query,
    order: SimilarityBlend,
    query_text: str,
    memory_texts: Sequence[str],
    cosines: np.ndarray,
) -> Query:
    """``pool`` re-sorted by the free order ``order``, its ``similarity`` the
    order's logit.

    Args:
      pool: a pool of :func:`~earm_jax.retriever.memory_rows.pool_of` (its
        valid candidates first).
      order: a blend of the texts alone (``RetrieverConfig.free_order``).
      query_text: the query.
      memory_texts: every memory row's text (indexed by ``pool.candidates``).
      cosines: ``float32[V]`` the cosine of the query with each of the ``V``
        valid candidates, in the pool's order.

    Ties keep the pool's order.
    """
    valid = np.asarray(pool.valid, bool)
    count = int(valid.sum())
    rows = np.asarray(pool.candidates)[:count]
    cosines = np.asarray(cosines, np.float32)
    coverage = (
        word_coverage(query_text, [memory_texts[r] for r in rows])
        if order.uses_coverage
        else None
    )
    key = order.combine_logits(np.zeros(count), cosines, coverage)
    ranked = np.lexsort((np.arange(count), -key))
    return pool_of(rows[ranked], key[ranked].astype(np.float32), valid.size)


def check_free_order_encoder(order: SimilarityBlend | None, embedder: Any) -> None:
    """Refuses a free order fitted on another sentence encoder's cosine than
    ``embedder``'s (its weights would mean something else).

    Raises:
      ValueError: ``embedder.identity`` is not ``order.embedding_model``.
    """
    if order is None:
        return
    identity = getattr(embedder, "identity", None)
    if identity != order.embedding_model:
        named = "names none" if identity is None else f"is {identity!r}"
        raise ValueError(
            f"the free order (RetrieverConfig.free_order) was fitted on the "
            f"cosine of {order.embedding_model!r}; this embedder's identity "
            f"{named}: pass that sentence encoder"
        )


def shown_free_order(key: np.ndarray) -> np.ndarray:
    """:math:`\\sigma(f)`: a free-order logit shown as a score in [0, 1].

    >>> shown_free_order(np.array([0.0, 40.0])).tolist()
    [0.5, 1.0]
    """
    # tanh's form of the logistic: no overflow at a large negative logit.
    return 0.5 * (1.0 + np.tanh(np.asarray(key, np.float64) / 2.0))


__all__ = ["check_free_order_encoder", "in_free_order", "shown_free_order"]
