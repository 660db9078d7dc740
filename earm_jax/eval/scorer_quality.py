"""How good a relevance scorer is on labelled pools, by itself (host side, NumPy).

A scorer that separates evidence from the rest overall (pooled AUC) can still
rank badly inside a pool, where the candidates all look alike; and a scorer
whose answers are probabilities should be right about how often it is right.
So a scorer is reported by: pooled and within-query AUC, the Recall@K of
ranking the whole pool by its answers ("Full") against similarity order
("Semantic") and against the evidence oracle, a reliability table
(calibration), and each of these per category.

>>> import numpy as np
>>> relevant = np.array([[True, False, False], [False, True, False]])
>>> scores = np.array([[0.9, 0.2, 0.1], [0.3, 0.8, 0.4]])
>>> auc(scores[np.ones_like(relevant)], relevant[np.ones_like(relevant)])
1.0
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _average_ranks(values: np.ndarray) -> np.ndarray:
    """1-based ranks with ties sharing their average rank."""
    order = np.argsort(values, kind="stable")
    ordered = values[order]
    ranks = np.empty(values.size, np.float64)
    boundaries = np.flatnonzero(np.diff(ordered) != 0) + 1
    starts = np.concatenate([[0], boundaries])
    ends = np.concatenate([boundaries, [values.size]])
    for start, end in zip(starts, ends, strict=True):
        ranks[order[start:end]] = 0.5 * (start + 1 + end)
    return ranks


def auc(scores: np.ndarray, relevant: np.ndarray) -> float | None:
    """Area under the ROC curve (Mann-Whitney, ties count half); ``None`` when
    one class is absent."""
    scores = np.asarray(scores, np.float64).ravel()
    relevant = np.asarray(relevant, bool).ravel()
    positives = int(relevant.sum())
    negatives = relevant.size - positives
    if positives == 0 or negatives == 0:
        return None
    ranks = _average_ranks(scores)
    rank_sum = ranks[relevant].sum()
    return float((rank_sum - positives * (positives + 1) / 2) / (positives * negatives))


def recall_at(
    scores: np.ndarray,
    relevant: np.ndarray,
    valid: np.ndarray,
    num_relevant: np.ndarray,
    k: int,
) -> np.ndarray:
    """``float[T]`` Recall@k of each query's pool ordered by ``scores``
    (descending, ties by position; NaN last); NaN where ``num_relevant`` is 0."""
    keyed = np.where(valid & np.isfinite(scores), scores, -np.inf)
    order = np.argsort(-keyed, axis=1, kind="stable")[:, :k]
    hits = np.take_along_axis(relevant & valid, order, axis=1).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(num_relevant > 0, hits / np.maximum(num_relevant, 1), np.nan)


def reliability_table(
    scores: np.ndarray, relevant: np.ndarray, bins: int = 10
) -> dict[str, Any]:
    """Calibration: per equal-width score bin, the pairs, the mean score and
    the share that is relevant; plus the expected calibration error (ECE,
    the pair-weighted mean gap)."""
    scores = np.asarray(scores, np.float64).ravel()
    relevant = np.asarray(relevant, bool).ravel()
    edges = np.linspace(0.0, 1.0, bins + 1)
    index = np.clip(np.searchsorted(edges, scores, side="right") - 1, 0, bins - 1)
    rows, gap = [], 0.0
    for b in range(bins):
        inside = index == b
        count = int(inside.sum())
        row: dict[str, Any] = {"low": float(edges[b]), "high": float(edges[b + 1])}
        row["pairs"] = count
        if count:
            row["mean_score"] = float(scores[inside].mean())
            row["relevant_rate"] = float(relevant[inside].mean())
            gap += count * abs(row["mean_score"] - row["relevant_rate"])
        rows.append(row)
    return {"bins": rows, "ece": float(gap / max(scores.size, 1))}


def within_query_auc(
    scores: np.ndarray, relevant: np.ndarray, valid: np.ndarray
) -> float | None:
    """Mean over queries (with both classes in the pool) of the pool's AUC."""
    values = []
    for row_scores, row_relevant, row_valid in zip(
        scores, relevant, valid, strict=True
    ):
        value = auc(row_scores[row_valid], row_relevant[row_valid])
        if value is not None:
            values.append(value)
    return float(np.mean(values)) if values else None


