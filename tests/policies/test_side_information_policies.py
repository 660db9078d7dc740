"""mixed_side and best_side: the merge, causality, vmap = loop, the ledger, and
that the side-information completion is what orders best_side's unscored."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from text_pools import random_text_pools

from earm_jax.base import Query
from earm_jax.core.side_information import shared_start, side_information
from earm_jax.policies import adaptive as ad
from earm_jax.policies.side_information import run_best_side, run_mixed_side

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow

M, N, D, T = 30, 10, 5, 12


def _planted(seed=0, T=T):
    """Relevance a diagonal metric of the embeddings decides, hidden from the
    similarity (which is the plain cosine)."""
    rng = np.random.default_rng(seed)
    memories, queries, candidates, similarity = random_text_pools(rng, M, T, N, D)
    metric = np.array([3.0, -3.0, 0.0, 0.0, 0.0])
    signal = np.einsum("d,td,tnd->tn", metric, queries, memories[candidates])
    answers = (signal > np.quantile(signal, 0.8, axis=1, keepdims=True)).astype(
        np.float32
    )
    query = Query(
        jnp.asarray(candidates, jnp.int32),
        jnp.asarray(similarity, jnp.float32),
        jnp.ones((T, N), bool),
    )
    return (
        query,
        jnp.asarray(answers),
        jnp.asarray(queries, jnp.float32),
        jnp.asarray(memories, jnp.float32),
    )


def _anchors(seed=1):
    rng = np.random.default_rng(seed)
    anchors = rng.random((T, N)) < 0.3
    anchors[:, 0] = True
    return jnp.asarray(anchors)


def test_mixed_side_keeps_answers_and_hides_unusable():
    queries, answers, q_emb, m_emb = _planted()
    anchors = _anchors()
    usable = jnp.ones((T, N), bool).at[:, -1].set(False)
    _, scores = run_mixed_side(
        side_information(), queries, answers, anchors, q_emb, m_emb, usable
    )
    paid = np.asarray(anchors & usable)
    np.testing.assert_array_equal(np.asarray(scores)[paid], np.asarray(answers)[paid])
    assert np.all(np.isneginf(np.asarray(scores)[:, -1]))
    assert np.all(np.isfinite(np.asarray(scores)[:, :-1]))


def test_mixed_side_is_causal():
    queries, answers, q_emb, m_emb = _planted()
    anchors = _anchors()
    model = side_information()
    _, before = run_mixed_side(model, queries, answers, anchors, q_emb, m_emb)
    changed = answers.at[7:].set(1.0 - answers[7:])
    _, after = run_mixed_side(model, queries, changed, anchors, q_emb, m_emb)
    np.testing.assert_array_equal(np.asarray(before)[:7], np.asarray(after)[:7])
    assert not np.array_equal(np.asarray(before)[8:], np.asarray(after)[8:])


def _best_side(policy, model, inputs):
    queries, answers, q_emb, m_emb = inputs
    return run_best_side(policy, model, queries, answers, q_emb, m_emb)


def test_best_side_is_causal_and_within_its_ledger():
    inputs = _planted()
    queries, answers, q_emb, m_emb = inputs
    policy = ad.adaptive_policy(
        ad.AdaptiveConfig(pool_size=N, round_sizes=(2, 3), call_budget=0.3)
    )
    run = jax.jit(
        lambda a: run_best_side(policy, side_information(), queries, a, q_emb, m_emb)
    )
    (ledger, _), info = run(answers)
    assert int(jnp.sum(info.calls)) <= int(np.floor(0.3 * N * T))
    assert float(ledger.spent) == float(jnp.sum(info.calls))
    changed = answers.at[6:].set(1.0 - answers[6:])
    _, later = run(changed)
    np.testing.assert_array_equal(
        np.asarray(info.scores)[:6], np.asarray(later.scores)[:6]
    )


def test_best_side_orders_the_unscored_by_the_side_completion():
    """Where the texts decide relevance and similarity does not, the learned
    order of best_side puts more relevant memories first among the unscored
    than best without side information does."""
    long = 60
    inputs = _planted(seed=3, T=long)
    queries, answers, q_emb, m_emb = inputs
    config = ad.AdaptiveConfig(pool_size=N, round_sizes=(3,), call_budget=0.3)
    policy = ad.adaptive_policy(config)
    _, side_info = _best_side(policy, side_information(), inputs)
    _, plain = ad.run_adaptive(policy, queries, answers)

    def unscored_precision(info):
        scores = np.asarray(info.scores)
        hits = []
        for t in range(long // 2, long):  # after the fit has seen a few queries
            open_ = ~np.asarray(info.anchors[t])
            order = np.argsort(-np.where(open_, scores[t], -np.inf))[:2]
            hits.append(np.asarray(answers[t])[order].mean())
        return float(np.mean(hits))

    assert unscored_precision(side_info) > unscored_precision(plain) + 0.2


def test_vmap_equals_loop():
    streams = [_planted(seed) for seed in range(3)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *streams)
    anchors = jnp.stack([_anchors(seed) for seed in range(3)])
    model = side_information()
    batched = jax.vmap(
        lambda q, a, k, qe, me: run_mixed_side(model, q, a, k, qe, me)[1]
    )(stacked[0], stacked[1], anchors, stacked[2], stacked[3])
    for i, (queries, answers, q_emb, m_emb) in enumerate(streams):
        _, one = run_mixed_side(model, queries, answers, anchors[i], q_emb, m_emb)
        chex.assert_trees_all_close(batched[i], one, atol=1e-5)


def test_embedding_shapes_are_checked():
    queries, answers, q_emb, m_emb = _planted()
    with pytest.raises(ValueError, match="query_embeddings"):
        run_mixed_side(
            side_information(), queries, answers, _anchors(), q_emb[:3], m_emb
        )
    with pytest.raises(ValueError, match="memory_embeddings"):
        run_mixed_side(
            side_information(), queries, answers, _anchors(), q_emb, m_emb[:, :2]
        )


def _source(seed=5):
    """A fit on another tenant's stream (its own memories and queries)."""
    queries, answers, q_emb, m_emb = _planted(seed)
    state, _ = run_mixed_side(
        side_information(), queries, answers, _anchors(seed), q_emb, m_emb
    )
    return state


