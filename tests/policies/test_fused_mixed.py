"""Fused Mixed and the fused merge: the float64 NumPy reference, causality,
vmap = loop with one compile, the similarity order when nothing is learned,
and one scale (a paid answer sinks only below unpaid candidates whose
predicted answer is higher)."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from text_pools import random_text_pools

import earm_jax as ej
from earm_jax.base import Query, SideInputs
from earm_jax.core.config import InputValueError
from earm_jax.policies.adaptive import AdaptiveConfig, adaptive_policy
from earm_jax.policies.adaptive.embedding_calls import add_answers, posterior
from earm_jax.policies.adaptive.policy import adaptive_query, policy_context
from earm_jax.policies.fused_mixed import memory_prior, run_mixed_fused

M, N, D, T = 50, 12, 6, 10


def _stream(seed=0, num_queries=T, texts=True):
    rng = np.random.default_rng(seed)
    memories, queries, candidates, similarity = random_text_pools(
        rng, M, num_queries, N, D
    )
    valid = np.ones((num_queries, N), bool)
    valid[:, -2:] = rng.random((num_queries, 2)) < 0.5
    return dict(
        queries=Query(
            jnp.asarray(candidates, jnp.int32),
            jnp.asarray(np.where(valid, similarity, -np.inf), jnp.float32),
            jnp.asarray(valid),
        ),
        answers=rng.random((num_queries, N)).astype(np.float32),
        anchors=(rng.random((num_queries, N)) < 0.4) & valid,
        prior=rng.normal(0.0, 0.2, (num_queries, N)).astype(np.float32),
        query_embeddings=queries.astype(np.float32) if texts else None,
        memory_embeddings=memories.astype(np.float32) if texts else None,
        valid=valid,
        similarity=similarity,
        candidates=candidates,
    )


def _run(stream, **kwargs):
    return run_mixed_fused(
        stream["queries"],
        stream["answers"],
        stream["anchors"],
        stream.get("prior"),
        stream["valid"],
        stream["query_embeddings"],
        stream["memory_embeddings"],
        **kwargs,
    )


def _reference(stream, ridge=10.0, prior_cosine=1.0):
    """float64 NumPy, written out: every query's scores."""
    texts = stream["query_embeddings"] is not None
    with_prior = stream.get("prior") is not None
    width = (D + 2 if texts else 2) + with_prior
    gram, moment = np.zeros((width, width)), np.zeros(width)
    square_sum = count = 0.0
    out = []
    for t in range(stream["answers"].shape[0]):
        valid = stream["valid"][t]
        cosine = np.where(valid, stream["similarity"][t], 0.0)
        columns = [cosine[:, None]]
        if texts:
            memory = stream["memory_embeddings"][stream["candidates"][t]]
            query = stream["query_embeddings"][t]
            columns.append(np.sqrt(D) * memory.astype(np.float64) * query)
        columns.append(np.ones((N, 1)))
        if with_prior:
            columns.append(stream["prior"][t][:, None])
        phi = np.where(valid[:, None], np.concatenate(columns, axis=1), 0.0)
        paid = stream["anchors"][t] & valid
        y = stream["answers"][t].astype(np.float64)
        gram += phi[paid].T @ phi[paid]
        moment += phi[paid].T @ y[paid]
        square_sum += float(np.sum(y[paid] ** 2))
        count += float(paid.sum())
        prior = np.zeros(width)
        prior[0] = prior_cosine
        weights = np.linalg.solve(gram + ridge * np.eye(width), moment + ridge * prior)
        mean = phi @ weights
        scores = np.where(paid, y, mean)
        out.append(np.where(valid, scores, -np.inf))
    return np.stack(out)


@pytest.mark.parametrize("with_prior", [True, False])
@pytest.mark.parametrize("texts", [True, False])
def test_matches_the_float64_reference(texts, with_prior):
    stream = _stream(seed=3, texts=texts)
    if not with_prior:
        stream["prior"] = None
    _, scores = jax.jit(_run)(stream)
    expected = _reference(stream)
    finite = np.isfinite(expected)
    np.testing.assert_array_equal(np.isfinite(np.asarray(scores)), finite)
    np.testing.assert_allclose(np.asarray(scores)[finite], expected[finite], atol=2e-5)


def test_nothing_paid_keeps_the_similarity_order():
    """With no answer the posterior mean is the prior: the cosine's order."""
    stream = _stream(seed=1)
    stream["anchors"] = np.zeros_like(stream["anchors"])
    _, scores = _run(stream)
    for t in range(T):
        valid = stream["valid"][t]
        by_score = np.argsort(-np.asarray(scores[t])[valid], kind="stable")
        by_similarity = np.argsort(-stream["similarity"][t][valid], kind="stable")
        np.testing.assert_array_equal(by_score, by_similarity)


def test_paid_candidates_keep_their_answers_and_unusable_ones_are_out():
    stream = _stream(seed=2)
    _, scores = _run(stream)
    scores = np.asarray(scores)
    paid = stream["anchors"] & stream["valid"]
    np.testing.assert_array_equal(scores[paid], stream["answers"][paid])
    assert np.all(np.isneginf(scores[~stream["valid"]]))


def test_causal_later_answers_change_nothing_earlier():
    stream = _stream(seed=4)
    _, before = _run(stream)
    changed = dict(stream)
    changed["answers"] = stream["answers"].copy()
    changed["answers"][6:] = 1.0 - changed["answers"][6:]
    changed["prior"] = stream["prior"].copy()
    changed["prior"][6:] += 1.0
    _, after = _run(changed)
    np.testing.assert_array_equal(np.asarray(before)[:6], np.asarray(after)[:6])
    assert not np.array_equal(np.asarray(before)[6:], np.asarray(after)[6:])


