"""Scorer profiles: fitted from labelled pools, drawn from in JAX, round-tripped."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from earm_jax.eval.scorer_profile import (
    fit_scorer_profile,
    profile_answers,
    profile_from_json,
    profile_to_json,
)
from earm_jax.eval.simulate import SimConfig, make_streams


def _planted(num_queries=300, pool=60, memories=400, rho_m=0.3, rho_q=0.1, seed=0):
    """Answers whose probit has a memory share rho_m and a query share rho_q;
    relevant ones sit higher, and similarity rank shifts non-relevant ones."""
    rng = np.random.default_rng(seed)
    memory_ids = np.stack(
        [rng.choice(memories, pool, replace=False) for _ in range(num_queries)]
    )
    relevant = rng.random((num_queries, pool)) < 0.05
    latent = (
        np.sqrt(rho_m) * rng.normal(size=memories)[memory_ids]
        + np.sqrt(rho_q) * rng.normal(size=num_queries)[:, None]
        + np.sqrt(1 - rho_m - rho_q) * rng.normal(size=(num_queries, pool))
    )
    u = stats.norm.cdf(latent)
    rank_shift = np.linspace(0.3, 0.0, pool)[None, :]
    scores = np.where(relevant, 0.5 + 0.5 * u, 0.6 * u * (0.5 + rank_shift))
    return scores, relevant, memory_ids


def test_fit_recovers_cell_quantiles_and_correlations():
    scores, relevant, memory_ids = _planted()
    valid = np.ones_like(relevant)
    queries = np.arange(scores.shape[0])
    profile, counts = fit_scorer_profile(
        scores, relevant, valid, memory_ids, queries, rank_edges=(0, 10, 30, 60)
    )
    table = np.asarray(profile.quantiles)
    assert table.shape == (2, 3, 21)
    cell = (~relevant)[:, 10:30]
    expected = np.quantile(scores[:, 10:30][cell], np.linspace(0, 1, 21))
    np.testing.assert_allclose(table[0, 1], expected, atol=1e-6)
    assert float(profile.memory_correlation) == pytest.approx(0.3, abs=0.06)
    assert float(profile.query_correlation) == pytest.approx(0.1, abs=0.05)
    assert sum(map(sum, counts["pairs_per_cell"])) == scores.size


def test_drawn_answers_follow_the_profile():
    scores, relevant, memory_ids = _planted(seed=1)
    profile, _ = fit_scorer_profile(
        scores,
        relevant,
        np.ones_like(relevant),
        memory_ids,
        np.arange(scores.shape[0]),
        rank_edges=(0, 10, 30, 60),
    )
    draw = jax.jit(profile_answers, static_argnums=4)
    answers = np.asarray(
        draw(jax.random.key(0), profile, relevant, memory_ids.astype(np.int32), 400)
    )
    assert answers.shape == scores.shape and np.all((answers >= 0) & (answers <= 1))
    for r, columns in [
        (False, slice(0, 10)),
        (False, slice(30, 60)),
        (True, slice(0, 60)),
    ]:
        cell = (relevant == r)[:, columns]
        levels = np.linspace(0.1, 0.9, 9)
        np.testing.assert_allclose(
            np.quantile(answers[:, columns][cell], levels),
            np.quantile(scores[:, columns][cell], levels),
            atol=0.04,
        )
    refit, _ = fit_scorer_profile(
        answers,
        relevant,
        np.ones_like(relevant),
        memory_ids,
        np.arange(scores.shape[0]),
        rank_edges=(0, 10, 30, 60),
    )
    assert float(refit.memory_correlation) == pytest.approx(
        float(profile.memory_correlation), abs=0.06
    )


def test_json_round_trip_and_errors():
    scores, relevant, memory_ids = _planted(num_queries=50)
    profile, _ = fit_scorer_profile(
        scores, relevant, np.ones_like(relevant), memory_ids, np.arange(50)
    )
    data = profile_to_json(profile, {"measured_on": "test"})
    again = profile_from_json(data)
    for left, right in zip(profile, again, strict=True):
        np.testing.assert_allclose(np.asarray(left), np.asarray(right), atol=1e-6)
    with pytest.raises(ValueError, match="format"):
        profile_from_json({**data, "format": "other"})
    with pytest.raises(ValueError, match="rank_edges"):
        profile_from_json({**data, "rank_edges": [3, 2]})
    descending = [list(np.linspace(1.0, 0.0, 21))] * 5
    broken = {**data, "quantiles": {**data["quantiles"], "relevant": descending}}
    with pytest.raises(ValueError, match="non-decreasing"):
        profile_from_json(broken)
    with pytest.raises(ValueError, match="memory_correlation"):
        profile_from_json({**data, "memory_correlation": 1.5})
    with pytest.raises(ValueError, match="relevant"):
        fit_scorer_profile(
            scores,
            np.zeros_like(relevant),
            np.ones_like(relevant),
            memory_ids,
            np.arange(50),
        )


def test_simulated_streams_take_a_profile_and_keep_the_default_without():
    scores, relevant, memory_ids = _planted(num_queries=80)
    profile, _ = fit_scorer_profile(
        scores, relevant, np.ones_like(relevant), memory_ids, np.arange(80)
    )
    config = SimConfig(num_memories=300, num_queries=20, pool_size=50)
    build = jax.jit(make_streams, static_argnums=(1, 2))
    plain = build(jax.random.key(0), config, 2)
    again = build(jax.random.key(0), config, 2, None, None)
    profiled = build(jax.random.key(0), config, 2, None, profile)
    np.testing.assert_array_equal(np.asarray(plain.scores), np.asarray(again.scores))
    np.testing.assert_array_equal(  # same streams, other answers
        np.asarray(plain.relevant), np.asarray(profiled.relevant)
    )
    answers = np.asarray(profiled.scores)
    valid = np.asarray(profiled.queries.valid)
    assert not np.allclose(answers, np.asarray(plain.scores))
    low, high = float(jnp.min(profile.quantiles)), float(jnp.max(profile.quantiles))
    assert np.all((answers[valid] >= low - 1e-6) & (answers[valid] <= high + 1e-6))
