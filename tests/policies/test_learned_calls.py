"""Learned calls: the float64 NumPy reference, causality, vmap = loop with one
compile, the call count, and a planted function of the embeddings found deep
in the pool where Top-similarity's calls never reach."""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from text_pools import random_text_pools

from earm_jax.base import Query
from earm_jax.policies.learned_calls import learned_calls, run_learned_calls

M, N, D, T = 60, 16, 8, 12


def _stream(seed=0, num_queries=T, pool=N, planted=False):
    rng = np.random.default_rng(seed)
    memories, queries, candidates, similarity = random_text_pools(
        rng, M, num_queries, pool, D
    )
    order = np.argsort(-similarity, axis=1)  # pools in descending similarity
    candidates = np.take_along_axis(candidates, order, 1)
    similarity = np.take_along_axis(similarity, order, 1)
    if planted:
        # The scorer rewards one embedding direction shared by both texts,
        # which similarity barely sees.
        metric = np.zeros(D)
        metric[0] = 6.0
        values = np.einsum("d,td,tnd->tn", metric, queries, memories[candidates])
        answers = 1.0 / (1.0 + np.exp(-4.0 * values))
    else:
        answers = rng.random((num_queries, pool))
    valid = np.ones((num_queries, pool), bool)
    valid[:, -2:] = rng.random((num_queries, 2)) < 0.5
    return dict(
        queries=Query(
            jnp.asarray(candidates, jnp.int32),
            jnp.asarray(np.where(valid, similarity, -np.inf), jnp.float32),
            jnp.asarray(valid),
        ),
        answers=answers.astype(np.float32),
        query_embeddings=queries.astype(np.float32),
        memory_embeddings=memories.astype(np.float32),
        valid=valid,
        similarity=similarity,
        candidates=candidates,
    )


def _reference(stream, budgets, head_fraction, ridge):
    """float64 NumPy, written out: the paid mask of every query."""
    width = D + 2
    gram, moment = np.zeros((width, width)), np.zeros(width)
    paid_all = []
    for t in range(len(budgets)):
        valid = stream["valid"][t]
        usable = np.flatnonzero(valid)
        by_similarity = usable[
            np.argsort(-stream["similarity"][t][usable], kind="stable")
        ]
        calls = min(int(budgets[t]), len(usable))
        head_calls = int(np.round(head_fraction * calls))
        head = by_similarity[:head_calls]
        memory = stream["memory_embeddings"][stream["candidates"][t]].astype(np.float64)
        query = stream["query_embeddings"][t].astype(np.float64)
        phi = np.concatenate(
            [
                np.where(valid, stream["similarity"][t], 0.0)[:, None],
                np.sqrt(D) * memory * query,
                np.ones((N, 1)),
            ],
            axis=1,
        )
        answers = stream["answers"][t].astype(np.float64)
        g = gram + phi[head].T @ phi[head]
        m = moment + phi[head].T @ answers[head]
        weights = np.linalg.solve(g + ridge * np.eye(width), m)
        rest = np.asarray([c for c in by_similarity if c not in set(head.tolist())])
        predicted = phi[rest] @ weights
        tail = rest[np.argsort(-predicted, kind="stable")][: calls - head_calls]
        paid = np.zeros(N, bool)
        paid[head] = True
        paid[tail] = True
        gram += phi[paid].T @ phi[paid]
        moment += phi[paid].T @ answers[paid]
        paid_all.append(paid)
    return np.stack(paid_all)


def _run(stream, budgets, policy=None):
    policy = learned_calls() if policy is None else policy
    return run_learned_calls(
        policy,
        stream["queries"],
        stream["answers"],
        budgets,
        stream["query_embeddings"],
        stream["memory_embeddings"],
    )


@pytest.mark.parametrize(
    ("head_fraction", "ridge"), [(0.4, 10.0), (0.0, 1.0), (1.0, 3.0)]
)
def test_the_calls_equal_the_float64_reference(head_fraction, ridge):
    stream = _stream(1)
    budgets = np.tile([3, 6, 9], T // 3)
    _, paid = jax.jit(lambda s, b: _run(s, b, learned_calls(head_fraction, ridge)))(
        stream, budgets
    )
    expected = _reference(stream, budgets, head_fraction, ridge)
    np.testing.assert_array_equal(np.asarray(paid), expected)


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 1000),
    budget=st.integers(0, N + 3),
)
def test_each_query_pays_its_budget_or_every_usable_candidate(seed, budget):
    stream = _stream(seed, num_queries=4)
    _, paid = _run(stream, np.full(4, budget))
    paid = np.asarray(paid)
    assert not (paid & ~stream["valid"]).any()
    expected = np.minimum(budget, stream["valid"].sum(1))
    np.testing.assert_array_equal(paid.sum(1), expected)


def test_causal_a_later_query_changes_nothing_before_it():
    stream = _stream(2)
    budgets = np.full(T, 6)
    _, paid = _run(stream, budgets)
    changed = dict(stream)
    answers = stream["answers"].copy()
    answers[7:] = 1.0 - answers[7:]
    changed["answers"] = answers
    _, again = _run(changed, budgets)
    np.testing.assert_array_equal(np.asarray(paid)[:8], np.asarray(again)[:8])
    assert not np.array_equal(np.asarray(paid)[8:], np.asarray(again)[8:])


def test_an_unpaid_answer_is_never_read():
    stream = _stream(3)
    budgets = np.full(T, 5)
    _, paid = _run(stream, budgets)
    paid = np.asarray(paid)
    poisoned = dict(stream)
    poisoned["answers"] = np.where(paid, stream["answers"], np.nan).astype(np.float32)
    _, again = _run(poisoned, budgets)
    np.testing.assert_array_equal(paid, np.asarray(again))


def test_vmap_equals_a_loop_and_compiles_once():
    streams = [_stream(seed) for seed in range(3)]
    budgets = np.full((3, T), 6)
    keys = ("queries", "answers", "query_embeddings", "memory_embeddings")
    arrays = [{k: s[k] for k in keys} for s in streams]
    stacked = jax.tree.map(lambda *xs: jnp.stack(xs), *arrays)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def batch(s, b):
        return jax.vmap(_run)(s, b)

    _, paid = batch(stacked, budgets)
    batch(jax.tree.map(lambda x: x, stacked), budgets + 1)
    for index, stream in enumerate(streams):
        _, alone = _run(stream, budgets[index])
        np.testing.assert_array_equal(np.asarray(paid[index]), np.asarray(alone))


def test_a_planted_function_of_the_embeddings_is_found_below_the_top():
    """When the scorer rewards an embedding direction similarity barely sees,
    the learned calls pay for more of the pool's best answers than the same
    number of calls at the top of the similarity order."""
    stream = _stream(4, num_queries=60, planted=True)
    budgets = np.full(60, 6)
    _, paid = _run(stream, budgets)
    paid = np.asarray(paid)
    answers = np.where(stream["valid"], stream["answers"], -np.inf)
    best = np.argsort(-answers, axis=1)[:, :3]
    found = np.take_along_axis(paid, best, 1)[30:].mean()
    top = np.zeros_like(paid)
    top[:, :6] = True
    found_top = np.take_along_axis(top, best, 1)[30:].mean()
    assert found >= found_top + 0.2, (found, found_top)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"head_fraction": 1.5}, "head_fraction"), ({"ridge": 0.0}, "ridge")],
)
def test_bad_settings_are_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        learned_calls(**kwargs)
