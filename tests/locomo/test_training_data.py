"""LoCoMo as cross-encoder training data: groups, folds, digests."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from earm_jax.locomo.streams import build_streams
from earm_jax.locomo.training_data import (
    assign_folds,
    conversation_digest,
    pool_pairs,
    training_groups,
    validation_questions,
)
from earm_jax.store.embeddings import Embedder

pytestmark = pytest.mark.locomo
# The stream fixture embeds a conversation's turns with MiniLM (~20 s on 2
# cores): its tests are the slow tier's.
EMBEDS_A_CONVERSATION = pytest.mark.slow


@pytest.fixture(scope="module")
def stream(conversations, embedding_cache_dir):
    chosen = [c for c in conversations if c.sample_id == "30"]
    chosen = [dataclasses.replace(chosen[0], qa=chosen[0].qa[:12])]
    return build_streams(chosen, Embedder(cache_dir=embedding_cache_dir))[0]


@EMBEDS_A_CONVERSATION
def test_groups_hold_the_evidence_and_pool_negatives(stream):
    groups = training_groups(stream, hard_pool=5)
    relevant_rows = stream.meta.memory_set.relevant_rows
    texts = stream.meta.memory_texts
    expected = sum(len(rows) for rows in relevant_rows)
    assert len(groups) == expected > 0
    index = 0
    for t, rows in enumerate(relevant_rows):
        pool = [
            int(r)
            for r, v in zip(
                stream.arrays.candidates[t], stream.arrays.valid[t], strict=True
            )
            if v
        ]
        negatives = [texts[r] for r in pool if r not in rows]
        for row in rows:
            group = groups[index]
            index += 1
            assert group.query == stream.meta.query_texts[t]
            assert group.positive == texts[row]
            assert list(group.hard_negatives) == negatives[:5]  # most similar first
            assert list(group.other_negatives) == negatives[5:]
            assert group.positive not in group.hard_negatives + group.other_negatives
            # Each memory's cosine rides with it (for residual training).
            cosine = dict(
                zip(
                    stream.arrays.candidates[t].tolist(),
                    stream.arrays.similarity[t].tolist(),
                    strict=True,
                )
            )
            others = [r for r in pool if r not in rows]
            floor = min(cosine[r] for r in pool)
            assert group.similarities == pytest.approx(
                [cosine.get(row, floor)] + [cosine[r] for r in others]
            )


@EMBEDS_A_CONVERSATION
def test_held_back_questions_give_no_groups(stream):
    count = len(stream.meta.query_texts)
    held = validation_questions(count, 0.5, seed=3)
    assert held.sum() == round(0.5 * count)
    used = training_groups(stream, ~held)
    assert {g.query for g in used} <= {
        q for q, h in zip(stream.meta.query_texts, held, strict=True) if not h
    }
    np.testing.assert_array_equal(held, validation_questions(count, 0.5, seed=3))
    with pytest.raises(ValueError, match="fraction"):
        validation_questions(count, 1.0, seed=0)


@EMBEDS_A_CONVERSATION
def test_pool_pairs_are_the_valid_candidates(stream):
    chosen = np.zeros(len(stream.meta.query_texts), bool)
    chosen[[1, 4]] = True
    pairs = pool_pairs(stream, chosen)
    assert len(pairs.pairs) == int(stream.arrays.valid[[1, 4]].sum())
    for (t, position), (query, memory) in zip(
        pairs.positions, pairs.pairs, strict=True
    ):
        assert t in (1, 4)
        assert query == stream.meta.query_texts[t]
        assert memory == stream.meta.memory_texts[stream.arrays.candidates[t, position]]


def test_folds_are_disjoint_balanced_and_cover_everything(conversations):
    folds = assign_folds(conversations, 3)
    ids = [c.sample_id for c in conversations]
    flat = [s for fold in folds for s in fold]
    assert sorted(flat) == sorted(ids) and len(flat) == len(set(flat))
    sizes = {c.sample_id: len(c.queries()) for c in conversations}
    loads = [sum(sizes[s] for s in fold) for fold in folds]
    assert max(loads) - min(loads) <= max(sizes.values())
    assert assign_folds(conversations, 3) == folds  # deterministic
    assert assign_folds(conversations, len(ids)) == [[s] for s in ids]
    with pytest.raises(ValueError, match="folds"):
        assign_folds(conversations, len(ids) + 1)
    with pytest.raises(ValueError, match="folds"):
        assign_folds(conversations, 0)


def test_a_digest_names_the_content_not_the_id(conversations):
    first, second = conversations[0], conversations[1]
    assert conversation_digest(first) == conversation_digest(first)
    assert conversation_digest(first) != conversation_digest(second)
    renamed = dataclasses.replace(first, sample_id="another-id", qa=())
    assert conversation_digest(renamed) == conversation_digest(first)
