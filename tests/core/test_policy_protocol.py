"""The one Policy protocol: every policy (the paper's one-round policies,
``best``, learned calls) through ``online_solver`` and ``run``, every solver
algorithm under it, the host round loop equal to the traced one, and the
refusals at construction."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from text_pools import random_text_pools

import earm_jax as ej
from earm_jax.core.rounds import pay_query
from earm_jax.policies import adaptive as ad
from earm_jax.policies.budget import stage_schedule
from earm_jax.policies.learned_calls import (
    learned_calls,
    learned_calls_policy,
    run_learned_calls,
)

M, N, D, T = 40, 12, 6, 9


def _stream(seed: int = 0) -> ej.Stream:
    rng = np.random.default_rng(seed)
    memories, embeddings, candidates, similarity = random_text_pools(rng, M, T, N, D)
    relevant = rng.random((T, N)) < 0.2
    scores = np.clip(relevant + 0.1 * rng.normal(size=(T, N)), 0.0, 1.0)
    valid = np.ones((T, N), bool)
    valid[2, -3:] = False  # a short pool
    return ej.Stream(
        queries=ej.Query(
            jnp.asarray(candidates, jnp.int32),
            jnp.asarray(similarity, jnp.float32),
            jnp.asarray(valid),
        ),
        scores=jnp.asarray(scores, jnp.float32),
        relevant=jnp.asarray(relevant),
        insert_time=jnp.asarray(rng.integers(0, 3, M), jnp.int32),
        memory_embeddings=jnp.asarray(memories, jnp.float32),
        query_embeddings=jnp.asarray(embeddings, jnp.float32),
    )


def _config(**fields) -> ej.SolverConfig:
    return ej.SolverConfig(
        num_memories=M, capacity=T, pool_size=N, max_budget=N, rank=2, **fields
    )


POLICIES = {
    "paper": lambda: ej.paper_policy(pool_size=N, block_size=3),
    "top_similarity": lambda: ej.top_similarity_policy(pool_size=N, block_size=3),
    "full": lambda: ej.full_policy(pool_size=N),
    "semantic": ej.semantic_policy,
    "best": lambda: ad.adaptive_policy(
        ad.AdaptiveConfig(pool_size=N, round_sizes=(2, 3, 4), call_budget=0.4)
    ),
    "learned_calls": lambda: learned_calls_policy(
        D, pool_size=N, budget=stage_schedule(N, 3)
    ),
}


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_runs_through_the_solver(name):
    policy = POLICIES[name]()
    assert isinstance(policy, ej.Policy)
    stream = _stream(1)
    solver = ej.online_solver(_config(), policy)
    _, info = jax.jit(lambda key, s: ej.run(solver, key, s))(jax.random.key(0), stream)
    inserted = np.asarray(stream.insert_time)[np.asarray(stream.queries.candidates)]
    usable = np.asarray(stream.queries.valid) & (inserted <= np.arange(T)[:, None])
    anchors = np.asarray(info.anchors)
    assert not (anchors & ~usable).any(), "paid for a candidate that is not usable"
    # No answer failed, so every call paid is an anchor stored.
    np.testing.assert_array_equal(np.asarray(info.calls), anchors.sum(-1))
    assert (np.asarray(info.calls) <= np.asarray(info.budget)).all()
    assert (np.asarray(info.rounds) <= policy.num_rounds).all()
    assert (np.asarray(info.dropped) == 0).all()
    scores = np.asarray(info.scores)
    assert np.isfinite(scores[usable]).all() and np.isneginf(scores[~usable]).all()


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_the_host_round_loop_equals_the_traced_step(name):
    """``pay_query`` (``begin`` → ``policy.select`` / pay / ``policy.observe``
    → ``finish`` on the host, one scorer request per round) is ``step``, query
    for query."""
    policy = POLICIES[name]()
    stream = _stream(2)
    solver = ej.online_solver(_config(), policy)
    step = jax.jit(solver.step)
    traced = host = solver.init(jax.random.key(0), stream.insert_time)
    # Five queries: past the first stage, with a carry from query to query
    # (the host loop runs eagerly, op by op, so every query costs seconds).
    for t in range(5):
        query = jax.tree.map(lambda leaf, t=t: leaf[t], stream.queries)
        answers = np.asarray(stream.scores[t])
        side = ej.SideInputs(
            stream.query_embeddings[t], stream.memory_embeddings[query.candidates]
        )
        key = jax.random.fold_in(jax.random.key(3), t)
        traced, want = step(key, traced, query, answers, side)
        requests = []

        def pay(positions, answers=answers, requests=requests):
            requests.append(len(positions))
            return answers[positions], np.ones(len(positions), bool)

        host, got = pay_query(solver, key, host, query, pay, side)
        np.testing.assert_array_equal(np.asarray(got.anchors), np.asarray(want.anchors))
        np.testing.assert_allclose(got.scores, want.scores, rtol=1e-5, atol=1e-6)
        assert int(got.calls) == int(want.calls) == sum(requests)
        assert int(got.rounds) == int(want.rounds)
    for got, want in zip(jax.tree.leaves(host), jax.tree.leaves(traced), strict=True):
        np.testing.assert_allclose(
            np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-5
        )


@pytest.mark.parametrize("algorithm", ["als", "incremental", "gradient", "log"])
@pytest.mark.parametrize("name", ["paper", "best"])
def test_every_solver_algorithm_under_one_and_many_round_policies(algorithm, name):
    fields = {"entry_capacity": T * N} if algorithm == "log" else {}
    factories = {
        "als": ej.als(),
        "incremental": ej.incremental(),
        "gradient": ej.gradient(steps=3),
        "log": ej.incremental(),
    }
    solver = ej.online_solver(_config(**fields), POLICIES[name](), factories[algorithm])
    stream = _stream(3)
    _, info = jax.jit(lambda key, s: ej.run(solver, key, s))(jax.random.key(0), stream)
    assert np.isfinite(np.asarray(info.completed)).all()
    np.testing.assert_array_equal(
        np.asarray(info.calls), np.asarray(info.anchors).sum(-1)
    )


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_causal_later_answers_change_nothing_before(name):
    stream = _stream(4)
    solver = ej.online_solver(_config(), POLICIES[name]())
    run = jax.jit(lambda s: ej.run(solver, jax.random.key(0), s)[1])
    base = run(stream)
    later = run(
        stream._replace(scores=stream.scores.at[5:].set(1.0 - stream.scores[5:]))
    )
    for got, want in zip(jax.tree.leaves(later), jax.tree.leaves(base), strict=True):
        np.testing.assert_array_equal(np.asarray(got)[:5], np.asarray(want)[:5])


def test_learned_calls_through_the_solver_pay_what_the_stream_runner_pays():
    """The protocol's learned calls (two rounds, the regression carried in
    the solver state) pay exactly the candidates the stream runner behind the
    committed results pays, at Top-similarity's calls."""
    stream = _stream(5)
    policy = POLICIES["learned_calls"]()
    solver = ej.online_solver(_config(), policy)
    _, info = ej.run(solver, jax.random.key(0), stream)
    inserted = stream.insert_time[stream.queries.candidates]
    usable = stream.queries.valid & (inserted <= jnp.arange(T)[:, None])
    _, paid = run_learned_calls(
        learned_calls(),
        stream.queries,
        stream.scores,
        info.budget,
        stream.query_embeddings,
        stream.memory_embeddings,
        usable,
    )
    np.testing.assert_array_equal(np.asarray(info.anchors), np.asarray(paid))


