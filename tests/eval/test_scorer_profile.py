"""Scorer profiles: fitted from labelled pools, drawn from in JAX, round-tripped."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from scipy import stats

from earm_jax.eval.scorer_profile import (
    PROFILE_FORMAT,
    PROFILE_FORMAT_V1,
    fit_scorer_profile,
    profile_answers,
    profile_from_json,
    profile_to_json,
    standings,
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
    assert np.all((answers[valid] >= 0.0) & (answers[valid] <= 1.0))
    cell_by_cell = profile._replace(relevant_rank_quantiles=None)
    unplaced = build(jax.random.key(0), config, 2, None, cell_by_cell)
    negative = valid & ~np.asarray(profiled.relevant)
    np.testing.assert_allclose(  # standings move relevant answers only
        answers[negative], np.asarray(unplaced.scores)[negative], rtol=1e-6
    )


def _standings_reference(scores, relevant, valid):
    """Float64 loop: a relevant answer's share of its row's valid non-relevant
    answers below it, ties half."""
    out = np.full(scores.shape, np.nan)
    for t in range(scores.shape[0]):
        others = scores[t][valid[t] & ~relevant[t]]
        if others.size == 0:
            continue
        for p in np.flatnonzero(valid[t] & relevant[t]):
            below = np.sum(others < scores[t, p]) + 0.5 * np.sum(others == scores[t, p])
            out[t, p] = below / others.size
    return out


def _deep_evidence(num_queries=600, pool=60, seed=3):
    """Pools where a question's only evidence stands high even deep in the
    pool, and evidence shared with others stands lower; answers rounded to a
    coarse grid so ties occur."""
    rng = np.random.default_rng(seed)
    relevant = np.zeros((num_queries, pool), bool)
    several = rng.random(num_queries) < 0.5
    for t in range(num_queries):
        count = rng.integers(2, 5) if several[t] else 1
        relevant[t, rng.choice(pool, count, replace=False)] = True
    scores = rng.beta(2, 5, size=(num_queries, pool))
    strength = np.where(several[:, None], 0.2, 0.8)
    lifted = np.where(
        rng.random(scores.shape) < strength, 0.97, rng.random(scores.shape)
    )
    scores = np.where(relevant, np.maximum(scores, lifted), scores)
    return np.round(scores, 2), relevant


def test_standings_match_the_float64_reference_with_ties_and_padding():
    scores, relevant = _deep_evidence(num_queries=400)
    valid = np.ones_like(relevant)
    valid[::3, 50:] = False  # short pools: padding is never a competitor
    scores = np.where(valid, scores, 0.99)
    measured = standings(scores, relevant, valid)
    reference = _standings_reference(scores, relevant, valid)
    np.testing.assert_array_equal(np.isnan(measured), np.isnan(reference))
    np.testing.assert_allclose(measured, reference, equal_nan=True, atol=1e-12)
    profile, counts = fit_scorer_profile(
        scores,
        relevant,
        valid,
        np.arange(scores.size).reshape(scores.shape),
        np.arange(scores.shape[0]),
        rank_edges=(0, 20, 60),
    )
    table = np.asarray(profile.relevant_rank_quantiles)
    assert table.shape == (2, 2, 21)
    one = (relevant & valid).sum(axis=1) == 1
    cell = np.isfinite(reference) & one[:, None]
    cell[:, 20:] = False
    np.testing.assert_allclose(
        table[0, 0], np.quantile(reference[cell], np.linspace(0, 1, 21)), atol=1e-6
    )
    assert sum(map(sum, counts["ranked_relevant_per_cell"])) == int(
        np.isfinite(reference).sum()
    )


def test_drawn_standings_follow_the_measured_ones_by_group():
    scores, relevant = _deep_evidence()
    valid = np.ones_like(relevant)
    memory_ids = np.arange(scores.size).reshape(scores.shape) % 500
    profile, _ = fit_scorer_profile(
        scores,
        relevant,
        valid,
        memory_ids,
        np.arange(scores.shape[0]),
        rank_edges=(0, 20, 60),
    )
    draw = jax.jit(profile_answers, static_argnums=4)
    args = (relevant, memory_ids.astype(np.int32), 500)
    answers = np.asarray(draw(jax.random.key(1), profile, *args))
    cell_by_cell = np.asarray(
        draw(jax.random.key(1), profile._replace(relevant_rank_quantiles=None), *args)
    )
    several = relevant.sum(axis=1) > 1
    real = standings(scores, relevant, valid)
    drawn = standings(answers, relevant, valid)
    unplaced = standings(cell_by_cell, relevant, valid)
    for group in (~several, several):
        mine = np.isfinite(real) & group[:, None]
        for level in (0.5, 0.8, 0.95, 0.99):
            assert np.mean(drawn[mine] >= level) == pytest.approx(
                np.mean(real[mine] >= level), abs=0.04
            )
    # Cell by cell, the two groups' standings merge: the one-evidence group
    # stands lower than measured, which the standings put back.
    alone = np.isfinite(real) & ~several[:, None]
    assert np.mean(unplaced[alone] >= 0.95) < np.mean(real[alone] >= 0.95) - 0.1
    assert abs(np.mean(drawn[alone] >= 0.95) - np.mean(real[alone] >= 0.95)) < 0.05


def test_v1_profiles_still_read_and_draw_cell_by_cell():
    scores, relevant, memory_ids = _planted(num_queries=50)
    profile, _ = fit_scorer_profile(
        scores, relevant, np.ones_like(relevant), memory_ids, np.arange(50)
    )
    data = profile_to_json(profile, {"measured_on": "test"})
    old = {k: v for k, v in data.items() if k != "relevant_rank_quantiles"}
    old["format"] = PROFILE_FORMAT_V1
    read = profile_from_json(old)
    assert read.relevant_rank_quantiles is None
    assert profile_to_json(read, {})["format"] == PROFILE_FORMAT_V1
    with pytest.raises(ValueError, match="relevant_rank_quantiles"):
        profile_from_json(old | {"format": PROFILE_FORMAT})
    table = data["relevant_rank_quantiles"]
    broken = {**table, "several_in_pool": [[1.5] * 21] * 5}
    with pytest.raises(ValueError, match="relevant_rank_quantiles"):
        profile_from_json({**data, "relevant_rank_quantiles": broken})
