"""``best`` paying where the texts point (``call_order="embedding"`` and
``"embedding_gain"``): the Bayesian ridge posterior and the expected gain
against float64 NumPy, the rounds against learned calls (the same calls when
the schedule is the same), causality, vmap = loop with one compile, and the
refusals."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import earm_jax as ej
from earm_jax.policies import adaptive as ad
from earm_jax.policies.adaptive.embedding_calls import (
    add_answers,
    empty_fit,
    expected_gain,
    kth_best,
    posterior,
)
from earm_jax.policies.adaptive_history import run_adaptive_with_history
from earm_jax.policies.learned_calls import learned_calls, run_learned_calls

sys.path.insert(0, str(Path(__file__).parent))
from test_learned_calls import D, M, N, T, _stream  # noqa: E402


def test_the_posterior_equals_the_float64_bayesian_ridge():
    rng = np.random.default_rng(0)
    phi = rng.normal(size=(40, 5))
    answers = rng.random(40)
    paid = rng.random(40) < 0.6
    ridge, prior_cosine = 3.0, 0.7
    fit = add_answers(empty_fit(5), phi, answers, paid)
    mean, sd = posterior(fit, phi, ridge, prior_cosine)
    x, y = phi[paid], answers[paid]
    precision = x.T @ x + ridge * np.eye(5)
    prior = np.array([prior_cosine, 0, 0, 0, 0])
    weights = np.linalg.solve(precision, x.T @ y + ridge * prior)
    residual = np.sum(y**2) - 2 * weights @ (x.T @ y) + weights @ (x.T @ x) @ weights
    variance = residual / paid.sum()
    spread = np.einsum("nf,fn->n", phi, np.linalg.solve(precision, phi.T))
    np.testing.assert_allclose(mean, phi @ weights, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(sd, np.sqrt(variance * (1 + spread)), rtol=1e-4)


def test_the_expected_gain_is_the_gaussian_closed_form():
    mean = np.array([0.2, 0.5, 0.9, -1.0])
    sd = np.array([0.1, 0.3, 0.05, 2.0])
    threshold = 0.4

    def reference(m, s):
        z = (m - threshold) / s
        pdf = math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi)
        cdf = 0.5 * (1 + math.erf(z / math.sqrt(2)))
        return s * pdf + (m - threshold) * cdf

    expected = [reference(m, s) for m, s in zip(mean, sd, strict=True)]
    np.testing.assert_allclose(
        expected_gain(mean, sd, threshold), expected, rtol=1e-5, atol=1e-7
    )
    # A wider posterior is worth more at the same mean below the threshold.
    assert expected_gain(0.3, 0.3, 0.4) > expected_gain(0.3, 0.05, 0.4)


def test_kth_best_reads_only_the_valid_values():
    values = jnp.array([0.9, 0.1, 0.5, 0.7, 0.3])
    valid = jnp.array([True, True, False, True, True])
    assert float(kth_best(values, valid, 2)) == pytest.approx(0.7)
    assert float(kth_best(values, valid, 10)) == pytest.approx(0.1)
    assert float(kth_best(values, jnp.zeros(5, bool), 3)) == -jnp.inf


def _solver():
    return ej.compose_solver(
        model=ej.LowRankModel(num_memories=M, rank=0),
        history=ej.RowHistory(capacity=T, pool_size=N),
        algorithm=ej.als(),
        policy=ej.top_similarity_policy(pool_size=N),
    )


def _best(stream, **overrides):
    # 6 calls per query exactly: 6 / 16 of a full pool.
    settings = dict(
        pool_size=N,
        round_sizes=(2, 4),
        call_budget=6 / N,
        call_order="embedding",
        embedding_dim=D,
        stop_rule="spend",
    )
    config = ad.AdaptiveConfig(**(settings | overrides))
    _, info = run_adaptive_with_history(
        ad.adaptive_policy(config),
        _solver(),
        jax.random.key(0),
        stream["queries"],
        stream["answers"],
        jnp.zeros(M, jnp.int32),
        None,
        None,
        stream["query_embeddings"],
        stream["memory_embeddings"],
    )
    return info


def _full_pools(seed, planted=False):
    stream = _stream(seed, planted=planted)
    stream["valid"][:] = True
    queries = stream["queries"]
    stream["queries"] = queries._replace(
        similarity=jnp.asarray(stream["similarity"], jnp.float32),
        valid=jnp.ones_like(queries.valid),
    )
    return stream


def _learned_calls_anchors(stream):
    """Learned calls' anchors with 6 calls per query, a third in the head."""
    _, paid = run_learned_calls(
        learned_calls(head_fraction=1 / 3, ridge=10.0),
        stream["queries"],
        stream["answers"],
        np.full(T, 6),
        stream["query_embeddings"],
        stream["memory_embeddings"],
    )
    return paid


