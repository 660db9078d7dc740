"""Where paying for a few scores and completing the rest beats scoring the top
of the similarity order: one cell of the regime map from a run's JSON, and the
same question asked of a user's own scorer from its answers.

The map's runs are ``earm locomo --preset best --side-information
--budget-scale auto`` at one call cap each. A *point* names the scorer of a
run: ``model`` (a build's recorded answers as they are), ``oracle:W`` or
``similarity:W`` (those answers moved toward the evidence label or toward the
similarity order, ``--mix``), ``noise:S`` (the evidence stand-in at noise S)
or ``graded:G`` (the stand-in whose non-relevant answers follow similarity).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from earm_jax.eval.scorer_quality import auc, recall_at
from earm_jax.eval.stats import contrast_ci, mean_ci

CONTENDERS = (
    "semantic",
    "top_similarity",
    "mixed",
    "best",
    "best_side",
    "learned_calls",
)
"""The policies a cell's winner is chosen from: each pays at most the cap."""

MAP_POLICIES = (*CONTENDERS, "full")
COMPLETING = ("mixed", "best", "best_side", "learned_calls")
"""The policies that use what earlier queries paid for: the map's cell "pays"
when one of them beats Top-similarity with its CI above 0."""


def point_job_fields(point: str, scores: str = "") -> dict[str, Any]:
    """The :class:`~earm_jax.jobs.locomo.LocomoJob` fields of a map point.

    Raises:
      ValueError: an unknown point, or a recorded point without ``scores``.
    """
    kind, _, value = point.partition(":")
    if kind in ("model", "oracle", "similarity", "blend"):
        if not scores:
            raise ValueError(f"point {point!r} replays recorded answers: give scores")
        if kind == "blend":
            # The build's answers with the similarity blend at weight W: 0 is
            # the model alone, 1 (the ``model`` point) the scorer it evaluated.
            return {
                "scorer": "recorded",
                "scores": (scores,),
                "mix": "",
                "blend_weight": float(value),
            }
        mix = "" if kind == "model" else f"{kind}:{float(value):g}"
        return {"scorer": "recorded", "scores": (scores,), "mix": mix}
    if kind == "noise":
        return {"scorer": "evidence", "noises": (float(value),)}
    if kind == "graded":
        return {"scorer": "evidence", "noises": (0.1,), "graded": float(value)}
    raise ValueError(
        f"point must be model, blend:W, oracle:W, similarity:W, noise:S or "
        f"graded:G, got "
        f"{point!r}"
    )


def _recall(results: Mapping[str, Any], policy: str) -> float:
    return float(results[policy]["recall@10"]["mean"])


def _margin(contrasts: Mapping[str, Any], policy: str) -> dict[str, Any]:
    """``policy`` − Top-similarity, Recall@10, with its paired 95% CI."""
    if policy == "top_similarity":
        return {"mean": 0.0, "ci": [0.0, 0.0]}
    if policy == "semantic":
        c = contrasts["top_similarity-semantic"]["recall@10"]
        return {"mean": -c["mean"], "ci": [-c["ci"][1], -c["ci"][0]]}
    c = contrasts[f"{policy}-top_similarity"]["recall@10"]
    return {"mean": c["mean"], "ci": list(c["ci"])}


def map_cell(payload: Mapping[str, Any], cap: float) -> dict[str, Any]:
    """One cell of the map from an ``earm locomo --preset best
    --side-information`` result JSON at call cap ``cap``.

    The winner is the contender with the highest Recall@10; ``pays`` says
    whether a policy that completes the matrix beats Top-similarity with the
    CI above 0.
    """
    results, contrasts = payload["results"], payload["contrasts"]
    quality = payload.get("scorer_quality") or {}
    # A run without a policy (an older JSON) maps without it.
    shown = [policy for policy in MAP_POLICIES if policy in results]
    contenders = [policy for policy in CONTENDERS if policy in results]
    recall = {policy: _recall(results, policy) for policy in shown}
    margins = {policy: _margin(contrasts, policy) for policy in contenders}
    winner = max(contenders, key=lambda policy: recall[policy])
    return {
        "cap": cap,
        "recall@10": recall,
        "calls_per_query": {
            policy: float(results[policy]["calls_per_query"]) for policy in shown
        },
        "scorer": {
            "auc": quality.get("auc"),
            "auc_similarity": quality.get("auc_similarity"),
            "full_minus_semantic": recall["full"] - recall["semantic"],
            "full_minus_top_similarity": recall["full"] - recall["top_similarity"],
        },
        "winner": winner,
        "margins": margins,
        "pays": any(
            margins[policy]["ci"][0] > 0.0 for policy in COMPLETING if policy in margins
        ),
        "queries": payload.get("num_scored_queries"),
    }


