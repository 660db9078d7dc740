"""Whether a cheaper scorer ranks the pools as the reference does (host side,
NumPy).

A faster backend, a lower precision or a smaller model may replace the
reference scorer only if the project's results cannot tell them apart, and the
project's results are top-10 lists. So two scorers are compared on the same
labelled pools by what a query returns: how many of the reference's top 10
each question keeps, and Recall@10 of Full (the pool ranked by the score the
project uses, the folder's similarity blend where it has one). The rule:
at least :data:`MIN_OVERLAP` of each top 10 on average, and Recall@10 within
:data:`RECALL_TOLERANCE` of the reference's.

>>> import numpy as np
>>> pools = [{"relevant": np.array([True, False, False]), "num_relevant": 1}]
>>> found = agreement(pools, [np.array([0.9, 0.5, 0.1])], [np.array([0.8, 0.6, 0.2])])
>>> found["top10_overlap"], found["recall@10_full"]
(3.0, 1.0)
"""

from __future__ import annotations

from typing import Any

import numpy as np

TOP = 10
"""The cut-off a query returns, and the one agreement is judged at."""
MIN_OVERLAP = 9.5
"""The mean share of the reference's top 10 a replacement must keep."""
RECALL_TOLERANCE = 0.002
"""How far a replacement's Recall@10 of Full may be from the reference's."""


def labelled_pools(stream: Any, questions: int) -> list[dict[str, Any]]:
    """The pools of a LoCoMo stream's first ``questions`` labelled questions:
    query, memory texts, similarity, evidence labels and the recall
    denominator of each."""
    arrays, meta = stream.arrays, stream.meta
    out: list[dict[str, Any]] = []
    for t, query in enumerate(meta.query_texts):
        if len(out) == questions:
            break
        if arrays.num_relevant[t] == 0:
            continue
        positions = np.flatnonzero(arrays.valid[t])
        rows = arrays.candidates[t, positions]
        out.append(
            {
                "query": query,
                "memories": [meta.memory_texts[m] for m in rows],
                "similarity": arrays.similarity[t, positions].astype(np.float64),
                "relevant": arrays.relevant[t, positions].astype(bool),
                "num_relevant": int(arrays.num_relevant[t]),
            }
        )
    return out


def ranked_probability(
    logits: np.ndarray, pool: dict[str, Any], blend: Any
) -> np.ndarray:
    """The probability the project ranks a pool by: the sigmoid of the model's
    logits, combined with the pool's similarity by ``blend`` where the folder
    has one (:class:`~earm_jax.scoring.similarity_blend.SimilarityBlend`)."""
    probabilities = 1.0 / (1.0 + np.exp(-np.asarray(logits, np.float64)))
    if blend is None:
        return probabilities
    return np.asarray(
        blend.combine_texts(
            probabilities, pool["similarity"], pool["query"], pool["memories"]
        )
    )


def top(scores: np.ndarray, k: int = TOP) -> set[int]:
    """The positions of the ``k`` highest scores (NaN last, ties by position)."""
    order = np.argsort(-np.nan_to_num(scores, nan=-np.inf), kind="stable")
    return set(order[:k].tolist())


def recall_of_top(pools: list[dict[str, Any]], scores: list[np.ndarray]) -> np.ndarray:
    """``float[Q]``: each pool's Recall@10 of Full, ranked by ``scores``."""
    return np.array(
        [
            pool["relevant"][sorted(top(s))].sum() / pool["num_relevant"]
            for s, pool in zip(scores, pools, strict=True)
        ],
        np.float64,
    )


def overlaps(reference: list[np.ndarray], scores: list[np.ndarray]) -> np.ndarray:
    """``int[Q]``: how many of the reference's top 10 each pool keeps."""
    return np.array(
        [len(top(s) & top(r)) for s, r in zip(scores, reference, strict=True)]
    )


def keeps_the_ranking(mean_overlap: float, recall_difference: float) -> bool:
    """The rule: :data:`MIN_OVERLAP` of each top 10 kept on average and
    Recall@10 of Full within :data:`RECALL_TOLERANCE`."""
    return bool(
        mean_overlap >= MIN_OVERLAP and abs(recall_difference) <= RECALL_TOLERANCE
    )


def agreement(
    pools: list[dict[str, Any]],
    reference: list[np.ndarray],
    scores: list[np.ndarray],
) -> dict[str, Any]:
    """How far ``scores`` are from ``reference`` on the same pools: the
    largest |difference|, the mean and least top-10 overlap, and Recall@10 of
    Full of ``scores``."""
    deltas = [
        float(np.max(np.abs(s - r))) for s, r in zip(scores, reference, strict=True)
    ]
    kept = overlaps(reference, scores)
    return {
        "max_abs_delta": max(deltas),
        "top10_overlap": float(kept.mean()),
        "top10_overlap_min": int(kept.min()),
        "recall@10_full": float(recall_of_top(pools, scores).mean()),
        "questions": len(pools),
    }


__all__ = [
    "MIN_OVERLAP",
    "RECALL_TOLERANCE",
    "TOP",
    "agreement",
    "keeps_the_ranking",
    "labelled_pools",
    "overlaps",
    "ranked_probability",
    "recall_of_top",
    "top",
]
