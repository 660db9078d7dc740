"""Word coverage against a plain reference, its bounds, and its use in the
similarity blend and the recorded answers."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from optional_extras import require_extra  # noqa: E402

require_extra("wordfreq")
require_extra("snowballstemmer")

from earm_jax.scoring.recorded_answers import blended_answers, unblend  # noqa: E402
from earm_jax.scoring.similarity_blend import SimilarityBlend  # noqa: E402
from earm_jax.scoring.word_coverage import (  # noqa: E402
    pool_word_coverage,
    word_coverage,
)


def reference_coverage(query: str, memory: str) -> float:
    """The module docstring's formula, written out: stems of lower-cased
    letter/digit runs, each weighted by 8 - Zipf of its heaviest word."""
    import snowballstemmer
    import wordfreq

    stem = snowballstemmer.stemmer("english").stemWord

    def weights(text: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for word in re.findall(r"[a-z0-9]+", text.lower()):
            weight = max(0.0, 8.0 - wordfreq.zipf_frequency(word, "en"))
            out[stem(word)] = max(out.get(stem(word), 0.0), weight)
        return out

    wanted, present = weights(query), weights(memory)
    total = sum(wanted.values())
    if total == 0.0:
        return 0.0
    return sum(w for s, w in wanted.items() if s in present) / total


QUERY = "When did Caroline research adoption agencies?"
MEMORIES = [
    "Caroline: I researched adoption agencies last week.",
    "Melanie: I painted a lake sunrise last year.",
    "When did you go?",
    "",
]


def test_coverage_equals_the_reference():
    got = word_coverage(QUERY, MEMORIES)
    expected = [reference_coverage(QUERY, m) for m in MEMORIES]
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_a_stem_meets_its_inflections_and_rare_words_weigh_most():
    got = word_coverage(QUERY, MEMORIES)
    # "researched" covers "research": every word but "when" and "did", which
    # the third memory covers; together they cover the whole question.
    assert got[0] > 0.75
    assert got[0] + got[2] == pytest.approx(1.0)
    # Sharing only common words covers little; an empty memory nothing.
    assert 0.0 < got[2] < 0.25
    assert got[1] == 0.0 and got[3] == 0.0
    assert word_coverage(QUERY, [QUERY])[0] == pytest.approx(1.0)


def test_a_query_with_no_words_is_covered_by_nothing():
    np.testing.assert_array_equal(word_coverage("?!", ["anything", "?!"]), [0, 0])


_TEXT = st.lists(
    st.sampled_from(list("abcdeilnorst ,.'?é") + ["Caroline", " ran ", " running "]),
    max_size=40,
).map("".join)


@settings(max_examples=60, deadline=None)
@given(query=_TEXT, memories=st.lists(_TEXT, max_size=5))
def test_coverage_is_the_reference_and_within_bounds(query, memories):
    got = word_coverage(query, memories)
    assert got.shape == (len(memories),) and got.dtype == np.float64
    assert np.all((got >= 0.0) & (got <= 1.0 + 1e-12))
    np.testing.assert_allclose(
        got, [reference_coverage(query, m) for m in memories], rtol=1e-12
    )


def test_pool_coverage_follows_candidates_and_zeroes_padding():
    memories = ["Caroline researched adoption", "a lake sunrise", "agencies"]
    candidates = np.array([[2, 0, 1], [1, 0, 0]])
    valid = np.array([[True, True, True], [True, False, False]])
    got = pool_word_coverage([QUERY, "lake"], memories, candidates, valid)
    assert got.shape == (2, 3)
    np.testing.assert_allclose(
        got[0], word_coverage(QUERY, [memories[r] for r in (2, 0, 1)])
    )
    assert got[1, 0] == pytest.approx(1.0)
    np.testing.assert_array_equal(got[1, 1:], [0.0, 0.0])


BLEND = SimilarityBlend(
    logit_weight=0.8,
    similarity_weight=9.0,
    shift=-6.0,
    embedding_model="m",
    coverage_weight=3.5,
)


def test_the_blend_adds_the_weighted_coverage_and_needs_it():
    answers = np.array([0.2, 0.7])
    cosines = np.array([0.3, 0.5])
    coverage = np.array([0.0, 1.0])
    ell = np.log(answers / (1 - answers))
    z = 0.8 * ell + 9.0 * cosines + 3.5 * coverage - 6.0
    np.testing.assert_allclose(
        BLEND.combine(answers, cosines, coverage), 1 / (1 + np.exp(-z)), rtol=1e-12
    )
    with pytest.raises(ValueError, match="coverage is required"):
        BLEND.combine(answers, cosines)


def test_recorded_answers_unblend_and_reblend_with_coverage():
    logits = np.array([[-2.0, 0.5, 3.0]])
    cosines = np.array([[0.1, 0.4, 0.6]])
    coverage = np.array([[0.0, 0.5, 1.0]])
    given_ = blended_answers(logits, cosines, BLEND, 1.0, coverage)
    np.testing.assert_allclose(
        unblend(given_, cosines, BLEND, coverage), logits, rtol=1e-9
    )
    # At weight 0 the blend and its coverage play no part.
    np.testing.assert_allclose(
        blended_answers(logits, cosines, BLEND, 0.0), 1 / (1 + np.exp(-logits))
    )


def test_a_coverage_blend_is_written_as_v2_and_read_back():
    data = BLEND.to_json()
    assert data["format"] == "earm-similarity-blend-v2"
    assert SimilarityBlend.from_json(data) == BLEND
    plain = SimilarityBlend(1.0, 2.0, 0.0, "m")
    assert plain.to_json()["format"] == "earm-similarity-blend-v1"
    assert "coverage_weight" not in plain.to_json()
    assert SimilarityBlend.from_json(plain.to_json()) == plain


def test_a_non_finite_coverage_weight_is_refused_by_name():
    with pytest.raises(ValueError, match="coverage_weight"):
        SimilarityBlend(1.0, 2.0, 0.0, "m", coverage_weight=float("nan"))