def test_best_through_the_solver_equals_the_policy_beside_the_matrix():
    """``run(online_solver(config, best))`` equals ``best`` run beside the
    experience matrix (``run_adaptive_with_history``), query for query."""
    from earm_jax.policies.adaptive_history import run_adaptive_with_history

    stream = _stream(6)
    policy = POLICIES["best"]()
    solver = ej.online_solver(_config(), policy)
    _, info = ej.run(solver, jax.random.key(0), stream)
    # run() initialises the factors with the first half of its key.
    init_key, _ = jax.random.split(jax.random.key(0))
    _, beside = run_adaptive_with_history(
        policy,
        ej.online_solver(_config(), ej.top_similarity_policy(pool_size=N)),
        init_key,
        stream.queries,
        stream.scores,
        stream.insert_time,
    )
    np.testing.assert_array_equal(np.asarray(info.anchors), np.asarray(beside.anchors))
    np.testing.assert_allclose(info.scores, beside.scores, rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(info.calls), np.asarray(beside.calls))


def test_learned_calls_without_embeddings_are_refused_naming_side():
    solver = ej.online_solver(_config(), learned_calls_policy(D, pool_size=N))
    stream = _stream(0)._replace(query_embeddings=None, memory_embeddings=None)
    with pytest.raises(ej.InputValueError, match="side"):
        ej.run(solver, jax.random.key(0), stream)


def test_a_policy_that_may_pay_more_than_the_rows_hold_is_refused():
    with pytest.raises(ej.InputValueError, match="max_budget=4"):
        ej.online_solver(_config()._replace(max_budget=4), POLICIES["best"]())


def test_something_that_is_not_a_policy_is_refused_as_a_type():
    with pytest.raises(ej.InputTypeError, match="Policy protocol"):
        ej.online_solver(_config(), {"budget": 3})


def test_learned_calls_settings_are_refused_naming_the_field():
    with pytest.raises(ej.InputValueError, match="embedding_dim"):
        learned_calls_policy(0)
    with pytest.raises(ValueError, match="head_fraction"):
        learned_calls_policy(D, head_fraction=1.5)
