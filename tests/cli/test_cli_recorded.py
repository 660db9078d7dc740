"""A build's recorded answers: ``earm record-scores`` writes them from the
build's score cache, ``earm locomo --scorer recorded`` replays them with no
model and gives the cross-encoder's own answers; ``--mix`` and ``--budget-scale
auto`` move along the axes the regime map needs."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from earm_jax.cli import main
from earm_jax.jobs.record_answers import RecordJob, record_answers
from earm_jax.jobs.train_scorer_job import RECORDED_NAME
from earm_jax.locomo.data import load_locomo
from earm_jax.locomo.evaluate import scorer_scores
from earm_jax.locomo.selection import select_conversations
from earm_jax.locomo.streams import build_streams
from earm_jax.locomo.training_data import conversation_digest
from earm_jax.scoring.cache import ScoreCache
from earm_jax.scoring.recorded_answers import RecordedAnswers, blended_answers
from earm_jax.scoring.replay import ReplayScorer
from earm_jax.scoring.scorer_manifest import model_scorer, open_scorer_folder
from earm_jax.store.embeddings import Embedder

pytestmark = [pytest.mark.slow, pytest.mark.locomo]


def _locomo(locomo_path, embedding_cache_dir, out, *extra):
    return main.run(
        [
            "locomo",
            "--data",
            str(locomo_path),
            "--conversations",
            "26,30",
            "--limit",
            "4",
            "--cache-dir",
            str(embedding_cache_dir),
            "--rank",
            "2",
            "--top-k",
            "10",
            "--resamples",
            "50",
            "--quiet",
            "--json",
            str(out),
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def recorded_file(trained_scorer, locomo_path, embedding_cache_dir, tmp_path_factory):
    folder, cache, _ = trained_scorer
    out = tmp_path_factory.mktemp("recorded") / "turns-scores.npz"
    status = main.run(
        [
            "record-scores",
            "--scorer-model",
            str(folder),
            "--data",
            str(locomo_path),
            "--score-cache",
            str(cache),
            "--cache-dir",
            str(embedding_cache_dir),
            "--out",
            str(out),
        ]
    )
    assert status == 0
    return out


def test_the_build_writes_its_recorded_answers(trained_scorer, recorded_file):
    folder, _, manifest = trained_scorer
    assert manifest["recorded_answers"] == {
        "turns": RECORDED_NAME.format(setting="turns")
    }
    built = RecordedAnswers.load(folder / manifest["recorded_answers"]["turns"])
    again = RecordedAnswers.load(recorded_file)
    assert set(built.conversations) == {"26", "30"}
    for sample, conversation in built.conversations.items():
        np.testing.assert_array_equal(
            conversation.logits, again.conversations[sample].logits
        )
    # The committed file names no folder of the machine that built it.
    header = json.dumps(built.manifest)
    assert str(folder.parent) not in header and str(folder) not in header


def test_a_profile_refit_from_the_file_is_the_one_recorded(
    recorded_file, locomo_path, embedding_cache_dir, tmp_path
):
    """``--refit-profile`` measures the profile again from the answers the file
    holds, with no model and no score cache: on a copy stripped to the v1 form
    it gives back what the build recorded, answers untouched."""
    from earm_jax.eval.scorer_profile import PROFILE_FORMAT, PROFILE_FORMAT_V1

    recorded = RecordedAnswers.load(recorded_file)
    assert recorded.profile["format"] == PROFILE_FORMAT
    old = {k: v for k, v in recorded.profile.items() if k != "relevant_rank_quantiles"}
    stripped = tmp_path / "old-scores.npz"
    dataclasses.replace(recorded, profile=old | {"format": PROFILE_FORMAT_V1}).save(
        stripped
    )
    out = tmp_path / "refit-scores.npz"
    args = ["--data", str(locomo_path), "--cache-dir", str(embedding_cache_dir)]
    argv = ["record-scores", "--refit-profile", str(stripped), *args, "--out"]
    assert main.run([*argv, str(out)]) == 0
    again = RecordedAnswers.load(out)
    assert again.profile["format"] == PROFILE_FORMAT
    for key in ("relevant_rank_quantiles", "quantiles"):
        for name, table in recorded.profile[key].items():
            np.testing.assert_allclose(again.profile[key][name], table, atol=1e-6)
    for name in ("memory_correlation", "query_correlation"):
        assert again.profile[name] == pytest.approx(recorded.profile[name], abs=1e-6)
    for sample, conversation in recorded.conversations.items():
        np.testing.assert_array_equal(
            conversation.logits, again.conversations[sample].logits
        )
    assert main.run(["record-scores", *args, "--out", str(out)]) == 2


def test_replayed_answers_are_the_cross_encoders_own(
    trained_scorer, recorded_file, conversations, embedding_cache_dir
):
    from earm_jax.scoring.cross_encoder import CrossEncoderSettings
    from earm_jax.store.embeddings import Embedder

    folder, cache_path, manifest = trained_scorer
    recorded = RecordedAnswers.load(recorded_file)
    replay = ReplayScorer.from_recorded(recorded)
    opened = open_scorer_folder(folder)
    embedder = Embedder(cache_dir=str(embedding_cache_dir))
    chosen = [c for c in conversations if c.sample_id in ("26", "30")]
    from earm_jax.jobs.locomo_recorded import blend_coverage
    from earm_jax.locomo.selection import select_conversations

    chosen = select_conversations(chosen, (), 4)
    streams = build_streams(chosen, embedder, setting="turns", pool_size=200)
    settings = CrossEncoderSettings.from_json(manifest["job"]["scoring"])
    with ScoreCache(cache_path) as cache:
        for stream, conversation in zip(streams, chosen, strict=True):
            choice = opened.choose(conversation_digest(conversation))
            scorer = model_scorer(choice.folder, settings, embedder)
            paid, _ = scorer_scores(
                stream, ReplayScorer.from_cache(cache, scorer.identity)
            )
            scorer.close()
            model, failures = scorer_scores(stream, replay)
            assert not failures
            blend = recorded.blend_of(conversation.sample_id)
            assert blend is not None and blend.uses_coverage
            again = blended_answers(
                np.log(model) - np.log1p(-model),
                stream.arrays.similarity,
                blend,
                coverage=blend_coverage(stream, blend),
            )
            valid = stream.arrays.valid
            assert np.isfinite(paid[valid]).all()
            # float16 logits: a few parts in a thousand of an answer.
            np.testing.assert_allclose(again[valid], paid[valid], atol=3e-3)


def test_locomo_replays_them_with_no_model(
    trained_scorer, recorded_file, locomo_path, embedding_cache_dir, tmp_path, capsys
):
    folder, cache, _ = trained_scorer
    capsys.readouterr()
    paid = tmp_path / "paid.json"
    assert (
        _locomo(
            locomo_path,
            embedding_cache_dir,
            paid,
            "--scorer",
            "cross-encoder",
            "--scorer-model",
            str(folder),
            "--score-cache",
            str(cache),
            # The fixture is trained for seconds: weaker than similarity.
            "--force-weak-scorer",
        )
        == 0
    )
    replayed = tmp_path / "replayed.json"
    assert (
        _locomo(
            locomo_path,
            embedding_cache_dir,
            replayed,
            "--scorer",
            "recorded",
            "--scores",
            str(recorded_file),
        )
        == 0
    )
    # Four questions a conversation never leave the first stage: said so.
    printed = " ".join(capsys.readouterr().out.split())
    assert "why the rows tie: with --limit 4 every question" in printed
    a, b = json.loads(paid.read_text()), json.loads(replayed.read_text())
    qa, qb = a["runs"][0]["scorer_quality"], b["runs"][0]["scorer_quality"]
    assert qb["auc"] == pytest.approx(qa["auc"], abs=5e-3)
    assert b["scorer_counters"] == {
        "pairs_sent": 0,
        "failed_pairs_by_reason": {},
        "cache_hits": 0,
    }
    assert "recorded answers" in b["scorer_note"]
    assert b["recorded_answers"]["turns"]["folds"] == a["scorer_folds"]


def test_the_quality_axis_reaches_the_oracle_and_similarity(
    recorded_file, locomo_path, embedding_cache_dir, tmp_path
):
    points = {}
    for mix in ("oracle:1", "similarity:1", "similarity:0.5"):
        out = tmp_path / f"{mix.replace(':', '-')}.json"
        args = ["--scorer", "recorded", "--scores", str(recorded_file), "--mix", mix]
        assert _locomo(locomo_path, embedding_cache_dir, out, *args) == 0
        points[mix] = json.loads(out.read_text())["runs"][0]["scorer_quality"]
    oracle = points["oracle:1"]
    assert oracle["auc"] == pytest.approx(1.0)
    assert oracle["recall@10"]["full"] == pytest.approx(oracle["recall@10"]["oracle"])
    similar = points["similarity:1"]
    assert similar["recall@10"]["full"] == pytest.approx(
        similar["recall@10"]["semantic"]
    )
    # The same order as similarity, up to how tied similarities are counted.
    assert similar["auc"] == pytest.approx(similar["auc_similarity"], abs=2e-3)
    half = points["similarity:0.5"]
    assert half["auc"] != pytest.approx(similar["auc"], abs=1e-9)


def test_auto_budget_scale_puts_top_similarity_at_the_cap(
    recorded_file, locomo_path, embedding_cache_dir, tmp_path
):
    for cap in ("0.15", "0.5"):
        out = tmp_path / f"auto-{cap}.json"
        args = [
            "--scorer",
            "recorded",
            "--scores",
            str(recorded_file),
            "--budget-scale",
            "auto",
            "--call-budget",
            cap,
        ]
        assert _locomo(locomo_path, embedding_cache_dir, out, *args) == 0
        payload = json.loads(out.read_text())
        calls = payload["results"]
        share = calls["top_similarity"]["calls"] / calls["full"]["calls"]
        assert share == pytest.approx(float(cap), abs=0.01)
        matched = payload["budget_scale_matched"]["turns"]
        assert matched["share"] == pytest.approx(share)


def test_mismatched_files_are_one_line(
    recorded_file, locomo_path, embedding_cache_dir, tmp_path, capsys
):
    capsys.readouterr()
    status = _locomo(
        locomo_path,
        embedding_cache_dir,
        tmp_path / "x.json",
        "--memories",
        "observations",
        "--scorer",
        "recorded",
        "--scores",
        str(recorded_file),
    )
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("error:") and "observations" in err
    assert len(err.strip().splitlines()) == 1
    status = main.run(
        [
            "locomo",
            "--data",
            str(locomo_path),
            "--conversations",
            "41",
            "--limit",
            "2",
            "--cache-dir",
            str(embedding_cache_dir),
            "--scorer",
            "recorded",
            "--scores",
            str(recorded_file),
            "--quiet",
        ]
    )
    err = capsys.readouterr().err
    assert status == 2 and "no conversation 41" in err


def test_record_scores_refuses_one_fold_or_a_plain_model(
    trained_scorer, locomo_path, tmp_path
):
    import shutil

    folder, _, _ = trained_scorer
    with pytest.raises(ValueError, match="is one fold of the build"):
        record_answers(
            RecordJob(scorer_folder=str(folder / "fold-0"), data=str(locomo_path))
        )
    plain = tmp_path / "plain"
    shutil.copytree(folder / "fold-0", plain)
    with pytest.raises(ValueError, match="not a cross-fitted build"):
        record_answers(RecordJob(scorer_folder=str(plain), data=str(locomo_path)))


def test_the_recorded_file_carries_the_builds_profile(
    trained_scorer, recorded_file, tmp_path, capsys
):
    """The profile is measured on the answers as the scorer gives them, so the
    file's equals the one the build wrote (up to the float16 the file keeps),
    and ``earm simulate`` draws from it."""
    folder, _, manifest = trained_scorer
    built = json.loads((folder / manifest["profiles"]["turns"]).read_text())
    carried = RecordedAnswers.load(recorded_file).profile
    assert carried["source"]["measured_on"] == built["source"]["measured_on"]
    assert carried["rank_edges"] == built["rank_edges"]
    for label in ("relevant", "not_relevant"):
        np.testing.assert_allclose(
            carried["quantiles"][label], built["quantiles"][label], atol=2e-3
        )
    assert abs(carried["memory_correlation"] - built["memory_correlation"]) < 0.01
    out = tmp_path / "simulated.json"
    small = ["--streams", "2", "--queries", "20", "--memories", "300"]
    status = main.run(
        [
            "simulate",
            *small,
            "--pool-size",
            "60",
            "--resamples",
            "50",
            "--quiet",
            "--scorer-profile",
            str(recorded_file),
            "--json",
            str(out),
        ]
    )
    assert status == 0, capsys.readouterr().err
    payload = json.loads(out.read_text())
    assert payload["config"]["scorer_profile"]["quantiles"] == carried["quantiles"]
    # A file recorded before profiles were kept is refused, naming the fix.
    old = RecordedAnswers.load(recorded_file)
    stripped = tmp_path / "old-scores.npz"
    dataclasses.replace(old, profile=None).save(stripped)
    capsys.readouterr()
    assert main.run(["simulate", *small, "--scorer-profile", str(stripped)]) == 2
    assert "record-scores" in capsys.readouterr().err


def test_the_labelled_answers_say_which_memory_each_candidate_is(
    recorded_file, locomo_path, conversations, embedding_cache_dir
):
    """``earm advise`` reads the answers pooled over conversations; the
    memory rows beside them keep a memory's identity (the scorer profile's
    memory effect needs it)."""
    from earm_jax.jobs.advise import recorded_labelled_answers
    from earm_jax.store.embeddings import Embedder

    answers = recorded_labelled_answers(
        str(recorded_file), str(locomo_path), str(embedding_cache_dir)
    )
    from earm_jax.locomo.selection import select_conversations

    # The questions the build recorded: its --limit 4 of each conversation.
    chosen = select_conversations(
        [c for c in conversations if c.sample_id in ("26", "30")], (), 4
    )
    embedder = Embedder(cache_dir=str(embedding_cache_dir))
    streams = build_streams(chosen, embedder, setting="turns", pool_size=200)
    assert answers.candidates.shape == answers.valid.shape
    for stream in streams:
        rows = answers.groups == stream.meta.sample_id
        width = stream.arrays.candidates.shape[1]
        np.testing.assert_array_equal(
            answers.candidates[rows][:, :width], stream.arrays.candidates
        )
        assert not answers.valid[rows][:, width:].any()


def test_policies_go_down_the_free_order_the_build_fitted(
    trained_scorer, recorded_file, locomo_path, embedding_cache_dir, tmp_path, capsys
):
    from earm_jax.eval.scorer_quality import recall_at
    from earm_jax.locomo.pool_order import free_order_key
    from earm_jax.scoring.similarity_blend import FREE_ORDER_FILE, load_blend

    folder, _, _ = trained_scorer
    recorded = RecordedAnswers.load(recorded_file)
    # The build fits each fold's free order next to its blend; the file keeps it.
    assert set(recorded.free_orders) == {"fold-0", "fold-1"}
    for fold, order in recorded.free_orders.items():
        assert order.is_free and order == load_blend(folder / fold, FREE_ORDER_FILE)
    runs = {}
    for order in ("similarity", "free"):
        out = tmp_path / f"{order}.json"
        args = ["--scorer", "recorded", "--scores", str(recorded_file)]
        assert (
            _locomo(locomo_path, embedding_cache_dir, out, *args, "--pool-order", order)
            == 0
        )
        runs[order] = json.loads(out.read_text())
    free = runs["free"]
    assert free["config"]["pool_order"] == "free"
    assert "re-sorted by the free order" in free["scorer_note"]
    by_order = {o: r["runs"][0]["scorer_quality"] for o, r in runs.items()}
    # The same answers on the same pools: Full does not move...
    assert by_order["free"]["auc"] == pytest.approx(by_order["similarity"]["auc"])
    assert by_order["free"]["recall@10"]["full"] == pytest.approx(
        by_order["similarity"]["recall@10"]["full"]
    )
    # ...and Semantic is the free order's own ranking.
    streams = build_streams(
        select_conversations(load_locomo(str(locomo_path)), ("26", "30"), 4),
        Embedder(cache_dir=str(embedding_cache_dir)),
        setting="turns",
    )
    recalls = []
    for stream in streams:
        key = free_order_key(stream, recorded.free_order_of(stream.meta.sample_id))
        a = stream.arrays
        recall = recall_at(key, a.relevant, a.valid, a.num_relevant, 10)
        recalls.append(recall[a.num_relevant > 0])
    assert by_order["free"]["recall@10"]["semantic"] == pytest.approx(
        float(np.concatenate(recalls).mean())
    )
    # A file recorded before builds fitted one is refused in one line.
    older = tmp_path / "older-scores.npz"
    dataclasses.replace(recorded, free_orders={}).save(older)
    capsys.readouterr()
    args = ["--scorer", "recorded", "--scores", str(older), "--pool-order", "free"]
    assert _locomo(locomo_path, embedding_cache_dir, tmp_path / "x.json", *args) == 2
    err = capsys.readouterr().err
    assert "pool_order 'free'" in err and len(err.strip().splitlines()) == 1
    args = ["--pool-order", "free"]
    assert _locomo(locomo_path, embedding_cache_dir, tmp_path / "y.json", *args) == 2
    assert "give free_order_from" in capsys.readouterr().err
    # Another scorer goes down the same free order, read from the file.
    stand_in = tmp_path / "stand-in.json"
    args = ["--pool-order", "free", "--free-order-from", str(recorded_file)]
    assert _locomo(locomo_path, embedding_cache_dir, stand_in, *args) == 0
    quality = json.loads(stand_in.read_text())["runs"][0]["scorer_quality"]
    assert quality["recall@10"]["semantic"] == pytest.approx(
        by_order["free"]["recall@10"]["semantic"]
    )
    assert quality["auc_similarity"] == pytest.approx(
        by_order["free"]["auc_similarity"]
    )


def test_advise_reads_the_builds_free_order_and_says_which_order_to_go_down(
    recorded_file, locomo_path, embedding_cache_dir, tmp_path, capsys
):
    from earm_jax.jobs.advise import recorded_labelled_answers
    from earm_jax.locomo.pool_order import free_order_key

    recorded = RecordedAnswers.load(recorded_file)
    answers = recorded_labelled_answers(
        str(recorded_file), str(locomo_path), str(embedding_cache_dir)
    )
    streams = build_streams(
        select_conversations(load_locomo(str(locomo_path)), ("26", "30"), 4),
        Embedder(cache_dir=str(embedding_cache_dir)),
        setting="turns",
    )
    for stream in streams:
        rows = answers.groups == stream.meta.sample_id
        key = free_order_key(stream, recorded.free_order_of(stream.meta.sample_id))
        width = key.shape[1]
        np.testing.assert_array_equal(answers.free_order[rows][:, :width], key)
        assert np.isneginf(answers.free_order[rows][:, width:]).all()
    out = tmp_path / "advice.json"
    capsys.readouterr()
    status = main.run(
        [
            "advise",
            "--scores",
            str(recorded_file),
            "--data",
            str(locomo_path),
            "--cache-dir",
            str(embedding_cache_dir),
            "--call-budget",
            "0.25",
            "--resamples",
            "50",
            "--json",
            str(out),
        ]
    )
    assert status == 0
    printed = " ".join(capsys.readouterr().out.split())
    block = json.loads(out.read_text())["free_order"]
    assert block["advice"] in ("go_down_it", "keep_similarity", "no_difference")
    assert "the build's free order (cosine + word coverage, no call)" in printed
    assert f"its top {block['recall@10']['top_of_free_order']:.3f}" in printed
    # A file without free orders gives the advice it gave before.
    older = tmp_path / "older-scores.npz"
    dataclasses.replace(recorded, free_orders={}).save(older)
    assert (
        recorded_labelled_answers(
            str(older), str(locomo_path), str(embedding_cache_dir)
        ).free_order
        is None
    )
