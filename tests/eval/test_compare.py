"""The seven policies on the same streams: calls, eligibility, shared anchors."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from planted import config_for, planted_stream

import earm_jax as ej
from earm_jax.eval.compare import (
    POLICIES,
    anchors_first,
    compare_policies,
    evaluate_policies,
    usable_mask,
)

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow


def _setup(seed=0, **stream_kwargs):
    stream, _ = planted_stream(seed, num_queries=30, noise=0.05, **stream_kwargs)
    config = config_for(stream)
    policy = ej.paper_policy(pool_size=config.pool_size, block_size=5)
    return stream, config, policy


def test_every_policy_is_ranked_with_its_exact_call_count():
    stream, config, policy = _setup(insert_spread=True)
    rankings = jax.jit(
        functools.partial(compare_policies, config=config, policy=policy)
    )(jax.random.key(0), stream)
    assert set(rankings) == set(POLICIES)
    usable = np.asarray(usable_mask(stream))
    budgets = np.minimum(
        np.asarray(jax.vmap(policy.budget)(jnp.arange(30))), usable.sum(-1)
    )
    np.testing.assert_array_equal(rankings["semantic"].calls, 0)
    np.testing.assert_array_equal(rankings["full"].calls, usable.sum(-1))
    for name in (
        "observed",
        "observed_backfill",
        "mixed",
        "bias_only",
        "top_similarity",
    ):
        np.testing.assert_array_equal(rankings[name].calls, budgets, err_msg=name)
    # Observed-only ranks anchors alone; everyone else may rank any usable one.
    observed = rankings["observed"]
    assert int(np.asarray(observed.eligible).sum()) == int(budgets.sum())
    assert np.all(
        np.isneginf(np.asarray(observed.scores)[~np.asarray(observed.eligible)])
    )
    np.testing.assert_array_equal(rankings["mixed"].eligible, usable)


def test_mixed_and_bias_only_see_the_same_anchors():
    stream, config, policy = _setup(1)
    _, mixed = ej.run(ej.online_solver(config, policy), jax.random.key(3), stream)
    _, bias = ej.run(
        ej.online_solver(config._replace(rank=0), policy), jax.random.key(3), stream
    )
    np.testing.assert_array_equal(mixed.anchors, bias.anchors)


def test_anchors_first_puts_every_anchor_above_every_other_candidate():
    rng = np.random.default_rng(0)
    answers = rng.uniform(size=(50, 30))
    anchors = rng.uniform(size=(50, 30)) < 0.3
    fallback = rng.normal(scale=5.0, size=(50, 30))
    scores = np.asarray(anchors_first(answers, anchors, fallback))
    for row in range(50):
        if anchors[row].any() and (~anchors[row]).any():
            assert scores[row][anchors[row]].min() > scores[row][~anchors[row]].max()
        order_anchored = np.argsort(-scores[row][anchors[row]])
        np.testing.assert_array_equal(
            order_anchored, np.argsort(-answers[row][anchors[row]])
        )


def test_full_ranking_with_exact_scores_is_perfect_and_semantic_is_not():
    stream, config, policy = _setup(2)
    exact = stream._replace(scores=stream.relevant.astype(jnp.float32))
    metrics, has_relevant, _ = jax.jit(
        functools.partial(evaluate_policies, config=config, policy=policy, ks=(5,))
    )(jax.random.key(0), exact)
    has = np.asarray(has_relevant)
    relevant = np.asarray(exact.relevant).sum(-1)
    best = np.minimum(relevant, 5) / np.maximum(relevant, 1)
    np.testing.assert_allclose(np.asarray(metrics["full"]["recall@5"])[has], best[has])
    np.testing.assert_allclose(np.asarray(metrics["full"]["hit@5"])[has], 1.0)
    assert set(metrics["mixed"]) == {"recall@5", "hit@5", "ndcg@5", "mrr", "calls"}
