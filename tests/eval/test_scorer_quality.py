"""A scorer's own quality: AUC, Recall@K of Full, calibration, per category."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from earm_jax.eval.scorer_quality import (
    auc,
    recall_at,
    reliability_table,
    scorer_quality,
    within_query_auc,
)


def _pairwise_auc(scores, labels):
    positives = [s for s, y in zip(scores, labels, strict=True) if y]
    negatives = [s for s, y in zip(scores, labels, strict=True) if not y]
    wins = sum(
        1.0 if p > n else 0.5 if p == n else 0.0
        for p, n in itertools.product(positives, negatives)
    )
    return wins / (len(positives) * len(negatives))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 6).map(lambda x: x / 6), st.booleans()),
        min_size=2,
        max_size=40,
    )
)
def test_auc_equals_the_pairwise_definition(pairs):
    scores = np.array([s for s, _ in pairs])
    labels = np.array([y for _, y in pairs])
    value = auc(scores, labels)
    if labels.all() or not labels.any():
        assert value is None
    else:
        assert value == pytest.approx(_pairwise_auc(scores, labels))


def test_recall_orders_by_score_and_skips_unlabelled():
    scores = np.array([[0.1, 0.9, 0.5, np.nan], [0.3, 0.2, 0.1, 0.0]])
    relevant = np.array([[True, False, True, False], [False, False, False, False]])
    valid = np.array([[True, True, True, True], [True, True, True, False]])
    recall = recall_at(scores, relevant, valid, np.array([3, 0]), k=2)
    assert recall[0] == pytest.approx(1 / 3)  # top 2: rows 1, 2; one of 3 relevant
    assert np.isnan(recall[1])


def test_reliability_of_a_calibrated_scorer_is_near_zero():
    rng = np.random.default_rng(0)
    scores = rng.random(50_000)
    labels = rng.random(scores.size) < scores
    table = reliability_table(scores, labels)
    assert table["ece"] < 0.01
    assert sum(row["pairs"] for row in table["bins"]) == scores.size
    over = reliability_table(np.minimum(scores * 2, 1.0), labels)
    assert over["ece"] > 0.1


def test_quality_summary_and_categories():
    rng = np.random.default_rng(1)
    relevant = np.zeros((6, 20), bool)
    relevant[np.arange(6), rng.integers(0, 20, 6)] = True
    similarity = -np.arange(20.0)[None, :].repeat(6, 0)
    perfect = relevant.astype(float)
    valid = np.ones_like(relevant)
    result = scorer_quality(
        perfect,
        similarity,
        relevant,
        valid,
        relevant.sum(1),
        np.array([1, 1, 2, 2, 3, 4]),
        ks=(1,),
    )
    assert result["auc"] == 1.0
    assert result["recall@1"]["full"] == 1.0 == result["recall@1"]["oracle"]
    assert result["within_query_auc"] == 1.0
    assert set(result["by_category"]) == {"1", "2", "3", "4"}
    assert result["by_category"]["1"]["queries"] == 2
    assert within_query_auc(perfect, relevant, valid) == 1.0
