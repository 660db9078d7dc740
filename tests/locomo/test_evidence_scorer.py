"""The evidence stand-in scorer: whole-stream array form and Scorer-protocol form."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from earm_jax.locomo.data import load_locomo
from earm_jax.locomo.evidence import (
    STAND_IN_NOTE,
    EvidenceNoise,
    EvidenceScorer,
    evidence_scores,
    mapping_oracle,
    relevance_oracle,
    text_keys64,
)
from earm_jax.locomo.memories import build_memories
from earm_jax.locomo.streams import stream_arrays
from earm_jax.scoring.base import PairScore, Scorer


def random_relevant(shape: tuple[int, ...], rate: float, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).random(shape) < rate


def test_noise_free_scores_are_the_labels() -> None:
    relevant = random_relevant((7, 50), 0.2)
    scores = evidence_scores(relevant, EvidenceNoise(noise=0.0))
    assert scores.dtype == np.float32 and scores.shape == relevant.shape
    np.testing.assert_array_equal(scores, relevant.astype(np.float32))


def test_scores_are_seeded_and_clipped() -> None:
    relevant = random_relevant((20, 200), 0.1)
    knobs = EvidenceNoise(noise=0.3, seed=3)
    first = evidence_scores(relevant, knobs)
    np.testing.assert_array_equal(first, evidence_scores(relevant, knobs))
    other_seed = evidence_scores(relevant, EvidenceNoise(noise=0.3, seed=4))
    assert not np.array_equal(first, other_seed)
    assert first.min() >= 0.0 and first.max() <= 1.0
    # Noise pushes about half of each class to the clip bound.
    assert np.mean(first[relevant] == 1.0) == pytest.approx(0.5, abs=0.08)
    assert np.mean(first[~relevant] == 0.0) == pytest.approx(0.5, abs=0.03)


def test_noise_has_the_requested_spread() -> None:
    relevant = np.zeros((100, 200), dtype=bool)
    scores = evidence_scores(relevant, EvidenceNoise(noise=0.1))
    positive = scores[scores > 0]
    # Half-normal mean: noise * sqrt(2 / pi).
    assert positive.mean() == pytest.approx(0.1 * np.sqrt(2 / np.pi), rel=0.05)


def test_false_positive_and_negative_rates() -> None:
    relevant = random_relevant((200, 200), 0.3, seed=1)
    knobs = EvidenceNoise(
        noise=0.0, false_positive_rate=0.05, false_negative_rate=0.2, seed=7
    )
    scores = evidence_scores(relevant, knobs)
    assert set(np.unique(scores)) <= {0.0, 1.0}
    assert np.mean(scores[~relevant]) == pytest.approx(0.05, abs=0.005)
    assert np.mean(1.0 - scores[relevant]) == pytest.approx(0.2, abs=0.01)


def test_a_pair_score_does_not_depend_on_its_position() -> None:
    relevant = random_relevant((4, 30), 0.3)
    query_keys = text_keys64([f"query {t}" for t in range(4)]).reshape(-1, 1)
    memory_keys = text_keys64([f"memory {m}" for m in range(30)])
    knobs = EvidenceNoise(noise=0.2, false_positive_rate=0.1)
    base = evidence_scores(
        relevant, knobs, query_keys=query_keys, memory_keys=memory_keys
    )
    order = np.random.default_rng(2).permutation(30)
    permuted = evidence_scores(
        relevant[:, order], knobs, query_keys=query_keys, memory_keys=memory_keys[order]
    )
    np.testing.assert_array_equal(permuted, base[:, order])
    one_row = evidence_scores(
        relevant[2], knobs, query_keys=query_keys[2], memory_keys=memory_keys
    )
    np.testing.assert_array_equal(one_row, base[2])


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("noise", -0.1),
        ("noise", float("nan")),
        ("false_positive_rate", 1.5),
        ("false_negative_rate", -0.01),
        ("seed", 1.5),
    ],
)
def test_bad_knobs_raise_naming_the_field(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=field):
        EvidenceNoise(**{field: value})


def test_scorer_protocol_identity_and_unknown_queries() -> None:
    oracle = mapping_oracle({"Who has a cat?": {"Ann: I adopted a cat."}})
    scorer = EvidenceScorer(oracle, EvidenceNoise(noise=0.0))
    assert isinstance(scorer, Scorer)
    identity = scorer.identity
    assert identity.kind == "evidence"
    settings = dict(identity.settings)
    assert settings["noise"] == "0.0" and "not an LLM" in settings["stand_in"]
    assert (
        identity.key() != EvidenceScorer(oracle, EvidenceNoise(seed=1)).identity.key()
    )
    memories = ["Ann: I adopted a cat.", "Bob: I like jazz."]
    assert scorer.score("Who has a cat?", memories) == [
        PairScore.success(1.0),
        PairScore.success(0.0),
    ]
    unknown = scorer.score("Who plays jazz?", memories)
    assert all(not pair.ok and pair.value is None for pair in unknown)
    assert "no relevance label" in unknown[0].reason
    many = scorer.score_many([("Who has a cat?", memories[:1]), ("?", [])])
    assert many == [[PairScore.success(1.0)], []]
    assert "stand-in" in STAND_IN_NOTE and "not an LLM" in STAND_IN_NOTE


@pytest.mark.locomo
def test_online_scorer_agrees_with_the_stream_scores(locomo_path: Path) -> None:
    folder = locomo_path
    conversation = load_locomo(folder / "30.json")[0]
    memory_set = build_memories(conversation, "turns")
    rng = np.random.default_rng(0)

    def unit_rows(rows: int) -> np.ndarray:
        vectors = rng.normal(size=(rows, 16)).astype(np.float32)
        return vectors / np.linalg.norm(vectors, axis=1, keepdims=True)

    knobs = EvidenceNoise(noise=0.2, false_positive_rate=0.02, seed=5)
    arrays = stream_arrays(
        memory_set,
        unit_rows(len(memory_set.queries)),
        unit_rows(len(memory_set.memories)),
        knobs=knobs,
    )
    scorer = EvidenceScorer(relevance_oracle(memory_set), knobs)
    for t, question in enumerate(memory_set.queries):
        texts = [memory_set.memories[row].text for row in arrays.candidates[t]]
        online = scorer.score(question.question, texts)
        assert all(pair.ok for pair in online)
        values = np.array([pair.value for pair in online], dtype=np.float32)
        np.testing.assert_array_equal(values, arrays.scores[t])
    assert arrays.relevant.any()