def top_of_order(
    scores: np.ndarray, order: np.ndarray, valid: np.ndarray, calls: np.ndarray
) -> np.ndarray:
    """``float[T, N]`` ranking keys of paying for the top of an order: the
    ``calls[t]`` first candidates of ``order`` (descending, ties by position)
    ranked by their answers, then the rest in that order. ``order`` is any
    finite key: a cosine, or a free order's logit
    (:mod:`earm_jax.locomo.pool_order`)."""
    keyed = np.where(valid, order, -np.inf)
    rank = np.argsort(np.argsort(-keyed, axis=1, kind="stable"), axis=1)
    paid = valid & (rank < calls[:, None])
    # Answers lie in [0, 1]: paid candidates (2 to 3) sit above every unpaid
    # one (0 to 1, by its place in the order).
    unpaid = 1.0 - rank / max(order.shape[1], 1)
    return np.where(paid, 2.0 + scores, np.where(valid, unpaid, -np.inf))


def top_similarity_order(
    scores: np.ndarray, similarity: np.ndarray, valid: np.ndarray, calls: np.ndarray
) -> np.ndarray:
    """``float[T, N]`` ranking keys of Top-similarity: :func:`top_of_order` of
    the similarity order."""
    return top_of_order(scores, similarity, valid, calls)


def advise(
    scores: np.ndarray,
    similarity: np.ndarray,
    relevant: np.ndarray,
    valid: np.ndarray,
    call_budget: float,
    bounds: tuple[float, float],
    *,
    k: int = 10,
    num_relevant: np.ndarray | None = None,
    clusters: np.ndarray | None = None,
    num_resamples: int = 1000,
    free_order: np.ndarray | None = None,
) -> dict[str, Any]:
    """Whether completing the matrix can pay for this scorer at this cap.

    The room a completing policy can win is a number a user can measure on a
    small labelled sample without running EARM: how much scoring every
    candidate (Full) beats scoring only the cap's share at the top of the
    similarity order (Top-similarity). The map bounds it from both sides:
    below the smallest room where a policy that uses what earlier queries paid
    for ever paid, nothing will (``"top_similarity"``); above the largest room
    where none paid, one did everywhere (``"complete"``); where the two bounds
    overlap the map saw both, depending on how the scorer's errors are
    structured, and only replaying the answers through the policies tells
    (``"measure"``).

    Args:
      scores: ``float[T, N]`` the scorer's answers in [0, 1] (NaN: not scored;
        every valid candidate of a question should be scored).
      similarity: ``float[T, N]`` the retriever's cosines (the pool's order).
      relevant: ``bool[T, N]`` labels.
      valid: ``bool[T, N]`` real candidates.
      call_budget: the share of each pool a query may pay for, in (0, 1].
      bounds: the map's ``(smallest room that paid, largest room that did
        not)`` in Full − Top-similarity.
      k: the cut-off of Recall@k.
      num_relevant: ``int[T]`` Recall@k's denominator: relevant memories that
        exist, in the pool or not (``None``: the relevant candidates).
      clusters: ``[T]`` cluster of each question (e.g. its conversation) for
        the bootstrap; ``None``: questions are independent.
      num_resamples: bootstrap resamples.
      free_order: ``float[T, N]`` a second order of the same pools, known
        before any call (a build's free order of cosine + word coverage):
        the report then also pays for its top at the same calls and says
        whether going down it beats the similarity order (``free_order``).

    Returns:
      the verdict (``"complete"``, ``"top_similarity"`` or ``"measure"``) with
      the numbers behind it.

    Raises:
      ValueError: shapes differ, a budget outside (0, 1], or no question with
        a relevant candidate.
    """
    given = (scores, similarity, relevant, valid)
    if free_order is not None:
        given += (free_order,)
    shapes = {a.shape for a in given}
    if len(shapes) != 1 or len(next(iter(shapes))) != 2:
        raise ValueError(
            "scores, similarity, relevant, valid (and free_order) must share one "
            f"[T, N] shape, got {sorted(shapes)}"
        )
    if not 0.0 < call_budget <= 1.0:
        raise ValueError(f"call_budget must be in (0, 1], got {call_budget!r}")
    relevant = relevant & valid
    if num_relevant is None:
        num_relevant = relevant.sum(axis=1)
    scored = num_relevant > 0
    if not scored.any():
        raise ValueError("relevant: no question has a relevant candidate")
    pool = valid.sum(axis=1)
    calls = np.ceil(call_budget * pool - 1e-9).astype(int)
    answered = np.where(valid & np.isfinite(scores), scores, 0.0)
    full = recall_at(answered, relevant, valid, num_relevant, k)
    semantic = recall_at(similarity, relevant, valid, num_relevant, k)
    top = recall_at(
        top_similarity_order(answered, similarity, valid, calls),
        relevant,
        valid,
        num_relevant,
        k,
    )
    options = {"num_resamples": num_resamples, "seed": 0}
    if clusters is not None:
        options["clusters"] = np.asarray(clusters)[scored]
    room = contrast_ci(full[scored], top[scored], **options)
    smallest_paid, largest_unpaid = bounds
    if room.estimate < smallest_paid:
        verdict = "top_similarity"
    elif room.estimate > largest_unpaid:
        verdict = "complete"
    else:
        verdict = "measure"
    mask = valid & np.isfinite(scores)
    report = {
        "verdict": verdict,
        "map_bounds": {
            "smallest_room_that_paid": smallest_paid,
            "largest_room_that_did_not_pay": largest_unpaid,
        },
        "call_budget": call_budget,
        "calls_per_query": float(calls[scored].mean()),
        "questions": int(scored.sum()),
        "auc": auc(scores[mask], relevant[mask]),
        "auc_similarity": auc(similarity[valid], relevant[valid]),
        f"recall@{k}": {
            "full": float(np.nanmean(full[scored])),
            "top_similarity": float(np.nanmean(top[scored])),
            "semantic": float(np.nanmean(semantic[scored])),
        },
        "full_minus_top_similarity": {
            "mean": float(room.estimate),
            "ci": [float(room.low), float(room.high)],
        },
        "full_minus_semantic": float(
            mean_ci(full[scored] - semantic[scored], **options).estimate
        ),
    }
    if free_order is not None:
        report["free_order"] = _free_order_report(
            answered,
            free_order,
            relevant,
            valid,
            num_relevant,
            calls,
            k,
            top,
            full,
            scored,
            options,
        )
    return report


