"""``earm train-scorer``'s job: cross-fitted folds, manifest, profiles, and the
fold each conversation is scored by."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from earm_jax.eval.scorer_profile import profile_from_json
from earm_jax.jobs.train_scorer_job import TrainScorerJob, stopped_backend
from earm_jax.locomo.training_data import conversation_digest
from earm_jax.scoring.cross_encoder import BUILD_BACKEND
from earm_jax.scoring.scorer_manifest import open_scorer_folder

pytestmark = [pytest.mark.slow, pytest.mark.locomo]


def test_folds_hold_out_disjoint_conversations(trained_scorer):
    folder, _, manifest = trained_scorer
    folds = manifest["folds"]
    assert len(folds) == 2
    held = [entry["id"] for fold in folds for entry in fold["held_out"]]
    assert sorted(held) == ["26", "30"]
    for fold in folds:
        trained = {entry["digest"] for entry in fold["trained_on"]}
        out = {entry["digest"] for entry in fold["held_out"]}
        assert trained and out and not trained & out
        assert fold["training"]["steps"] == 2
        assert (folder / fold["folder"] / "config.json").is_file()
        quality = fold["held_out_quality"]["turns"]
        assert quality["pairs"] > 0 and 0.0 <= quality["auc"] <= 1.0
    assert manifest["cross_fitted_quality"]["turns"]["queries"] == 8
    assert set(manifest["data"]["files"]) >= {"26.json", "30.json"}
    assert manifest["git_commit"] is None or len(manifest["git_commit"]) >= 40


def test_each_conversation_is_scored_by_the_fold_that_never_saw_it(
    trained_scorer, conversations
):
    folder, _, manifest = trained_scorer
    opened = open_scorer_folder(folder)
    by_id = {c.sample_id: c for c in conversations}
    for fold in manifest["folds"]:
        for entry in fold["held_out"]:
            choice = opened.choose(conversation_digest(by_id[entry["id"]]))
            assert choice.fold == fold["name"] and not choice.in_sample and choice.known
    unseen = opened.choose(conversation_digest(by_id["41"]))
    assert not unseen.known and not unseen.in_sample and unseen.fold == "fold-0"


def test_profile_file_loads(trained_scorer):
    folder, _, manifest = trained_scorer
    data = json.loads((folder / manifest["profiles"]["turns"]).read_text())
    profile = profile_from_json(data)
    assert profile.quantiles.shape[0] == 2
    assert "cross-fitted" in data["source"]["measured_on"]


def test_a_build_scores_with_the_fast_backend_and_says_so(trained_scorer):
    folder, _, manifest = trained_scorer
    assert manifest["job"]["scoring"]["backend"] == BUILD_BACKEND == "torch-float32"
    assert open_scorer_folder(folder).scoring_backend == BUILD_BACKEND
    assert open_scorer_folder(folder / "fold-1").scoring_backend == BUILD_BACKEND
    log = (folder.parent / "progress.log").read_text().splitlines()
    label = "torch-float32 (PyTorch, float32)"
    steps = [line for line in log if line.startswith("[fold-")]
    scoring = [line for line in steps if " scoring turns " in line]
    assert len(scoring) == 2  # one held-out conversation per fold
    for line in scoring:
        assert "scored at " in line and f"pairs/s by {label} — " in line
        assert "ETA" in line
    held_back = [line for line in log if "held-back questions' pools" in line]
    assert len(held_back) == 2 and all(line.endswith(label) for line in held_back)


def test_a_resumed_build_keeps_the_backend_it_started_with(tmp_path):
    assert stopped_backend(tmp_path) is None
    (tmp_path / "manifest.json").write_text(
        json.dumps({"job": {"scoring": {"dtype": "float32", "batch_size": 64}}})
    )
    # A build from before backends had names scored with torch.
    assert stopped_backend(tmp_path) == "torch-float32"
    (tmp_path / "manifest.json").write_text(
        json.dumps({"job": {"scoring": {"backend": "onnx-int8"}}})
    )
    assert stopped_backend(tmp_path) == "onnx-int8"


def test_an_onnx_build_without_onnxruntime_stops_before_training(
    tmp_path, locomo_path, monkeypatch
):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "onnxruntime" else real(name, *a),
    )
    job = TrainScorerJob(data=str(locomo_path), out=str(tmp_path / "o"))
    job.validate()  # the default backend needs no onnxruntime
    onnx = dataclasses.replace(
        job, scoring=dataclasses.replace(job.scoring, backend="onnx-float32")
    )
    with pytest.raises(ValueError, match=r"scoring backend.*earm_jax\[scorer\]"):
        onnx.validate()
    assert not (tmp_path / "o").exists()


def test_bad_jobs_name_the_field(tmp_path, locomo_path):
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    for field, value in [
        ("folds", 0),
        ("settings", ("sessions",)),
        ("limit", -1),
        ("validation_fraction", 1.0),
        ("out", str(tmp_path / "full")),
    ]:
        job = TrainScorerJob(data=str(locomo_path), out=str(tmp_path / "o"))
        with pytest.raises(ValueError, match=field):
            TrainScorerJob(**{**job.__dict__, field: value}).validate()
    # More layers than the base model has: refused before anything is built.
    from earm_jax.scoring.cross_encoder_training import TrainingSettings

    job = TrainScorerJob(
        data=str(locomo_path),
        out=str(tmp_path / "o"),
        training=TrainingSettings(layers=7),
    )
    with pytest.raises(ValueError, match="layers must be at most the base model's 6"):
        job.validate()
    assert not (tmp_path / "o").exists()
    dataclasses.replace(job, training=TrainingSettings(layers=6)).validate()


def test_a_build_started_before_layers_could_be_cut_resumes(tmp_path, locomo_path):
    """Its manifest's training settings have no ``layers``: it kept them all."""
    job = TrainScorerJob(data=str(locomo_path), out=str(tmp_path / "o"), resume=True)
    recorded = json.loads(json.dumps(job.to_json()))
    del recorded["training"]["layers"]
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "manifest.json").write_text(
        json.dumps({"complete": False, "job": recorded})
    )
    job.validate()
    from earm_jax.scoring.cross_encoder_training import TrainingSettings

    cut = dataclasses.replace(job, training=TrainingSettings(layers=2))
    with pytest.raises(ValueError, match="other settings.*layers"):
        cut.validate()


