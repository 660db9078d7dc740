"""The learned order of the unscored candidates and the adaptive policy run
beside the experience matrix (policies/adaptive_history.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import earm_jax as ej
from earm_jax.base import Query
from earm_jax.policies import adaptive as ad
from earm_jax.policies.adaptive_history import run_adaptive_with_history

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow

POOL, MEMORIES, QUERIES = 16, 40, 14
CONFIG = ad.AdaptiveConfig(pool_size=POOL, round_sizes=(2, 4, 10), max_carry=20)


def _stream(seed: int):
    """Pools drawn from 40 memories, some of which are evidence for many
    queries (what the memory bias can learn)."""
    rng = np.random.default_rng(seed)
    popular = rng.random(MEMORIES) < 0.2
    candidates = np.stack(
        [rng.choice(MEMORIES, POOL, replace=False) for _ in range(QUERIES)]
    ).astype(np.int32)
    similarity = np.sort(rng.normal(size=(QUERIES, POOL)), axis=1)[:, ::-1]
    relevant = popular[candidates] & (rng.random((QUERIES, POOL)) < 0.7)
    scores = np.clip(relevant + 0.1 * rng.normal(size=relevant.shape), 0, 1)
    queries = Query(
        jnp.asarray(candidates),
        jnp.asarray(similarity, jnp.float32),
        jnp.ones((QUERIES, POOL), bool),
    )
    insert_time = jnp.asarray(rng.integers(0, 3, MEMORIES), jnp.int32)
    return queries, jnp.asarray(scores, jnp.float32), insert_time


def _solver(rank: int = 0):
    config = ej.SolverConfig(
        num_memories=MEMORIES,
        capacity=QUERIES,
        pool_size=POOL,
        max_budget=POOL,
        rank=rank,
    )
    return ej.online_solver(config, ej.top_similarity_policy(pool_size=POOL))


def _zscore(values, usable):
    values = np.where(usable, values, 0.0).astype(np.float64)
    count = max(usable.sum(), 1)
    mean = values.sum() / count
    spread = np.sqrt(np.where(usable, (values - mean) ** 2, 0.0).sum() / count)
    if spread <= 1e-6:
        return np.zeros_like(values)
    return np.where(usable, (values - mean) / spread, 0.0)


def test_order_features_are_z_scores_over_the_usable():
    rng = np.random.default_rng(0)
    similarity, bias = rng.normal(size=POOL), rng.normal(size=POOL)
    usable = rng.random(POOL) < 0.7
    got = np.asarray(ad.order_features(similarity, usable, bias))
    np.testing.assert_allclose(got[:, 0], usable.astype(float))
    np.testing.assert_allclose(got[:, 1], _zscore(similarity, usable), atol=1e-5)
    np.testing.assert_allclose(got[:, 2], _zscore(bias, usable), atol=1e-5)
    no_bias = np.asarray(ad.order_features(similarity, usable))
    assert not no_bias[:, 2].any()


def test_the_order_model_is_the_ridge_fit_of_the_posterior_on_the_features():
    """Float64 NumPy reference: the ledger's sums over every scored candidate of
    x x^T and x q, and the weights their ridge solution."""
    queries, scores, insert_time = _stream(1)
    policy = ad.adaptive_policy(CONFIG)
    (ledger, _), info = jax.jit(
        lambda q, s, t: run_adaptive_with_history(
            policy, _solver(), jax.random.key(0), q, s, t
        )
    )(queries, scores, insert_time)
    # Replay the features each query saw: the solver's biases before it (its
    # step jitted once, as inside the run, instead of dispatched op by op).
    solver = _solver()
    state = solver.init(jax.random.key(0), insert_time)
    observe = jax.jit(solver.observe)
    usable_candidates = jax.jit(ej.core.online.usable_candidates)
    gram, rhs = np.zeros((3, 3)), np.zeros(3)
    for t in range(QUERIES):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], queries)
        usable = np.asarray(usable_candidates(state, query))
        bias = np.asarray(state.memory_bias)[np.asarray(query.candidates)]
        x = np.stack(
            [
                usable.astype(float),
                _zscore(np.asarray(query.similarity), usable),
                _zscore(bias, usable),
            ],
            axis=-1,
        )
        scored = np.asarray(info.anchors[t])
        q = np.asarray(info.posterior[t], np.float64)
        gram += x[scored].T @ x[scored]
        rhs += x[scored].T @ q[scored]
        state, _ = observe(state, query, ej.Observation(scores[t], info.anchors[t]))
    np.testing.assert_allclose(
        np.asarray(ledger.order_gram), gram, rtol=1e-4, atol=1e-3
    )
    np.testing.assert_allclose(np.asarray(ledger.order_rhs), rhs, rtol=1e-4, atol=1e-3)
    want = np.linalg.solve(gram + CONFIG.order_ridge * np.eye(3), rhs)
    got = ad.order_weights(ledger.order_gram, ledger.order_rhs, CONFIG.order_ridge)
    np.testing.assert_allclose(np.asarray(got), want, rtol=1e-3, atol=1e-5)
    assert int(info.calls.sum()) > 0 and np.abs(gram[2]).sum() > 0


@pytest.mark.parametrize("merge", ["confident_no", "answers_first"])
def test_the_learned_order_moves_only_the_unscored_between_the_tiers(merge):
    """Weights that favour the memory bias reorder the unscored by it; a clean
    "yes" stays above every unscored candidate, and a clean "no" below them
    under ``confident_no`` but above them under ``answers_first`` (every paid
    answer outranks every unscored candidate)."""
    policy = ad.adaptive_policy(
        CONFIG._replace(call_budget=1.0, round_sizes=(4,), merge=merge)
    )
    query = Query(
        jnp.arange(POOL, dtype=jnp.int32),
        -jnp.arange(POOL, dtype=jnp.float32),
        jnp.ones(POOL, bool),
    )
    bias = jnp.zeros(POOL).at[12].set(5.0).at[13].set(4.0)
    answers = jnp.zeros(POOL).at[0].set(1.0)
    ledger = policy.init()._replace(
        order_gram=jnp.eye(3) * 100.0, order_rhs=jnp.array([0.0, 0.5, 30.0])
    )
    _, info = ad.score_query(policy, ledger, query, lambda mask: answers, None, bias)
    scores = np.asarray(info.scores)
    unscored = np.flatnonzero(~np.asarray(info.anchors))
    order = unscored[np.argsort(-scores[unscored], kind="stable")]
    assert list(order[:2]) == [12, 13]
    assert scores[0] > scores[unscored].max()
    if merge == "confident_no":
        assert scores[1:4].max() < scores[unscored].min()
    else:
        assert scores[1:4].min() > scores[unscored].max()
    # Without weights (a fresh ledger) the unscored keep similarity order.
    _, fresh = ad.score_query(
        policy, policy.init(), query, lambda mask: answers, None, bias
    )
    fresh_scores = np.asarray(fresh.scores)[unscored]
    assert np.all(np.diff(fresh_scores) < 0)
    # The similarity order of the unscored, for unscored_order="similarity".
    plain = ad.adaptive_policy(policy.config._replace(unscored_order="similarity"))
    _, same = ad.score_query(plain, ledger, query, lambda mask: answers, None, bias)
    assert np.all(np.diff(np.asarray(same.scores)[unscored]) < 0)


def test_causal_future_queries_change_nothing_before():
    queries, scores, insert_time = _stream(2)
    policy = ad.adaptive_policy(CONFIG)
    run = jax.jit(
        lambda s: run_adaptive_with_history(
            policy, _solver(2), jax.random.key(0), queries, s, insert_time
        )[1]
    )
    base = run(scores)
    other = run(scores.at[8:].set(1.0 - scores[8:]))
    for got, want in zip(jax.tree.leaves(other), jax.tree.leaves(base), strict=True):
        np.testing.assert_array_equal(np.asarray(got)[:8], np.asarray(want)[:8])


def test_vmap_over_streams_equals_a_python_loop_of_solver_steps():
    """The batched run equals, query by query, the one solver built with the
    policy (``online_solver(config, policy).step``): the protocol's loop."""
    streams = [_stream(seed) for seed in (3, 4)]
    policy, solver = ad.adaptive_policy(CONFIG), _solver(2)
    stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *streams)
    batched = jax.jit(
        jax.vmap(
            lambda q, s, t: run_adaptive_with_history(
                policy, solver, jax.random.key(0), q, s, t
            )[1]
        )
    )(*stacked)
    with_policy = ej.online_solver(solver.config, policy)
    step = jax.jit(with_policy.step)
    for i, (queries, scores, insert_time) in enumerate(streams):
        state = with_policy.init(jax.random.key(0), insert_time)
        for t in range(QUERIES):
            query = jax.tree.map(lambda leaf, t=t: leaf[t], queries)
            state, info = step(jax.random.key(0), state, query, scores[t])
            for name in ("scores", "anchors", "calls", "rounds"):
                np.testing.assert_allclose(
                    np.asarray(getattr(info, name)),
                    np.asarray(getattr(batched, name))[i, t],
                    rtol=1e-4,
                    atol=1e-5,
                )
            assert int(info.budget) == int(batched.limit[i, t])


