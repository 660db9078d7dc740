r"""The order a policy goes down a pool: the retriever's similarity, or a free
order read from the two texts before any call.

The retriever's pool is the top ``N`` memories by cosine similarity; every
policy pays for candidates and ranks the unpaid ones by the pool's
``similarity`` field. Evidence that shares the question's rarer words but
not its sentence embedding sits deep in that order, where Top-similarity
never pays and a memory's earlier answers say little. The **free order**
re-sorts each pool by

.. math::

   f(q, m) = \beta \cos(e_q, e_m) + \delta \operatorname{cov}(q, m) + \gamma,

a :class:`~earm_jax.scoring.similarity_blend.SimilarityBlend` with no model
term (``logit_weight`` 0), fitted like the scorer's own blend on labelled
pools the scorer never trained on (``earm train-scorer`` writes it next to
the blend as ``free_order.json``; a recorded-answers file carries one per
fold). It costs no call: the cosine is the retriever's and the word coverage
(:mod:`earm_jax.scoring.word_coverage`) a function of the two texts.

Re-sorting happens here, at the edge, on a stream's NumPy arrays: the pool's
members stay the same (so do the calls a cap allows); ``similarity`` becomes
:math:`f` and the columns are permuted so the pool is in descending
:math:`f`. Every policy, the Semantic baseline and the side information then
go down the free order without a change to the solver.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from earm_jax.locomo.streams import LocomoStream
from earm_jax.scoring.similarity_blend import SimilarityBlend
from earm_jax.scoring.word_coverage import pool_word_coverage

POOL_ORDERS = ("similarity", "free")
"""``similarity``: the retriever's order; ``free``: cosine + word coverage."""


def free_order_key(stream: LocomoStream, order: SimilarityBlend) -> np.ndarray:
    """``float64[T, N]``: each candidate's free-order logit, ``-inf`` at
    padding.

    Args:
      stream: a conversation whose ``similarity`` is still the cosine.
      order: a blend of the texts alone (:attr:`SimilarityBlend.is_free`).

    Raises:
      ValueError: ``order`` weighs a model's answer.
    """
    if not order.is_free:
        raise ValueError(
            "free order: the blend weighs the model's answer (logit_weight "
            f"{order.logit_weight:g}); a free order reads the texts alone"
        )
    arrays = stream.arrays
    cosine = np.where(arrays.valid, arrays.similarity, 0.0)
    coverage = (
        pool_word_coverage(
            stream.meta.query_texts,
            stream.meta.memory_texts,
            arrays.candidates,
            arrays.valid,
        )
        if order.uses_coverage
        else None
    )
    key = order.combine_logits(np.zeros_like(cosine), cosine, coverage)
    return np.where(arrays.valid, key, -np.inf)


def reordered(stream: LocomoStream, key: np.ndarray) -> LocomoStream:
    """``stream`` with each pool sorted by ``key``, descending, and ``key`` as
    its ``similarity``.

    Every per-candidate array moves with its candidate; padding stays at the
    end of each row; ties keep the pool's current order. Per-query and
    per-memory arrays are unchanged.

    Raises:
      ValueError: ``key`` is not ``[T, N]``, or not finite on a valid
        candidate.
    """
    arrays = stream.arrays
    key = np.asarray(key, np.float64)
    if key.shape != arrays.valid.shape:
        raise ValueError(
            f"key must be shaped like the pools {arrays.valid.shape}, got {key.shape}"
        )
    if not np.all(np.isfinite(key[arrays.valid])):
        raise ValueError("key must be finite on every valid candidate")
    keyed = np.where(arrays.valid, key, -np.inf)
    # Valid first (by descending key, stable), then padding in place.
    order = np.lexsort((-keyed, ~arrays.valid), axis=1)

    def moved(values: np.ndarray) -> np.ndarray:
        return np.take_along_axis(values, order, axis=1)

    similarity = np.where(arrays.valid, key, -np.inf).astype(np.float32)
    return dataclasses.replace(
        stream,
        arrays=dataclasses.replace(
            arrays,
            candidates=moved(arrays.candidates),
            similarity=moved(similarity),
            valid=moved(arrays.valid),
            scores=moved(arrays.scores),
            relevant=moved(arrays.relevant),
        ),
    )


def in_free_order(stream: LocomoStream, order: SimilarityBlend) -> LocomoStream:
    """``stream`` with each pool re-sorted by the free order ``order``."""
    return reordered(stream, free_order_key(stream, order))


__all__ = ["POOL_ORDERS", "free_order_key", "in_free_order", "reordered"]