def _free_order_report(
    answered: np.ndarray,
    free_order: np.ndarray,
    relevant: np.ndarray,
    valid: np.ndarray,
    num_relevant: np.ndarray,
    calls: np.ndarray,
    k: int,
    top: np.ndarray,
    full: np.ndarray,
    scored: np.ndarray,
    options: dict[str, Any],
) -> dict[str, Any]:
    """Paying for the top of the free order against the top of the similarity
    order, at the same calls per question, paired by question."""
    free_order = np.where(valid, np.asarray(free_order, np.float64), -np.inf)
    top_free = recall_at(
        top_of_order(answered, free_order, valid, calls),
        relevant,
        valid,
        num_relevant,
        k,
    )
    alone = recall_at(free_order, relevant, valid, num_relevant, k)
    gain = contrast_ci(top_free[scored], top[scored], **options)
    room = contrast_ci(full[scored], top_free[scored], **options)
    if gain.low > 0.0:
        advice = "go_down_it"
    elif gain.high < 0.0:
        advice = "keep_similarity"
    else:
        advice = "no_difference"
    return {
        "advice": advice,
        f"recall@{k}": {
            "top_of_free_order": float(np.nanmean(top_free[scored])),
            "free_order": float(np.nanmean(alone[scored])),
        },
        "top_of_free_order_minus_top_similarity": {
            "mean": float(gain.estimate),
            "ci": [float(gain.low), float(gain.high)],
        },
        "full_minus_top_of_free_order": {
            "mean": float(room.estimate),
            "ci": [float(room.low), float(room.high)],
        },
    }


def boundary(cells: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The map's bounds on Full − Top-similarity: the smallest room where a
    completing policy paid (CI above 0) and the largest where none did
    (``math.nan`` where no cell of that kind exists). Where the first is below
    the second, the room alone does not decide."""
    paid, unpaid = [], []
    for by_cap in cells.values():
        for cell in by_cap.values():
            room = cell["scorer"]["full_minus_top_similarity"]
            (paid if cell["pays"] else unpaid).append(room)
    return {
        "smallest_room_that_paid": min(paid, default=math.nan),
        "largest_room_that_did_not_pay": max(unpaid, default=math.nan),
        "cells_that_paid": len(paid),
        "cells": len(paid) + len(unpaid),
    }


__all__ = [
    "CONTENDERS",
    "MAP_POLICIES",
    "advise",
    "boundary",
    "map_cell",
    "point_job_fields",
    "top_of_order",
    "top_similarity_order",
]
