"""Synthetic streams: shapes, pool invariants, determinism, and what each knob does."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from earm_jax.base import Query, Stream
from earm_jax.eval.metrics import masked_mean, ranking_metrics
from earm_jax.eval.simulate import (
    SimConfig,
    SimDetails,
    SimKnobs,
    make_streams,
    make_streams_with_details,
)

# Knobs are traced: every test with the same config and S reuses one compile.
simulate = jax.jit(make_streams_with_details, static_argnums=(1, 2))
CONFIG = SimConfig(num_memories=600, num_queries=40, pool_size=60)
NUM_STREAMS = 12


def knobs(**values) -> SimKnobs:
    """Knobs with every leaf an ``(S,)`` array: one compile for all knob tests."""
    defaults = SimKnobs()._replace(**values)._asdict()
    return SimKnobs(
        **{
            name: jnp.broadcast_to(
                jnp.asarray(
                    value,
                    jnp.int32
                    if name in ("true_rank", "relevant_per_query")
                    else jnp.float32,
                ),
                (NUM_STREAMS,),
            )
            for name, value in defaults.items()
        }
    )


def check_stream(stream: Stream, details: SimDetails, config: SimConfig, num_streams):
    """Shapes, dtypes and the pool invariants of a batch of streams."""
    s, t, n, m = num_streams, config.num_queries, config.pool_size, config.num_memories
    assert isinstance(stream.queries, Query)
    expected = {
        "candidates": ((s, t, n), jnp.int32),
        "similarity": ((s, t, n), jnp.float32),
        "valid": ((s, t, n), jnp.bool_),
    }
    for name, (shape, dtype) in expected.items():
        value = getattr(stream.queries, name)
        assert value.shape == shape and value.dtype == dtype, name
    assert stream.scores.shape == (s, t, n) and stream.scores.dtype == jnp.float32
    assert stream.relevant.shape == (s, t, n) and stream.relevant.dtype == jnp.bool_
    assert stream.insert_time.shape == (s, m) and stream.insert_time.dtype == jnp.int32
    assert stream.num_relevant.shape == (s, t)
    assert stream.num_relevant.dtype == jnp.int32
    assert stream.category.shape == (s, t) and stream.category.dtype == jnp.int32
    assert details.truth.shape == (s, t, n) and details.need.shape == (s, t)

    candidates = np.asarray(stream.queries.candidates)
    similarity = np.asarray(stream.queries.similarity)
    valid = np.asarray(stream.queries.valid)
    insert_time = np.asarray(stream.insert_time)
    scores = np.asarray(stream.scores)
    relevant = np.asarray(stream.relevant)
    query_index = np.arange(t)[None, :, None]
    # Valid candidates are inserted memories, distinct within a pool, ranked by
    # descending similarity; padding sits at the tail.
    inserted_at = np.take_along_axis(insert_time[:, None, :], candidates, axis=-1)
    assert np.all(
        inserted_at[valid] <= np.broadcast_to(query_index, valid.shape)[valid]
    )
    assert np.all(np.diff(valid.astype(int), axis=-1) <= 0)
    num_inserted = (insert_time[:, None, :] <= np.arange(t)[None, :, None]).sum(-1)
    np.testing.assert_array_equal(valid.sum(-1), np.minimum(num_inserted, n))
    for row, mask in zip(candidates.reshape(-1, n), valid.reshape(-1, n), strict=True):
        assert len(np.unique(row[mask])) == mask.sum()
    both_valid = valid[..., 1:] & valid[..., :-1]
    steps = np.diff(np.where(valid, similarity, 0.0), axis=-1)
    assert np.all(steps[both_valid] <= 0)
    assert np.all(np.isfinite(similarity[valid]))
    assert np.all(similarity[~valid] == -np.inf)
    assert np.all(candidates[~valid] == 0)
    assert np.all(scores[~valid] == 0) and not relevant[~valid].any()
    assert np.all((scores >= 0) & (scores <= 1))
    assert np.all(relevant.sum(-1) <= np.asarray(stream.num_relevant))
    assert np.all(insert_time >= 0) and np.all(np.diff(insert_time, axis=-1) >= 0)


# Every example compiles a new shape (~1-2 s): few examples, no shrinking.
@settings(max_examples=3, deadline=None, phases=[Phase.explicit, Phase.generate])
@given(
    num_memories=st.integers(30, 120),
    num_queries=st.integers(1, 12),
    pool_fraction=st.floats(0.1, 1.0),
    latent_dim=st.integers(1, 6),
    num_streams=st.integers(1, 3),
    initial_fraction=st.floats(0.0, 1.0),
)
def test_shapes_dtypes_and_pool_invariants(
    num_memories, num_queries, pool_fraction, latent_dim, num_streams, initial_fraction
):
    pool_size = max(2, int(pool_fraction * num_memories))
    config = SimConfig(num_memories, num_queries, pool_size, latent_dim)
    knobs = SimKnobs(initial_fraction=initial_fraction)
    stream, details = simulate(jax.random.key(1), config, num_streams, knobs)
    check_stream(stream, details, config, num_streams)


def test_padding_when_few_memories_are_inserted():
    # 3% of 600 = 18 memories at the start, 60 slots: the first pools are padded.
    padded = knobs(initial_fraction=0.03)
    stream, details = simulate(jax.random.key(2), CONFIG, NUM_STREAMS, padded)
    check_stream(stream, details, CONFIG, NUM_STREAMS)
    valid = np.asarray(stream.queries.valid)
    assert valid[:, 0].sum(-1).tolist() == [18] * NUM_STREAMS
    assert valid[:, -1].all()


def test_deterministic_per_key_and_keys_differ():
    a = simulate(jax.random.key(3), CONFIG, NUM_STREAMS, knobs())
    b = simulate(jax.random.key(3), CONFIG, NUM_STREAMS, knobs())
    c = simulate(jax.random.key(4), CONFIG, NUM_STREAMS, knobs())
    jax.tree.map(np.testing.assert_array_equal, a, b)
    assert not np.array_equal(a[0].scores, c[0].scores)
    # Streams within one batch differ from each other too.
    assert not np.array_equal(a[0].queries.candidates[0], a[0].queries.candidates[1])


def test_stream_does_not_depend_on_num_streams():
    few = simulate(jax.random.key(5), CONFIG, 2, None)[0]
    many = simulate(jax.random.key(5), CONFIG, NUM_STREAMS, knobs())[0]

    def same(x, y):
        if jnp.issubdtype(x.dtype, jnp.floating):  # batch size may change rounding
            np.testing.assert_allclose(x, y[:2], rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(x, y[:2])

    jax.tree.map(same, few, many)


@jax.jit
def similarity_recall_at_10(stream: Stream) -> jax.Array:
    metrics = ranking_metrics(
        stream.queries.similarity,
        stream.relevant,
        k=10,
        where=stream.queries.valid,
        num_relevant=stream.num_relevant,
    )
    return masked_mean(metrics.recall, where=metrics.has_relevant)


def test_semantic_gap_lowers_similarity_recall():
    recalls = [
        float(
            similarity_recall_at_10(
                simulate(jax.random.key(6), CONFIG, NUM_STREAMS, knobs(semantic_gap=g))[
                    0
                ]
            )
        )
        for g in (0.0, 0.3, 0.6, 0.9)
    ]
    assert all(a > b + 0.03 for a, b in zip(recalls, recalls[1:], strict=False)), (
        recalls
    )


def test_no_noise_no_gap_similarity_ranks_by_truth():
    exact = knobs(semantic_gap=0.0, similarity_noise=0.0)
    stream, details = simulate(jax.random.key(7), CONFIG, NUM_STREAMS, exact)
    truth = np.where(stream.queries.valid, details.truth, -1.0)
    # Pool order (descending similarity) is descending truth.
    assert np.all(
        np.diff(truth, axis=-1)[np.asarray(stream.queries.valid)[..., 1:]] <= 1e-6
    )
    # Every inserted relevant memory makes the pool.
    np.testing.assert_array_equal(stream.relevant.sum(-1), stream.num_relevant)


def test_recurrence_repeats_needs():
    repeat_fractions, distinct_needs = [], []
    for recurrence in (0.0, 0.5, 0.9):
        _, details = simulate(
            jax.random.key(8), CONFIG, NUM_STREAMS, knobs(recurrence=recurrence)
        )
        need = np.asarray(details.need)
        is_repeat = np.asarray(details.is_repeat)
        # A repeat points at an earlier query that asked a new need.
        t = np.arange(CONFIG.num_queries)
        assert np.all(need <= t) and np.all((need == t) == ~is_repeat)
        assert np.all(np.take_along_axis(is_repeat, need, axis=-1) == False)  # noqa: E712
        repeat_fractions.append(is_repeat.mean())
        distinct_needs.append(np.mean([len(np.unique(row)) for row in need]))
    assert repeat_fractions[0] == 0.0
    assert repeat_fractions[0] < repeat_fractions[1] < repeat_fractions[2]
    assert distinct_needs[0] > distinct_needs[1] > distinct_needs[2]
    assert abs(repeat_fractions[1] - 0.5) < 0.1


def test_repeated_need_without_jitter_has_the_same_relevant_memories():
    repeated = knobs(recurrence=0.7, need_jitter=0.0, initial_fraction=1.0)
    stream, details = simulate(jax.random.key(9), CONFIG, NUM_STREAMS, repeated)
    candidates = np.asarray(stream.queries.candidates)
    truth = np.asarray(details.truth)
    need = np.asarray(details.need)
    for s in range(NUM_STREAMS):
        for t in np.flatnonzero(details.is_repeat[s])[:5]:
            first = need[s, t]
            truth_now = dict(zip(candidates[s, t], truth[s, t], strict=True))
            truth_first = dict(zip(candidates[s, first], truth[s, first], strict=True))
            for memory in set(truth_now) & set(truth_first):
                assert truth_now[memory] == pytest.approx(truth_first[memory], abs=1e-5)


def test_low_true_rank_shares_relevant_memories_across_needs():
    def distinct_relevant(rank):
        ranked = knobs(
            true_rank=rank, recurrence=0.0, semantic_gap=0.0, initial_fraction=1.0
        )
        stream, _ = simulate(jax.random.key(10), CONFIG, NUM_STREAMS, ranked)
        candidates = np.asarray(stream.queries.candidates)
        relevant = np.asarray(stream.relevant)
        return np.mean(
            [len(np.unique(c[r])) for c, r in zip(candidates, relevant, strict=True)]
        )

    assert (
        distinct_relevant(1) < 0.5 * distinct_relevant(2) < 0.5 * distinct_relevant(16)
    )


def test_relevant_per_query_is_exact_when_all_inserted():
    seven = knobs(relevant_per_query=7, initial_fraction=1.0)
    stream, _ = simulate(jax.random.key(11), CONFIG, NUM_STREAMS, seven)
    assert np.all(np.asarray(stream.num_relevant) == 7)


def test_scorer_knobs():
    exact = knobs(scorer_noise=0.0, wrong_rate=0.0, scorer_exponent=1.0)
    stream, details = simulate(jax.random.key(12), CONFIG, NUM_STREAMS, exact)
    valid = np.asarray(stream.queries.valid)
    np.testing.assert_allclose(stream.scores, details.truth, atol=1e-6)
    np.testing.assert_array_equal(
        stream.relevant, (np.asarray(details.truth) > 0.5) & valid
    )

    wrong = knobs(scorer_noise=0.0, wrong_rate=1.0)
    flipped, _ = simulate(jax.random.key(12), CONFIG, NUM_STREAMS, wrong)
    np.testing.assert_allclose(
        np.asarray(flipped.scores)[valid],
        1 - np.asarray(details.truth)[valid],
        atol=1e-6,
    )

    stingy, _ = simulate(
        jax.random.key(12),
        CONFIG,
        NUM_STREAMS,
        knobs(scorer_noise=0.0, wrong_rate=0.0, scorer_exponent=3.0),
    )
    assert np.all(np.asarray(stingy.scores) <= np.asarray(stream.scores) + 1e-6)
    # A monotone distortion keeps the noise-free ranking.
    np.testing.assert_array_equal(
        np.argsort(-np.asarray(stingy.scores), axis=-1, kind="stable")[valid.all(-1)],
        np.argsort(-np.asarray(stream.scores), axis=-1, kind="stable")[valid.all(-1)],
    )

    noisy, _ = simulate(jax.random.key(12), CONFIG, NUM_STREAMS, knobs(wrong_rate=0.2))
    error = np.abs(np.asarray(noisy.scores) - np.asarray(details.truth))[valid]
    assert 0.15 < np.mean(error > 0.5) < 0.3


def test_per_stream_knobs_match_scalar_runs():
    gaps = jnp.linspace(0.0, 0.9, NUM_STREAMS)
    per_stream = simulate(
        jax.random.key(13), CONFIG, NUM_STREAMS, knobs(semantic_gap=gaps)
    )[0]
    for s in (0, NUM_STREAMS - 1):
        scalar = simulate(
            jax.random.key(13), CONFIG, NUM_STREAMS, knobs(semantic_gap=gaps[s])
        )[0]
        jax.tree.map(
            lambda x, y, s=s: np.testing.assert_array_equal(x[s], y[s]),
            per_stream,
            scalar,
        )


def test_knob_values_do_not_recompile():
    traces = []

    def counted(key, knobs):
        traces.append(1)
        return make_streams(key, SimConfig(100, 4, 10), 2, knobs)

    jitted = jax.jit(counted)
    for gap in (0.1, 0.5, 0.9):
        jax.block_until_ready(jitted(jax.random.key(0), SimKnobs(semantic_gap=gap)))
    assert len(traces) == 1


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="pool_size"):
        make_streams(jax.random.key(0), SimConfig(num_memories=10, pool_size=20), 1)
    with pytest.raises(ValueError, match="num_streams"):
        make_streams(jax.random.key(0), CONFIG, 0)
    with pytest.raises(ValueError, match="semantic_gap"):
        make_streams(jax.random.key(0), CONFIG, 3, SimKnobs(semantic_gap=jnp.zeros(2)))