def test_history_rows_narrower_than_the_per_query_cap_are_refused():
    narrow = ej.online_solver(
        _solver().config._replace(max_budget=4),
        ej.top_similarity_policy(pool_size=POOL),
    )
    queries, scores, insert_time = _stream(0)
    with pytest.raises(ValueError, match="max_budget=4"):
        run_adaptive_with_history(
            ad.adaptive_policy(CONFIG),
            narrow,
            jax.random.key(0),
            queries,
            scores,
            insert_time,
        )


def test_the_learned_call_order_pays_where_the_learned_order_points():
    """``call_order="learned"``: the first round pays the most similar, later
    rounds the unscored highest in the learned order (here the memory-bias
    feature), deep in the similarity order; the default pays by similarity."""
    config = CONFIG._replace(call_budget=1.0, round_sizes=(2, 2), call_order="learned")
    query = Query(
        jnp.arange(POOL, dtype=jnp.int32),
        -jnp.arange(POOL, dtype=jnp.float32),
        jnp.ones(POOL, bool),
    )
    bias = jnp.zeros(POOL).at[12].set(5.0).at[13].set(4.0)
    ledger = (
        ad.adaptive_policy(config)
        .init()
        ._replace(order_gram=jnp.eye(3) * 100.0, order_rhs=jnp.array([0.0, 0.5, 30.0]))
    )
    answers = jnp.full(POOL, 0.5)
    paid = {}
    for order in ("learned", "similarity"):
        policy = ad.adaptive_policy(config._replace(call_order=order))
        _, info = ad.score_query(
            policy, ledger, query, lambda mask: answers, None, bias
        )
        paid[order] = set(np.flatnonzero(np.asarray(info.anchors)).tolist())
    assert paid["learned"] == {0, 1, 12, 13}
    assert paid["similarity"] == {0, 1, 2, 3}
    # A fresh ledger has learned nothing: its order is similarity's.
    policy = ad.adaptive_policy(config)
    _, info = ad.score_query(
        policy, policy.init(), query, lambda mask: answers, None, bias
    )
    assert set(np.flatnonzero(np.asarray(info.anchors)).tolist()) == {0, 1, 2, 3}


@pytest.mark.parametrize(
    "field, value",
    [("unscored_order", "random"), ("order_ridge", 0.0), ("call_order", "random")],
)
def test_bad_order_config_raises_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        ad.adaptive_policy(CONFIG._replace(**{field: value}))
