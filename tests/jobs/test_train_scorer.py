"""``earm train-scorer``'s job: cross-fitted folds, manifest, profiles, and the
fold each conversation is scored by."""

from __future__ import annotations

import json

import pytest

from earm_jax.eval.scorer_profile import profile_from_json
from earm_jax.jobs.train_scorer import TrainScorerJob
from earm_jax.locomo.training_data import conversation_digest
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


def test_a_stopped_build_keeps_its_finished_folds(
    locomo_path, embedding_cache_dir, tmp_path, monkeypatch
):
    """The manifest is written after every fold (``complete`` false until the
    last): a build stopped during fold 2 evaluates fold 1's held-out
    conversation and refuses the one no finished fold held out."""
    import earm_jax.jobs.train_scorer as train_scorer
    from earm_jax.jobs.locomo import select_conversations
    from earm_jax.jobs.train_scorer import run_train_scorer
    from earm_jax.locomo.data import load_locomo
    from earm_jax.scoring.cross_encoder_training import TrainingSettings

    real = train_scorer._train_fold
    calls = []

    def stop_at_the_second_fold(*args, **kwargs):
        calls.append(args[2])
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(train_scorer, "_train_fold", stop_at_the_second_fold)
    out = tmp_path / "scorer"
    job = TrainScorerJob(
        data=str(locomo_path),
        out=str(out),
        conversations=("26", "30"),
        limit=4,
        folds=2,
        validation_fraction=0.5,
        training=TrainingSettings(
            max_steps=1, group_size=4, hard_negatives=2, groups_per_step=1
        ),
        cache_dir=str(embedding_cache_dir),
        score_cache=str(tmp_path / "scores.sqlite"),
    )
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