def _summary(scores, similarity, relevant, valid, num_relevant, ks) -> dict[str, Any]:
    usable = valid & np.isfinite(scores)
    labelled = num_relevant > 0
    out: dict[str, Any] = {
        "queries": int(labelled.sum()),
        "pairs": int(usable.sum()),
        "failed_pairs": int((valid & ~np.isfinite(scores)).sum()),
        "auc": auc(scores[usable], relevant[usable]),
        "auc_similarity": auc(similarity[valid], relevant[valid]),
        "within_query_auc": within_query_auc(
            np.where(usable, scores, -np.inf), relevant, usable
        ),
        "within_query_auc_similarity": within_query_auc(similarity, relevant, valid),
    }
    oracle = relevant.astype(np.float64)
    for k in ks:
        full = recall_at(scores, relevant, valid, num_relevant, k)[labelled]
        semantic = recall_at(similarity, relevant, valid, num_relevant, k)[labelled]
        best = recall_at(oracle, relevant, valid, num_relevant, k)[labelled]
        row = {
            "full": float(np.mean(full)) if full.size else None,
            "semantic": float(np.mean(semantic)) if semantic.size else None,
            "oracle": float(np.mean(best)) if best.size else None,
        }
        if full.size:
            row["full_minus_semantic"] = row["full"] - row["semantic"]
            room = row["oracle"] - row["semantic"]
            row["share_of_oracle_gain"] = (
                (row["full"] - row["semantic"]) / room if room > 0 else None
            )
        out[f"recall@{k}"] = row
    return out


def scorer_quality(
    scores: np.ndarray,
    similarity: np.ndarray,
    relevant: np.ndarray,
    valid: np.ndarray,
    num_relevant: np.ndarray,
    category: np.ndarray | None = None,
    ks: tuple[int, ...] = (10,),
    bins: int = 10,
) -> dict[str, Any]:
    """The scorer's own quality on labelled pools.

    Args:
      scores: ``float[T, N]`` the scorer's answers in [0, 1] (NaN: failed).
      similarity: ``float[T, N]`` the retriever's similarity.
      relevant: ``bool[T, N]`` gold labels of the pool.
      valid: ``bool[T, N]`` real candidates (False at padding).
      num_relevant: ``int[T]`` relevant memories of each query, in the pool or
        not (the recall denominator; 0 = unlabelled).
      category: ``int[T]`` category ids, for the per-category rows.
      ks: recall cut-offs.
      bins: reliability-table bins.

    Returns:
      A JSON-ready dict: AUCs, ``recall@K`` (full / semantic / oracle), the
      reliability table, and ``by_category`` with the same summary per id.
    """
    scores = np.asarray(scores, np.float64)
    similarity = np.asarray(similarity, np.float64)
    relevant = np.asarray(relevant, bool)
    valid = np.asarray(valid, bool)
    num_relevant = np.asarray(num_relevant)
    out = _summary(scores, similarity, relevant, valid, num_relevant, ks)
    usable = valid & np.isfinite(scores)
    out["reliability"] = reliability_table(scores[usable], relevant[usable], bins)
    if category is not None:
        category = np.asarray(category)
        out["by_category"] = {
            str(int(c)): _summary(
                scores[category == c],
                similarity[category == c],
                relevant[category == c],
                valid[category == c],
                num_relevant[category == c],
                ks,
            )
            for c in np.unique(category)
        }
    return out


__all__ = [
    "auc",
    "recall_at",
    "reliability_table",
    "scorer_quality",
    "within_query_auc",
]
