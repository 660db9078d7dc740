"""The measures that decide whether a cheaper scorer may replace the reference."""

from __future__ import annotations

import types

import numpy as np
import pytest

from earm_jax.eval.ranking_agreement import (
    MIN_OVERLAP,
    RECALL_TOLERANCE,
    agreement,
    keeps_the_ranking,
    labelled_pools,
    overlaps,
    ranked_probability,
    recall_of_top,
    top,
)


def _pool(relevant: list[int], size: int = 30) -> dict:
    labels = np.zeros(size, bool)
    labels[relevant] = True
    return {"relevant": labels, "num_relevant": len(relevant)}


def test_top_puts_nan_last_and_breaks_ties_by_position():
    scores = np.array([0.5, np.nan, 0.5, 0.9, 0.1])
    assert top(scores, 2) == {3, 0}
    assert top(scores, 4) == {3, 0, 2, 4}
    assert 1 in top(scores, 5)


def test_agreement_against_a_worked_example():
    rng = np.random.default_rng(0)
    reference = [rng.random(30), rng.random(30)]
    # The second scorer swaps the reference's 10th and 11th best of pool 0 and
    # keeps pool 1 exactly.
    swapped = reference[0].copy()
    order = np.argsort(-reference[0])
    swapped[order[9]], swapped[order[10]] = (
        reference[0][order[10]],
        reference[0][order[9]],
    )
    scores = [swapped, reference[1].copy()]
    pools = [
        _pool([int(order[9]), int(order[20])]),
        _pool([int(np.argmax(reference[1]))]),
    ]
    found = agreement(pools, reference, scores)
    assert found["top10_overlap"] == pytest.approx(9.5)
    assert found["top10_overlap_min"] == 9
    # Pool 0 lost its one relevant memory in the top 10 (0 of 2), pool 1 kept
    # its only one (1 of 1).
    assert found["recall@10_full"] == pytest.approx(0.5)
    assert recall_of_top(pools, reference).tolist() == [0.5, 1.0]
    assert found["max_abs_delta"] == pytest.approx(
        abs(reference[0][order[9]] - reference[0][order[10]])
    )
    assert overlaps(reference, scores).tolist() == [9, 10]
    assert found["questions"] == 2


def test_the_rule_needs_both_the_overlap_and_the_recall():
    assert keeps_the_ranking(MIN_OVERLAP, RECALL_TOLERANCE)
    assert keeps_the_ranking(10.0, -RECALL_TOLERANCE)
    assert not keeps_the_ranking(MIN_OVERLAP - 0.01, 0.0)
    assert not keeps_the_ranking(10.0, RECALL_TOLERANCE + 1e-4)


def test_ranked_probability_is_the_sigmoid_or_the_blend():
    logits = np.array([-2.0, 0.0, 3.0])
    pool = {
        "similarity": np.array([0.1, 0.5, 0.9]),
        "query": "Where did Caroline hike?",
        "memories": ["Caroline hiked a trail.", "A lake.", "Where?"],
    }
    np.testing.assert_allclose(
        ranked_probability(logits, pool, None), 1 / (1 + np.exp(-logits))
    )
    from earm_jax.scoring.similarity_blend import SimilarityBlend
    from earm_jax.scoring.word_coverage import word_coverage

    plain = SimilarityBlend(0.5, 4.0, -1.0, "m")
    z = 0.5 * logits + 4.0 * pool["similarity"] - 1.0
    np.testing.assert_allclose(
        ranked_probability(logits, pool, plain), 1 / (1 + np.exp(-z)), rtol=1e-9
    )
    # A blend that weighs word coverage reads it from the pool's texts.
    covered = SimilarityBlend(0.5, 4.0, -1.0, "m", coverage_weight=3.0)
    z = z + 3.0 * word_coverage(pool["query"], pool["memories"])
    np.testing.assert_allclose(
        ranked_probability(logits, pool, covered), 1 / (1 + np.exp(-z)), rtol=1e-9
    )


def test_labelled_pools_skip_unlabelled_questions_and_padding():
    arrays = types.SimpleNamespace(
        num_relevant=np.array([1, 0, 2, 1]),
        valid=np.array([[1, 1, 0], [1, 1, 1], [1, 1, 1], [1, 0, 0]], bool),
        candidates=np.array([[4, 2, 0], [1, 2, 3], [0, 3, 4], [2, 0, 0]]),
        similarity=np.array(
            [[0.9, 0.8, 0], [0.7, 0.6, 0.5], [0.9, 0.5, 0.1], [1, 0, 0]]
        ),
        relevant=np.array([[0, 1, 0], [0, 0, 0], [1, 0, 1], [1, 0, 0]], bool),
    )
    meta = types.SimpleNamespace(
        query_texts=["q0", "q1", "q2", "q3"],
        memory_texts=["m0", "m1", "m2", "m3", "m4"],
    )
    pools = labelled_pools(types.SimpleNamespace(arrays=arrays, meta=meta), 2)
    assert [p["query"] for p in pools] == ["q0", "q2"]
    assert pools[0]["memories"] == ["m4", "m2"]
    assert pools[0]["relevant"].tolist() == [False, True]
    assert pools[1]["num_relevant"] == 2
    assert pools[1]["similarity"].dtype == np.float64
    assert len(labelled_pools(types.SimpleNamespace(arrays=arrays, meta=meta), 9)) == 3