def test_vmap_equals_a_loop_and_compiles_once():
    streams = [_stream(seed=s) for s in range(3)]
    stacked = jax.tree.map(
        lambda *xs: jnp.stack([jnp.asarray(x) for x in xs]),
        *[
            {
                k: s[k]
                for k in (
                    "queries",
                    "answers",
                    "anchors",
                    "prior",
                    "valid",
                    "query_embeddings",
                    "memory_embeddings",
                )
            }
            for s in streams
        ],
    )

    @jax.jit
    @chex.assert_max_traces(n=1)
    def batched(batch):
        return jax.vmap(lambda b: _run(b)[1])(batch)

    together = batched(stacked)
    batched(stacked)  # a second call reuses the compiled program
    for index, stream in enumerate(streams):
        _, alone = _run(stream)
        np.testing.assert_allclose(together[index], alone, atol=1e-6)


def test_refuses_half_the_texts_and_a_bad_ridge():
    stream = _stream(seed=0)
    with pytest.raises(InputValueError, match="memory_embeddings"):
        run_mixed_fused(
            stream["queries"],
            stream["answers"],
            stream["anchors"],
            stream["prior"],
            query_embeddings=stream["query_embeddings"],
        )
    with pytest.raises(InputValueError, match="ridge"):
        _run(stream, ridge=0.0)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), share=st.floats(0.0, 1.0))
def test_one_scale_a_paid_answer_sinks_only_below_higher_predictions(seed, share):
    """A paid candidate ranks above an unpaid one exactly when its answer is
    above the unpaid one's predicted answer (the reference's posterior mean),
    whatever share of the pool was paid."""
    stream = _stream(seed=seed)
    rng = np.random.default_rng(seed)
    stream["anchors"] = (rng.random((T, N)) < share) & stream["valid"]
    _, scores = _run(stream)
    scores = np.asarray(scores)
    predicted = _reference(stream)
    checked = 0
    for t in range(T):
        paid = np.flatnonzero(stream["anchors"][t])
        unpaid = np.flatnonzero(stream["valid"][t] & ~stream["anchors"][t])
        for p in paid:
            for u in unpaid:
                gap = predicted[t, u] - stream["answers"][t, p]
                if abs(gap) > 1e-4:
                    assert (scores[t, u] > scores[t, p]) == (gap > 0), (t, p, u)
                    checked += 1
    assert checked > 0 or share < 0.05 or share > 0.95


def test_the_memory_prior_has_not_seen_its_own_query():
    """Bias-only's completion, less its pool's mean: the query's own answers
    change nothing in its prior (its ``c_t`` cancels, ``b_m`` is fitted on
    earlier queries) and change later queries'."""
    stream = _stream(seed=6)
    config = ej.SolverConfig(
        num_memories=M, capacity=T, pool_size=N, max_budget=N, rank=0
    )
    solver = ej.online_solver(config, ej.top_similarity_policy(pool_size=N, budget=6))

    def prior_of(answers):
        replayed = ej.Stream(
            stream["queries"],
            jnp.asarray(answers),
            jnp.zeros((T, N), bool),
            jnp.zeros((M,), jnp.int32),
        )
        _, info = ej.run(solver, jax.random.key(0), replayed)
        return np.asarray(memory_prior(info.completed, stream["valid"]))

    before = prior_of(stream["answers"])
    changed = stream["answers"].copy()
    changed[4] = 1.0 - changed[4]
    after = prior_of(changed)
    np.testing.assert_allclose(after[:5], before[:5], atol=1e-6)
    assert np.abs(after[5:] - before[5:]).max() > 1e-3
    np.testing.assert_allclose((before * stream["valid"]).sum(-1), 0.0, atol=1e-5)
    assert not before[~stream["valid"]].any()


def test_the_fused_merge_needs_an_embedding_call_order():
    with pytest.raises(ValueError, match="fused"):
        adaptive_policy(AdaptiveConfig(pool_size=N, merge="fused"))


def test_the_fused_merge_ranks_unpaid_by_the_posterior_mean():
    """``best`` with ``merge="fused"``: paid by answer, unpaid by the mean of
    the embedding regression with the query's answers folded in."""
    stream = _stream(seed=5)
    config = AdaptiveConfig(
        pool_size=N,
        round_sizes=(2, 3),
        call_budget=0.5,
        call_order="embedding",
        stop_rule="spend",
        embedding_dim=D,
        merge="fused",
    )
    policy = adaptive_policy(config)
    ledger = policy.init()
    query = jax.tree.map(lambda x: x[0], stream["queries"])
    side = SideInputs(
        jnp.asarray(stream["query_embeddings"][0]),
        jnp.asarray(stream["memory_embeddings"][stream["candidates"][0]]),
    )
    _, info = adaptive_query(
        policy, ledger, query, stream["answers"][0], stream["valid"][0], None, side
    )
    paid = np.asarray(info.anchors)
    assert paid.any() and (~paid & stream["valid"][0]).any()
    scores = np.asarray(info.scores)
    np.testing.assert_allclose(scores[paid], stream["answers"][0][paid], atol=1e-6)
    context = policy_context(query, stream["valid"][0], None, side)
    phi = np.asarray(policy.begin(None, ledger, query, context).phi)
    fit = add_answers(ledger.embedding_fit, phi, stream["answers"][0], paid)
    mean, _ = posterior(fit, phi, config.embedding_ridge, config.embedding_prior_cosine)
    unpaid = ~paid & stream["valid"][0]
    np.testing.assert_allclose(scores[unpaid], np.asarray(mean)[unpaid], atol=1e-5)