def test_a_shared_start_ranks_the_first_query_before_any_anchor():
    queries, answers, q_emb, m_emb = _planted()
    model = side_information()
    no_anchors = jnp.zeros((T, N), bool)
    start = shared_start(_source(), M)
    _, cold = run_mixed_side(model, queries, answers, no_anchors, q_emb, m_emb)
    _, warm = run_mixed_side(
        model, queries, answers, no_anchors, q_emb, m_emb, initial_state=start
    )
    # Cold, nothing is known: every candidate ties. Shared weights order them.
    assert np.unique(np.asarray(cold)[0]).size == 1
    assert np.unique(np.asarray(warm)[0]).size > 1
    policy = ad.adaptive_policy(
        ad.AdaptiveConfig(pool_size=N, round_sizes=(2, 3), call_budget=0.3)
    )
    _, cold_best = run_best_side(policy, model, queries, answers, q_emb, m_emb)
    _, warm_best = run_best_side(
        policy, model, queries, answers, q_emb, m_emb, initial_state=start
    )
    # best_side's learned order weighs the completion by what its own ledger
    # learned, nothing at the first query: the start matters from the second.
    np.testing.assert_array_equal(
        np.asarray(cold_best.scores)[0], np.asarray(warm_best.scores)[0]
    )
    assert not np.array_equal(
        np.asarray(cold_best.scores)[1:], np.asarray(warm_best.scores)[1:]
    )


def test_the_default_start_is_model_init_bit_for_bit():
    queries, answers, q_emb, m_emb = _planted()
    anchors = _anchors()
    model = side_information()
    default_state, default = run_mixed_side(
        model, queries, answers, anchors, q_emb, m_emb
    )
    state, explicit = run_mixed_side(
        model,
        queries,
        answers,
        anchors,
        q_emb,
        m_emb,
        initial_state=model.init(M, D),
    )
    np.testing.assert_array_equal(np.asarray(default), np.asarray(explicit))
    chex.assert_trees_all_equal(default_state, state)
    policy = ad.adaptive_policy(
        ad.AdaptiveConfig(pool_size=N, round_sizes=(2, 3), call_budget=0.3)
    )
    _, plain = run_best_side(policy, model, queries, answers, q_emb, m_emb)
    _, explicit_best = run_best_side(
        policy, model, queries, answers, q_emb, m_emb, initial_state=model.init(M, D)
    )
    chex.assert_trees_all_equal(plain, explicit_best)


def test_a_shared_start_stays_causal():
    queries, answers, q_emb, m_emb = _planted()
    anchors = _anchors()
    model = side_information()
    start = shared_start(_source(), M)
    _, before = run_mixed_side(
        model, queries, answers, anchors, q_emb, m_emb, initial_state=start
    )
    changed = answers.at[7:].set(1.0 - answers[7:])
    _, after = run_mixed_side(
        model, queries, changed, anchors, q_emb, m_emb, initial_state=start
    )
    np.testing.assert_array_equal(np.asarray(before)[:7], np.asarray(after)[:7])
    assert not np.array_equal(np.asarray(before)[8:], np.asarray(after)[8:])
    policy = ad.adaptive_policy(
        ad.AdaptiveConfig(pool_size=N, round_sizes=(2, 3), call_budget=0.3)
    )
    _, best_before = run_best_side(
        policy, model, queries, answers, q_emb, m_emb, initial_state=start
    )
    _, best_after = run_best_side(
        policy, model, queries, changed, q_emb, m_emb, initial_state=start
    )
    np.testing.assert_array_equal(
        np.asarray(best_before.scores)[:7], np.asarray(best_after.scores)[:7]
    )


def test_vmap_with_a_shared_start_equals_a_loop():
    streams = [_planted(seed) for seed in range(3)]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *streams)
    anchors = jnp.stack([_anchors(seed) for seed in range(3)])
    model = side_information()
    start = model.pooled_start([_source(5), _source(6)], M)
    batched = jax.vmap(
        lambda q, a, k, qe, me: run_mixed_side(
            model, q, a, k, qe, me, initial_state=start
        )[1]
    )(stacked[0], stacked[1], anchors, stacked[2], stacked[3])
    for i, (queries, answers, q_emb, m_emb) in enumerate(streams):
        _, one = run_mixed_side(
            model, queries, answers, anchors[i], q_emb, m_emb, initial_state=start
        )
        chex.assert_trees_all_close(batched[i], one, atol=1e-5)


def test_an_initial_state_of_the_wrong_shape_is_named():
    queries, answers, q_emb, m_emb = _planted()
    model = side_information()
    with pytest.raises(ValueError, match="initial_state.memory_residual"):
        run_mixed_side(
            model,
            queries,
            answers,
            _anchors(),
            q_emb,
            m_emb,
            initial_state=model.init(M + 1, D),
        )
    policy = ad.adaptive_policy(ad.AdaptiveConfig(pool_size=N, round_sizes=(2,)))
    with pytest.raises(ValueError, match="initial_state.gram"):
        run_best_side(
            policy,
            model,
            queries,
            answers,
            q_emb,
            m_emb,
            initial_state=model.init(M, D + 1),
        )