def test_a_build_started_before_word_coverage_resumes_without_it(tmp_path, locomo_path):
    """Its manifest has no ``word_coverage``: its blends were fitted without,
    so it resumes as such and refuses to resume with coverage."""
    job = TrainScorerJob(
        data=str(locomo_path), out=str(tmp_path / "o"), resume=True, word_coverage=False
    )
    recorded = json.loads(json.dumps(job.to_json()))
    del recorded["word_coverage"]
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "manifest.json").write_text(
        json.dumps({"complete": False, "job": recorded})
    )
    job.validate()
    with pytest.raises(ValueError, match="other settings.*word_coverage"):
        dataclasses.replace(job, word_coverage=True).validate()


def test_without_word_coverage_the_build_fits_the_blend_before(
    locomo_path, embedding_cache_dir, tmp_path
):
    """``word_coverage=False`` fits the three-number blend (written as v1), and
    the fold's scorer needs no coverage; no free order is fitted (its order
    would be the similarity's)."""
    from earm_jax.jobs.progress import Progress
    from earm_jax.jobs.train_scorer import run_train_scorer
    from earm_jax.scoring.similarity_blend import (
        BLEND_FILE,
        FREE_ORDER_FILE,
        load_blend,
    )

    job = dataclasses.replace(
        _two_fold_job(locomo_path, embedding_cache_dir, tmp_path),
        folds=1,
        word_coverage=False,
    )
    run_train_scorer(job, Progress(enabled=False))
    folder = tmp_path / "scorer" / "fold-0"
    blend = load_blend(folder)
    assert blend is not None and not blend.uses_coverage
    written = json.loads((folder / BLEND_FILE).read_text())
    assert written["format"] == "earm-similarity-blend-v1"
    assert "coverage_weight" not in written
    assert load_blend(folder, FREE_ORDER_FILE) is None
    manifest = json.loads((tmp_path / "scorer" / "manifest.json").read_text())
    assert manifest["folds"][0]["free_order"] is None


def _two_fold_job(locomo_path, embedding_cache_dir, tmp_path) -> TrainScorerJob:
    """Two one-step folds on a slice of 26 and 30, written to ``tmp_path/scorer``,
    with 40-candidate pools (the tests stop and resume builds; scoring 200
    candidates a question through the model would only make them slower)."""
    from earm_jax.scoring.cross_encoder_training import TrainingSettings

    return TrainScorerJob(
        data=str(locomo_path),
        out=str(tmp_path / "scorer"),
        conversations=("26", "30"),
        limit=4,
        pool_size=40,
        folds=2,
        validation_fraction=0.5,
        training=TrainingSettings(
            max_steps=1, group_size=4, hard_negatives=2, groups_per_step=1
        ),
        cache_dir=str(embedding_cache_dir),
        score_cache=str(tmp_path / "scores.sqlite"),
    )


