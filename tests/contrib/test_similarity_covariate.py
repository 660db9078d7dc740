"""The similarity covariate of the fold-in (earm_jax.contrib): the math
against a float64 NumPy ridge, the paper's fold-in when the covariate is flat,
causality, and the shipped solver without it."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from planted import config_for, perturb_future, planted_stream

import earm_jax as ej
from earm_jax.contrib import similarity_covariate as covariate_fold
from earm_jax.core import model as solver_model

# Slow: causality and reference checks compiled per solver; ~1 min.
pytestmark = pytest.mark.slow


def _params(rng, num_memories, rank):
    return ej.Parameters(
        global_mean=jnp.float32(rng.normal()),
        memory_bias=jnp.asarray(rng.normal(size=num_memories), jnp.float32),
        memory_factors=jnp.asarray(rng.normal(size=(num_memories, rank)), jnp.float32),
        query_bias=jnp.zeros(5, jnp.float32),
        query_factors=jnp.zeros((5, rank), jnp.float32),
    )


@pytest.mark.parametrize("seed,rank,num_anchors", [(0, 2, 7), (1, 4, 20), (2, 0, 3)])
def test_fold_in_with_similarity_matches_a_float64_ridge(seed, rank, num_anchors):
    rng = np.random.default_rng(seed)
    num_memories, pool, l2 = 40, 20, 0.1
    params = _params(rng, num_memories, rank)
    candidates = rng.choice(num_memories, pool, replace=False).astype(np.int32)
    values = rng.uniform(size=pool).astype(np.float32)
    similarity = rng.normal(size=pool).astype(np.float32)
    mask = np.zeros(pool, bool)
    mask[rng.choice(pool, num_anchors, replace=False)] = True
    usable = np.ones(pool, bool)
    covariate = solver_model.standardised_similarity(similarity, usable)
    bias, factors, weight = covariate_fold.fold_in_with_similarity(
        params,
        jnp.ones(num_memories, jnp.int32),
        candidates,
        values,
        mask,
        covariate,
        l2,
    )
    # Independent reference: z-score by hand, ridge on [1, s, u] in float64.
    s = similarity.astype(np.float64)
    s = (s - s.mean()) / s.std()
    u = np.asarray(params.memory_factors, np.float64)[candidates]
    x = np.concatenate([np.ones((pool, 1)), s[:, None], u], axis=1)[mask]
    y = (
        values.astype(np.float64)
        - float(params.global_mean)
        - np.asarray(params.memory_bias, np.float64)[candidates]
    )[mask]
    w = np.linalg.solve(x.T @ x + l2 * np.eye(x.shape[1]), x.T @ y)
    np.testing.assert_allclose(float(bias), w[0], atol=1e-4)
    np.testing.assert_allclose(float(weight), w[1], atol=1e-4)
    np.testing.assert_allclose(np.asarray(factors), w[2:], atol=1e-4)


def test_flat_similarity_gives_the_papers_fold_in():
    rng = np.random.default_rng(3)
    params = _params(rng, 30, 3)
    candidates = rng.choice(30, 12, replace=False).astype(np.int32)
    values = rng.uniform(size=12).astype(np.float32)
    mask = rng.random(12) < 0.6
    covariate = solver_model.standardised_similarity(
        np.full(12, 0.4), np.ones(12, bool)
    )
    assert np.all(np.asarray(covariate) == 0.0)
    count = jnp.ones(30, jnp.int32)
    bias, factors, weight = covariate_fold.fold_in_with_similarity(
        params, count, candidates, values, mask, covariate, 0.1
    )
    paper_bias, paper_factors = solver_model.fold_in(
        params, count, candidates, values, mask, 0.1
    )
    assert float(weight) == 0.0
    np.testing.assert_allclose(float(bias), float(paper_bias), atol=1e-6)
    np.testing.assert_allclose(
        np.asarray(factors), np.asarray(paper_factors), atol=1e-6
    )


def test_the_covariate_keeps_the_solver_causal_and_changes_the_completion():
    stream, _ = planted_stream(5, num_queries=20, noise=0.05)
    base = config_for(stream, solver="als")
    policy = ej.paper_policy(pool_size=base.pool_size)
    results = {}
    for flag in (False, True):
        build = covariate_fold.similarity_covariate_solver if flag else ej.online_solver
        solver = build(base, policy)
        run = jax.jit(functools.partial(ej.run, solver))
        _, infos = run(jax.random.key(0), stream)
        _, perturbed = run(jax.random.key(0), perturb_future(stream, 9, 7))
        for field in infos._fields:
            np.testing.assert_array_equal(
                np.asarray(getattr(infos, field))[:10],
                np.asarray(getattr(perturbed, field))[:10],
                err_msg=field,
            )
        results[flag] = infos
    # Same anchors (the covariate only changes completions), other completions.
    np.testing.assert_array_equal(results[False].anchors, results[True].anchors)
    assert not np.allclose(results[False].completed, results[True].completed)


def test_the_shipped_solver_has_no_covariate():
    # The covariate is a fold-in passed to the solver, not a config field.
    assert "similarity_covariate" not in ej.SolverConfig._fields
    stream, _ = planted_stream(0, num_queries=4)
    config = config_for(stream, solver="als")
    with pytest.raises(ValueError, match="similarity_covariate"):
        config._replace(similarity_covariate=True)
