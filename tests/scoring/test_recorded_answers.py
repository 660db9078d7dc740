"""Recorded answers: the file round-trips, refuses other data, and the blend
it applies at replay is the one the build's scorer applied."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from earm_jax.scoring.cache import text_sha256
from earm_jax.scoring.recorded_answers import (
    RecordedAnswers,
    RecordedConversation,
    answer_logits,
    blended_answers,
    digest_bytes,
    digest_hex,
    unblend,
)
from earm_jax.scoring.replay import ReplayScorer
from earm_jax.scoring.similarity_blend import SimilarityBlend

BLEND = SimilarityBlend(
    logit_weight=0.8, similarity_weight=3.0, shift=-1.5, embedding_model="m"
)


def _conversation(sample="26", seed=0, t=3, n=4, m=6) -> RecordedConversation:
    rng = np.random.default_rng(seed)
    candidates = np.stack([rng.permutation(m)[:n] for _ in range(t)]).astype(np.int32)
    candidates[0, -1] = -1  # padding
    logits = rng.normal(0, 3, (t, n)).astype(np.float16)
    logits[0, -1] = np.nan
    return RecordedConversation(
        sample_id=sample,
        digest=f"digest-{sample}",
        fold="fold-0",
        query_sha256=digest_bytes([text_sha256(f"q{sample}{i}") for i in range(t)]),
        memory_sha256=digest_bytes([text_sha256(f"m{sample}{i}") for i in range(m)]),
        candidates=candidates,
        logits=logits,
    )


def _answers(**changes) -> RecordedAnswers:
    fields = dict(
        setting="turns",
        scorer={
            "kind": "cross-encoder",
            "models": {"fold-0": "x"},
            "backend": "torch",
            "precision": "float32",
        },
        blends={"fold-0": BLEND},
        manifest={"job": {"limit": 0}},
        conversations={"26": _conversation("26"), "30": _conversation("30", 1)},
    )
    fields.update(changes)
    return RecordedAnswers(**fields)


def test_the_file_round_trips(tmp_path):
    answers = _answers()
    path = answers.save(tmp_path / "turns-scores.npz")
    loaded = RecordedAnswers.load(path)
    assert loaded.setting == "turns" and loaded.scorer == answers.scorer
    assert loaded.blends == answers.blends and loaded.manifest == answers.manifest
    for sample, conversation in answers.conversations.items():
        back = loaded.conversations[sample]
        assert back.digest == conversation.digest and back.fold == "fold-0"
        np.testing.assert_array_equal(back.candidates, conversation.candidates)
        np.testing.assert_array_equal(back.logits, conversation.logits)
        assert digest_hex(back.query_sha256) == digest_hex(conversation.query_sha256)
    assert not list(tmp_path.glob("*.partial"))


def test_the_file_holds_no_text(tmp_path):
    path = _answers().save(tmp_path / "a.npz")
    with np.load(path) as data:
        kinds = {data[name].dtype.kind for name in data.files}
    assert kinds <= {"u", "i", "f"}  # digests, rows, logits and a JSON header


def test_replay_answers_each_pair_by_its_digests():
    answers = _answers()
    replay = ReplayScorer.from_recorded(answers)
    conversation = answers.conversations["30"]
    t = 1
    memories = [f"m30{int(m)}" for m in conversation.candidates[t]]
    got = replay.score(f"q30{t}", memories)
    expected = 1 / (1 + np.exp(-conversation.logits[t].astype(np.float64)))
    np.testing.assert_allclose([g.value for g in got], expected, rtol=1e-12)
    assert replay.score("q300", ["not a memory"])[0].reason == "not recorded"
    assert "torch" in replay.identity.model or "torch" in replay.recorded.key()


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(1e-6, 1 - 1e-6), min_size=1, max_size=20),
    st.floats(-1, 1),
)
def test_unblend_inverts_the_blend(answers, cosine):
    p = np.asarray(answers)
    cosines = np.full_like(p, cosine)
    blended = BLEND.combine(p, cosines)
    np.testing.assert_allclose(
        unblend(blended, cosines, BLEND), answer_logits(p), rtol=1e-6, atol=1e-6
    )
    np.testing.assert_allclose(
        blended_answers(answer_logits(p), cosines, BLEND, 1.0), blended, rtol=1e-9
    )
    np.testing.assert_allclose(
        blended_answers(answer_logits(p), cosines, BLEND, 0.0), p, rtol=1e-9
    )


def test_half_a_blend_is_halfway_in_logit():
    ell, cos = np.array([-2.0, 0.5, 4.0]), np.array([0.1, 0.5, 0.9])
    half = blended_answers(ell, cos, BLEND, 0.5)
    full = BLEND.logit_weight * ell + BLEND.similarity_weight * cos + BLEND.shift
    np.testing.assert_allclose(answer_logits(half), 0.5 * ell + 0.5 * full)
    with pytest.raises(ValueError, match="blend weight"):
        blended_answers(ell, cos, BLEND, 1.5)


def test_other_data_is_refused():
    answers = _answers()
    answers.check("turns", {"26": "digest-26"})
    with pytest.raises(ValueError, match="'observations'"):
        answers.check("observations", {"26": "digest-26"})
    with pytest.raises(ValueError, match="no conversation 41"):
        answers.check("turns", {"41": "digest-41"})
    with pytest.raises(ValueError, match="26 differ"):
        answers.check("turns", {"26": "another"})


def test_bad_files_are_named(tmp_path):
    with pytest.raises(ValueError, match="do not exist"):
        RecordedAnswers.load(tmp_path / "missing.npz")
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not a zip")
    with pytest.raises(ValueError, match="not a recorded-answers file"):
        RecordedAnswers.load(junk)
    other = tmp_path / "other.npz"
    np.savez(
        other, header=np.frombuffer(json.dumps({"format": "x"}).encode(), np.uint8)
    )
    with pytest.raises(ValueError, match="format must be"):
        RecordedAnswers.load(other)
    cut = tmp_path / "cut.npz"
    path = _answers().save(tmp_path / "whole.npz")
    with np.load(path) as data:
        kept = {k: data[k] for k in data.files if k != "c1_logits"}
    np.savez(cut, **kept)
    with pytest.raises(ValueError, match="c1_logits"):
        RecordedAnswers.load(cut)


def test_shapes_are_checked_when_built():
    good = _conversation()
    with pytest.raises(ValueError, match="candidates must be"):
        RecordedConversation(**{**good.__dict__, "candidates": good.candidates[:, :2]})
    with pytest.raises(ValueError, match="past the memories"):
        RecordedConversation(**{**good.__dict__, "candidates": good.candidates + 100})


def test_free_orders_round_trip_and_an_older_file_has_none(tmp_path):
    free = SimilarityBlend(
        logit_weight=0.0,
        similarity_weight=5.0,
        shift=-9.0,
        embedding_model="m",
        coverage_weight=8.0,
    )
    loaded = RecordedAnswers.load(
        _answers(free_orders={"fold-0": free}).save(tmp_path / "free.npz")
    )
    assert loaded.free_orders == {"fold-0": free}
    assert loaded.free_order_of("30") == free
    # A file recorded before builds fitted a free order: its header lacks the key.
    older = _answers().save(tmp_path / "older.npz")
    with np.load(older) as data:
        arrays = {name: data[name] for name in data.files}
    header = json.loads(bytes(arrays["header"]).decode())
    del header["free_orders"]
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez_compressed(older, **arrays)
    loaded = RecordedAnswers.load(older)
    assert loaded.free_orders == {} and loaded.blends == {"fold-0": BLEND}
    with pytest.raises(ValueError, match="pool_order 'free'.*no free order for fold-0"):
        loaded.free_order_of("26")
