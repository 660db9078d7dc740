"""A pool re-sorted by another order: the same members, each with its own
answer and label, in descending key with padding last; the free order is the
cosine + word coverage blend written out by hand."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optional_extras import require_extra

from earm_jax.locomo.pool_order import free_order_key, in_free_order, reordered
from earm_jax.locomo.streams import LocomoStream, StreamArrays, build_streams
from earm_jax.scoring.similarity_blend import SimilarityBlend
from earm_jax.scoring.word_coverage import word_coverage
from earm_jax.store.embeddings import Embedder

FREE = SimilarityBlend(
    logit_weight=0.0,
    similarity_weight=5.0,
    shift=-10.0,
    embedding_model="m",
    coverage_weight=9.0,
)


def _stream(valid_counts: list[int], n: int, seed: int) -> LocomoStream:
    """Pools as the retriever makes them: descending similarity, padding last."""
    rng = np.random.default_rng(seed)
    t = len(valid_counts)
    valid = np.arange(n)[None, :] < np.array(valid_counts)[:, None]
    # Rounded so that ties occur.
    similarity = -np.sort(-np.round(rng.uniform(0, 1, (t, n)), 1), axis=1)
    arrays = StreamArrays(
        candidates=np.where(valid, rng.integers(0, 50, (t, n)), 0).astype(np.int32),
        similarity=np.where(valid, similarity, -np.inf).astype(np.float32),
        valid=valid,
        scores=np.where(valid, rng.uniform(0, 1, (t, n)), 0).astype(np.float32),
        relevant=valid & (rng.uniform(0, 1, (t, n)) < 0.2),
        insert_time=np.zeros(50, np.int32),
        num_relevant=rng.integers(0, 3, t).astype(np.int32),
        category=rng.integers(1, 5, t).astype(np.int32),
    )
    return LocomoStream(meta=None, arrays=arrays)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(0, 7), min_size=1, max_size=5),
    seed=st.integers(0, 2**16),
)
def test_a_reorder_moves_each_candidate_with_its_answer_and_label(counts, seed):
    n = 7
    stream = _stream(counts, n, seed)
    rng = np.random.default_rng(seed + 1)
    key = np.round(rng.normal(size=(len(counts), n)), 1)  # ties
    out = reordered(stream, key).arrays
    before = stream.arrays
    for t, count in enumerate(counts):
        assert out.valid[t].tolist() == [True] * count + [False] * (n - count)
        got = out.similarity[t, :count]
        assert np.all(np.diff(got) <= 0)
        # Ties keep the pool's order: a stable sort of the valid columns.
        columns = np.argsort(-key[t, :count], kind="stable")
        np.testing.assert_array_equal(got, key[t, columns].astype(np.float32))
        for name in ("candidates", "scores", "relevant"):
            np.testing.assert_array_equal(
                getattr(out, name)[t, :count], getattr(before, name)[t, columns]
            )
        assert np.all(np.isneginf(out.similarity[t, count:]))
    for name in ("num_relevant", "category", "insert_time"):
        np.testing.assert_array_equal(getattr(out, name), getattr(before, name))


def test_the_pools_own_order_is_kept():
    stream = _stream([7, 4, 0], 7, 3)
    out = reordered(stream, stream.arrays.similarity).arrays
    for field in dataclasses.fields(StreamArrays):
        np.testing.assert_array_equal(
            getattr(out, field.name), getattr(stream.arrays, field.name)
        )


def test_a_bad_key_is_refused_by_name():
    stream = _stream([3, 2], 4, 0)
    with pytest.raises(ValueError, match="key must be shaped"):
        reordered(stream, np.zeros((2, 3)))
    key = np.zeros((2, 4))
    key[1, 0] = np.nan
    with pytest.raises(ValueError, match="key must be finite"):
        reordered(stream, key)
    key[1, 0] = 0.0
    key[1, 3] = np.nan  # padding: ignored
    reordered(stream, key)


def test_the_fit_without_logits_is_the_texts_alone():
    rng = np.random.default_rng(0)
    cosine, coverage = rng.uniform(0, 1, 400), rng.uniform(0, 1, 400)
    labels = rng.uniform(0, 1, 400) < 1 / (1 + np.exp(-(4 * cosine + 6 * coverage - 6)))
    order = SimilarityBlend.fit(None, cosine, labels, "m", coverage)
    assert order.is_free and order.uses_coverage and order.pairs == 400
    from earm_jax.scoring.platt import fit_logistic

    weights = fit_logistic(np.stack([cosine, coverage], axis=1), labels)
    assert (order.similarity_weight, order.coverage_weight, order.shift) == tuple(
        weights.tolist()
    )
    assert not SimilarityBlend.fit(cosine, cosine, labels, "m").is_free


@pytest.mark.locomo
def test_the_free_order_is_the_blend_of_cosine_and_coverage(
    conversations, embedding_cache_dir
):
    require_extra("wordfreq")
    require_extra("snowballstemmer")
    stream = build_streams(
        conversations[:1], Embedder(cache_dir=embedding_cache_dir), setting="turns"
    )[0]
    arrays = stream.arrays
    key = free_order_key(stream, FREE)
    for t in (0, 5, len(arrays.valid) - 1):
        rows = arrays.candidates[t][arrays.valid[t]]
        coverage = word_coverage(
            stream.meta.query_texts[t], [stream.meta.memory_texts[m] for m in rows]
        )
        cosine = arrays.similarity[t][arrays.valid[t]].astype(np.float64)
        expected = 5.0 * cosine + 9.0 * coverage - 10.0
        np.testing.assert_allclose(key[t][arrays.valid[t]], expected, rtol=1e-12)
        assert np.all(np.isneginf(key[t][~arrays.valid[t]]))
    out = in_free_order(stream, FREE).arrays
    assert np.array_equal(out.valid, arrays.valid)
    assert np.all(np.diff(np.where(out.valid, out.similarity, -1e9), axis=1) <= 0)
    model_blend = dataclasses.replace(FREE, logit_weight=0.7)
    with pytest.raises(ValueError, match="free order: the blend weighs the model"):
        free_order_key(stream, model_blend)
