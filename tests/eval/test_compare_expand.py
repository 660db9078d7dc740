"""``mixed_expand`` in the policy comparison: labels, counts, E = 0 / gated = Mixed."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from planted import config_for, planted_stream

import earm_jax as ej
from earm_jax.eval import report, stats
from earm_jax.eval.compare import POLICIES, evaluate_policies

# Slow: the seven policies with expansion, compiled per setting; ~1 min.
pytestmark = pytest.mark.slow

KS = (5, 10)


def _labelled_stream(seed=0):
    stream, truth = planted_stream(seed, num_queries=24, noise=0.05, insert_spread=True)
    relevant_memories = truth > 0.62
    candidates = np.asarray(stream.queries.candidates)
    valid = np.asarray(stream.queries.valid)
    inserted = np.asarray(stream.insert_time)[None, :] <= np.arange(24)[:, None]
    stream = stream._replace(
        relevant=jnp.asarray(
            valid & np.take_along_axis(relevant_memories, candidates, axis=1)
        ),
        num_relevant=jnp.asarray((relevant_memories & inserted).sum(1), jnp.int32),
        relevant_memories=jnp.asarray(relevant_memories),
    )
    config = config_for(stream)
    policy = ej.paper_policy(pool_size=config.pool_size, block_size=4)
    return stream, config, policy


@functools.lru_cache(maxsize=8)
def _evaluate(config, policy, expand, min_score):
    return jax.jit(
        lambda key, stream: evaluate_policies(
            key, stream, config, policy, KS, None, expand, min_score
        )
    )


def test_gated_out_expansion_reproduces_mixed_exactly():
    stream, config, policy = _labelled_stream()
    key = jax.random.key(0)
    plain, has_plain, _ = _evaluate(config, policy, 0, -np.inf)(key, stream)
    assert set(plain) == set(POLICIES)
    # Every slot gated out (completions are clipped to <= 1): Mixed, exactly.
    gated, has_gated, _ = _evaluate(config, policy, 4, 2.0)(key, stream)
    np.testing.assert_array_equal(has_plain, has_gated)
    for name in ("recall@5", "recall@10", "ndcg@10", "mrr", "calls"):
        np.testing.assert_array_equal(gated["mixed_expand"][name], plain["mixed"][name])
        np.testing.assert_array_equal(gated["mixed"][name], plain["mixed"][name])
    np.testing.assert_array_equal(gated["mixed_expand"]["expanded@10"], 0)
    np.testing.assert_array_equal(gated["mixed_expand"]["slots_filled"], 0)


def test_expansion_counts_are_consistent():
    stream, config, policy = _labelled_stream(1)
    slots = 6
    metrics, has_relevant, _ = _evaluate(config, policy, slots, -np.inf)(
        jax.random.key(1), stream
    )
    row = {k: np.asarray(v) for k, v in metrics["mixed_expand"].items()}
    for k in KS:
        assert np.all(row[f"expanded@{k}"] <= min(k, slots))
        assert np.all(row[f"expanded_relevant@{k}"] <= row[f"expanded@{k}"])
        assert np.all(row[f"expanded_relevant@{k}"] <= row["slots_relevant"])
    assert row["expanded@10"].sum() > 0
    assert np.all(row["slots_filled"] <= slots)
    assert np.all(row["slots_relevant"] <= row["missed_relevant"])
    # Every relevant memory found in the slots raises Recall@K only through them:
    # recall(mixed_expand) - recall(mixed) <= expanded_relevant / num_relevant.
    denominator = np.maximum(np.asarray(stream.num_relevant), 1)
    gain = row["recall@10"] - np.asarray(metrics["mixed"]["recall@10"])
    assert np.all(gain <= row["expanded_relevant@10"] / denominator + 1e-6)
    np.testing.assert_array_equal(row["calls"], metrics["mixed"]["calls"])

    summary = report.summarize(metrics, has_relevant, num_resamples=50)
    assert "mixed_expand-mixed" in summary["contrasts"]
    assert "expanded@10" not in summary["results"]["mixed_expand"]
    expansion = report.expansion_summary(metrics, has_relevant, num_resamples=50)
    assert expansion["queries"] == int(np.asarray(has_relevant).sum())
    for k in KS:
        entry = expansion[f"@{k}"]
        low, high = entry["expanded_per_query"]["ci"]
        assert low <= entry["expanded_per_query"]["mean"] <= high
        assert 0.0 <= entry["queries_with_expanded"]["mean"] <= 1.0
        if entry["expanded_total"]:
            assert 0.0 <= entry["precision"]["mean"] <= 1.0
    assert report.expansion_summary({"mixed": metrics["mixed"]}, has_relevant) is None


def test_expand_needs_labels_of_outside_memories():
    stream, config, policy = _labelled_stream()
    with pytest.raises(ValueError, match="relevant_memories"):
        evaluate_policies(
            jax.random.key(0),
            stream._replace(relevant_memories=None),
            config,
            policy,
            KS,
            None,
            3,
        )


def test_ratio_ci():
    numerator = np.array([1.0, 0.0, 2.0, 1.0])
    denominator = np.array([1.0, 1.0, 2.0, 4.0])
    ci = stats.ratio_ci(numerator, denominator, num_resamples=200, seed=0)
    assert ci.estimate == pytest.approx(0.5)
    assert ci.low <= 0.5 <= ci.high
