"""The graded evidence stand-in: on-topic non-evidence scores G x percentile^2."""

from __future__ import annotations

import numpy as np
import pytest

from earm_jax.locomo.evidence import (
    EvidenceNoise,
    EvidenceScorer,
    evidence_scores,
    mapping_oracle,
    pool_percentiles,
)


def test_graded_mean_rises_with_similarity_percentile():
    valid = np.ones((400, 50), bool)
    relevant = np.zeros_like(valid)
    relevant[:, 7] = True
    percentile = pool_percentiles(valid)
    knobs = EvidenceNoise(noise=0.1, graded=0.5, seed=3)
    scores = evidence_scores(relevant, knobs, percentile=percentile)
    mean = scores.mean(axis=0)
    # Non-relevant: about 0.5 at the top of the pool, about 0 at its bottom.
    assert abs(mean[0] - 0.5) < 0.02 and mean[-1] < 0.05
    assert abs(mean[25] - 0.5 * percentile[0, 25] ** 2) < 0.02
    assert mean[7] > 0.9  # relevant stays near 1
    # Same pairs, same noise draw: graded only shifts the expectation.
    plain = evidence_scores(relevant, EvidenceNoise(noise=0.1, seed=3))
    inside = (plain > 0) & (plain < 1) & ~relevant & (scores < 1) & (scores > 0)
    np.testing.assert_allclose(
        (scores - plain)[inside], (0.5 * percentile**2)[inside], atol=1e-6
    )


def test_graded_needs_the_pool_and_validates():
    with pytest.raises(ValueError, match="percentile"):
        evidence_scores(np.array([True]), EvidenceNoise(graded=0.5))
    with pytest.raises(ValueError, match="graded"):
        EvidenceNoise(graded=1.5)
    scorer = EvidenceScorer(mapping_oracle({"q": ["m"]}), EvidenceNoise(graded=0.5))
    with pytest.raises(ValueError, match="graded"):
        scorer.score("q", ["m"])
    assert "graded" in dict(EvidenceNoise(graded=0.5).identity().settings)
    assert "graded" not in dict(EvidenceNoise().identity().settings)


def test_pool_percentiles_with_padding():
    valid = np.array([[True, True, False], [True, False, False]])
    np.testing.assert_allclose(pool_percentiles(valid), [[1, 0, 0], [1, 0, 0]])