def test_a_stopped_build_keeps_its_finished_folds(
    locomo_path, embedding_cache_dir, tmp_path, monkeypatch
):
    """The manifest is written after every fold (``complete`` false until the
    last): a build stopped during fold 2 evaluates fold 1's held-out
    conversation and refuses the one no finished fold held out."""
    import earm_jax.jobs.train_scorer as train_scorer
    from earm_jax.jobs.train_scorer import run_train_scorer
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations

    real = train_scorer._train_fold
    calls = []

    def stop_at_the_second_fold(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_scorer, "_train_fold", stop_at_the_second_fold)
    out = tmp_path / "scorer"
    job = _two_fold_job(locomo_path, embedding_cache_dir, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_train_scorer(job)
    folder = open_scorer_folder(out)
    assert folder.manifest["complete"] is False
    assert [fold["name"] for fold in folder.folds] == ["fold-0"]
    held = {entry["id"] for entry in folder.folds[0]["held_out"]}
    for conversation in select_conversations(load_locomo(locomo_path), ("26", "30"), 4):
        choice = folder.choose(conversation_digest(conversation))
        assert choice.known
        assert choice.in_sample == (conversation.sample_id not in held)
    # Its answers so far are recorded: only what the finished fold held out.
    from earm_jax.jobs.record_answers import RecordJob, record_answers

    recorded, missing = record_answers(
        RecordJob(
            scorer_folder=str(out),
            data=str(locomo_path),
            score_cache=job.score_cache,
            cache_dir=job.cache_dir,
        )
    )
    assert set(recorded.conversations) == held and sum(missing.values()) == 0
    assert recorded.manifest["complete"] is False

    # Resumed with other settings: refused, naming the option.
    differ = r"resume: .* other settings \(limit: \d+ -> 5;"
    with pytest.raises(ValueError, match=differ):
        dataclasses.replace(job, resume=True, limit=5).validate()
    with pytest.raises(ValueError, match="--resume"):
        job.validate()
    # Resumed as it was: fold 0 is kept (same model), fold 1 is trained.
    kept_identity = folder.folds[0]["model_identity"]
    # The data folder named relatively is the same build.
    monkeypatch.chdir(Path(locomo_path).parent)
    relative = os.path.relpath(locomo_path)
    manifest = run_train_scorer(dataclasses.replace(job, resume=True, data=relative))
    assert calls == ["fold-0", "fold-1", "fold-1"]
    assert manifest["complete"] is True
    assert [fold["model_identity"] for fold in manifest["folds"]][0] == kept_identity
    assert manifest["cross_fitted_quality"]["turns"]["queries"] == 8
    with pytest.raises(ValueError, match="already complete"):
        dataclasses.replace(job, resume=True).validate()


def test_a_build_stopped_while_scoring_is_not_trained_again(
    locomo_path, embedding_cache_dir, tmp_path, monkeypatch
):
    """A fold whose model was written (its ``fold-<k>.json``) but whose held-out pools
    were not all scored is scored on resume, not trained again."""
    import earm_jax.jobs.train_scorer as train_scorer
    from earm_jax.jobs.train_scorer import FOLD_RECORD, run_train_scorer

    real_train, real_scores = train_scorer._train_fold, train_scorer.scorer_scores
    trained, scored = [], []

    def counting_train(*args, **kwargs):
        trained.append(args[2])
        return real_train(*args, **kwargs)

    def stop_at_the_second_pool(*args, **kwargs):
        scored.append(1)
        if len(scored) == 2:
            raise KeyboardInterrupt
        return real_scores(*args, **kwargs)

    monkeypatch.setattr(train_scorer, "_train_fold", counting_train)
    monkeypatch.setattr(train_scorer, "scorer_scores", stop_at_the_second_pool)
    out = tmp_path / "scorer"
    job = _two_fold_job(locomo_path, embedding_cache_dir, tmp_path)
    with pytest.raises(KeyboardInterrupt):
        run_train_scorer(job)
    assert trained == ["fold-0", "fold-1"]
    assert (out / FOLD_RECORD.format(name="fold-1")).is_file()
    monkeypatch.setattr(train_scorer, "scorer_scores", real_scores)
    manifest = run_train_scorer(dataclasses.replace(job, resume=True))
    assert trained == ["fold-0", "fold-1"]
    assert manifest["complete"] is True
    assert [fold["name"] for fold in manifest["folds"]] == ["fold-0", "fold-1"]
    assert all(
        fold["held_out_quality"]["turns"]["pairs"] > 0 for fold in manifest["folds"]
    )


def test_held_back_quality_counts_only_the_held_back_questions(trained_scorer):
    """Only the held-back share of a training conversation is scored: the
    quality line must not count its other questions as Full missing them."""
    _, _, manifest = trained_scorer
    for fold in manifest["folds"]:
        quality = fold["held_back_quality"]["turns"]
        held_back = sum(fold["held_back_questions"].values())
        assert 0 < quality["queries"] <= held_back
        assert quality["queries"] < fold["held_out_quality"]["turns"]["queries"]


def test_a_fold_folder_given_alone_still_refuses_what_it_trained_on(
    trained_scorer, conversations
):
    """``--scorer-model build/fold-0`` (the folder ``earm mcp`` takes) is that
    fold of the build beside it: the conversations it trained on stay in
    sample, the one it held out is scored by it."""
    folder, _, manifest = trained_scorer
    by_id = {c.sample_id: c for c in conversations}
    for fold in manifest["folds"]:
        opened = open_scorer_folder(folder / fold["folder"])
        assert [f["name"] for f in opened.folds] == [fold["name"]]
        for entry in fold["held_out"]:
            choice = opened.choose(conversation_digest(by_id[entry["id"]]))
            assert not choice.in_sample
            assert choice.folder == folder / fold["folder"]
        for entry in fold["trained_on"]:
            assert opened.choose(conversation_digest(by_id[entry["id"]])).in_sample