@pytest.mark.parametrize("planted", [False, True])
def test_with_learned_calls_schedule_best_pays_what_learned_calls_pays(planted):
    """Two rounds, the first by similarity, the second by the posterior mean,
    every query spending its 6 calls: the calls of learned calls (head 2 of 6,
    the same ridge and no prior on the cosine), which the float64 reference of
    its own tests pins."""
    stream = _full_pools(5, planted)
    info = _best(stream, embedding_prior_cosine=0.0)
    paid = _learned_calls_anchors(stream)
    np.testing.assert_array_equal(np.asarray(info.anchors), np.asarray(paid))
    assert np.asarray(info.calls).tolist() == [6] * T


@pytest.mark.parametrize("planted", [False, True])
def test_a_head_share_cuts_the_first_round_where_the_texts_take_over(planted):
    """``similarity_share=1/3`` of 6 calls: the first round (5 by its size) is
    cut at 2 by similarity and the texts choose the other 4, as learned calls
    with a third of its calls in the head."""
    stream = _full_pools(7, planted)
    info = _best(
        stream,
        round_sizes=(5, 10),
        similarity_share=1 / 3,
        similarity_rounds=0,
        embedding_prior_cosine=0.0,
    )
    paid = _learned_calls_anchors(stream)
    np.testing.assert_array_equal(np.asarray(info.anchors), np.asarray(paid))
    assert np.asarray(info.rounds).tolist() == [2] * T


def test_before_any_answer_the_rounds_follow_similarity():
    """The prior on the cosine: with nothing learned, the first query's later
    round pays the next most similar candidates."""
    stream = _full_pools(12, planted=True)
    info = _best(stream)
    first = np.argsort(-stream["similarity"][0], kind="stable")[:6]
    assert np.asarray(info.anchors)[0, first].all()


def test_causal_a_later_answer_changes_nothing_before_it():
    stream = _full_pools(6)
    before = _best(stream, call_order="embedding_gain")
    changed = dict(stream)
    answers = stream["answers"].copy()
    answers[7:] = 1.0 - answers[7:]
    changed["answers"] = answers
    after = _best(changed, call_order="embedding_gain")
    # Queries before 7 see none of the change; query 7's first round is by
    # similarity, its later rounds read its own (changed) answers.
    np.testing.assert_array_equal(
        np.asarray(before.anchors)[:7], np.asarray(after.anchors)[:7]
    )
    first = np.argsort(-stream["similarity"][7], kind="stable")[:2]
    assert np.asarray(after.anchors)[7, first].all()
    assert not np.array_equal(
        np.asarray(before.anchors)[7:], np.asarray(after.anchors)[7:]
    )


def test_an_unpaid_answer_is_never_read():
    stream = _full_pools(7)
    info = _best(stream, call_order="embedding_gain")
    paid = np.asarray(info.anchors)
    poisoned = dict(stream)
    poisoned["answers"] = np.where(paid, stream["answers"], np.nan).astype(np.float32)
    again = _best(poisoned, call_order="embedding_gain")
    np.testing.assert_array_equal(paid, np.asarray(again.anchors))


def test_vmap_equals_a_loop_and_compiles_once():
    streams = [_full_pools(seed) for seed in (8, 9, 10)]
    keys = ("queries", "answers", "query_embeddings", "memory_embeddings")
    stacked = jax.tree.map(
        lambda *xs: jnp.stack(xs), *[{k: s[k] for k in keys} for s in streams]
    )

    @jax.jit
    @chex.assert_max_traces(n=1)
    def batch(s):
        return jax.vmap(lambda one: _best(one).anchors)(s)

    paid = batch(stacked)
    batch(jax.tree.map(jnp.copy, stacked))
    for index, stream in enumerate(streams):
        np.testing.assert_array_equal(
            np.asarray(paid[index]), np.asarray(_best(stream).anchors)
        )


def test_the_embedding_orders_need_the_texts():
    with pytest.raises(ValueError, match="embedding_dim"):
        ad.adaptive_policy(ad.AdaptiveConfig(pool_size=N, call_order="embedding_gain"))
    stream = _full_pools(11)
    policy = ad.adaptive_policy(
        ad.AdaptiveConfig(pool_size=N, call_order="embedding", embedding_dim=D)
    )
    with pytest.raises(ej.InputValueError, match="SideInputs"):
        ad.adaptive_query(
            policy,
            policy.init(),
            jax.tree.map(lambda x: x[0], stream["queries"]),
            stream["answers"][0],
        )
    wrong = ad.adaptive_policy(
        ad.AdaptiveConfig(pool_size=N, call_order="embedding", embedding_dim=D + 1)
    )
    query = jax.tree.map(lambda x: x[0], stream["queries"])
    side = ej.SideInputs(
        jnp.asarray(stream["query_embeddings"][0]),
        jnp.asarray(stream["memory_embeddings"])[query.candidates],
    )
    with pytest.raises(ej.InputValueError, match="embedding_dim"):
        ad.adaptive_query(wrong, wrong.init(), query, stream["answers"][0], side=side)
