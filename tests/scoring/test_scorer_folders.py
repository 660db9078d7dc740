"""A trained-scorer build's folder and one fold's folder open the same way in
``earm locomo`` and ``earm mcp``; a fold never scores a conversation it
trained on, whichever form names it (builds of stub folds: nothing loads)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from earm_jax.cli.main import run
from earm_jax.scoring.scorer_manifest import (
    FOLD_RECORD,
    MANIFEST_FORMAT,
    free_order_from,
    open_scorer_folder,
)
from earm_jax.scoring.similarity_blend import (
    FREE_ORDER_FILE,
    SimilarityBlend,
    write_blend,
)


def _build(root: Path, folds: dict[str, tuple[str, str]], listed=None) -> Path:
    """A build whose fold ``name`` trained on conversation digest ``folds[name][0]``
    and held out ``folds[name][1]``; the manifest lists the folds in ``listed``
    (default all), and each fold has its record beside its folder, as
    ``earm train-scorer`` leaves them."""
    entries = []
    for name, (trained, held) in folds.items():
        (root / name).mkdir(parents=True)
        (root / name / "config.json").write_text("{}")
        entry = {
            "name": name,
            "folder": name,
            "trained_on": [{"id": trained, "digest": trained}],
            "held_out": [{"id": held, "digest": held}],
        }
        (root / FOLD_RECORD.format(name=name)).write_text(json.dumps(entry))
        if listed is None or name in listed:
            entries.append(entry)
    manifest = {"format": MANIFEST_FORMAT, "folds": entries, "profiles": {}}
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


FOLDS = {"fold-0": ("conv-a", "conv-b"), "fold-1": ("conv-b", "conv-a")}


def test_the_build_and_each_fold_choose_alike(tmp_path):
    build = _build(tmp_path / "build", FOLDS)
    whole = open_scorer_folder(build)
    assert whole.choose("conv-a").folder == build / "fold-1"
    assert not whole.choose("conv-a").in_sample
    for name, (trained, held) in FOLDS.items():
        fold = open_scorer_folder(build / name)
        assert fold.choose(trained).in_sample  # refused unless allowed
        assert fold.choose(held) == whole.choose(held)
        assert fold.for_new_data().folder == build / name
    # New data (an agent's memories) goes to the build's first fold.
    assert whole.for_new_data().folder == build / "fold-0"
    assert whole.for_new_data() == whole.choose("another data set")


def test_a_fold_the_stopped_build_did_not_list_refuses_by_its_record(tmp_path):
    build = _build(tmp_path / "build", FOLDS, listed={"fold-0"})
    fold = open_scorer_folder(build / "fold-1")
    assert [f["name"] for f in fold.folds] == ["fold-1"]
    assert fold.choose("conv-b").in_sample
    assert not fold.choose("conv-a").in_sample


def test_the_working_folder_inside_a_fold_is_that_fold(tmp_path, monkeypatch):
    build = _build(tmp_path / "build", FOLDS)
    monkeypatch.chdir(build / "fold-0")
    assert open_scorer_folder(".").choose("conv-a").in_sample


def test_the_free_order_of_a_build_is_the_fold_it_serves(tmp_path):
    build = _build(tmp_path / "build", FOLDS)
    orders = {
        name: SimilarityBlend(0.0, 5.0 + i, -10.0, "m", coverage_weight=9.0)
        for i, name in enumerate(FOLDS)
    }
    for name, order in orders.items():
        write_blend(build / name, order, FREE_ORDER_FILE)
    assert free_order_from(build) == orders["fold-0"]  # the fold new data gets
    assert free_order_from(build / "fold-1") == orders["fold-1"]
    assert free_order_from(build / "fold-1" / FREE_ORDER_FILE) == orders["fold-1"]
    (build / "fold-0" / FREE_ORDER_FILE).unlink()
    with pytest.raises(ValueError, match="holds no free_order.json"):
        free_order_from(build)
    (tmp_path / "bad.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="bad.json'?: not a similarity blend"):
        free_order_from(tmp_path / "bad.json")
    with pytest.raises(ValueError, match="does not exist"):
        free_order_from(tmp_path / "nowhere")


def test_earm_mcp_serves_a_build_by_its_first_fold(tmp_path, capsys):
    from earm_jax.cli.served_scorer import check_scorer, served_scorer

    build = _build(tmp_path / "build", FOLDS)
    check_scorer(build, None, None)
    scorer = served_scorer(build, None, None, "yesno")
    assert scorer.folder == build / "fold-0"
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "serving fold-0 of the trained-scorer build" in line
    assert (
        served_scorer(build / "fold-1", None, None, "yesno").folder == build / "fold-1"
    )
    assert capsys.readouterr().err == ""  # a fold named is served as named


@pytest.mark.locomo
def test_earm_locomo_refuses_a_fold_on_a_conversation_it_trained_on(
    tmp_path, locomo_path, conversations, embedding_cache_dir, capsys
):
    from earm_jax.jobs.locomo import LocomoJob
    from earm_jax.jobs.locomo_scorers import cross_encoder_scorers
    from earm_jax.locomo.training_data import conversation_digest

    by_id = {c.sample_id: conversation_digest(c) for c in conversations}
    build = _build(
        tmp_path / "build",
        {"fold-0": (by_id["26"], by_id["30"]), "fold-1": (by_id["30"], by_id["26"])},
    )
    argv = [
        "locomo",
        "--data",
        str(locomo_path),
        "--scorer",
        "cross-encoder",
        "--conversations",
        "26,30",
        "--limit",
        "2",
        "--cache-dir",
        str(embedding_cache_dir),
        "--score-cache",
        str(tmp_path / "scores.sqlite"),
        "--scorer-model",
    ]
    capsys.readouterr()
    assert run([*argv, str(build / "fold-0")]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "trained on conversation(s) 26:" in line
    assert "--allow-in-sample" in line
    # The build's folder scores each conversation by the fold that held it out.
    job = LocomoJob(
        data=str(locomo_path),
        scorer="cross-encoder",
        scorer_model=str(build),
        score_cache=str(tmp_path / "scores.sqlite"),
    )
    chosen = [c for c in conversations if c.sample_id in ("26", "30")]
    paid = cross_encoder_scorers(job, chosen, None)
    try:
        assert paid.folds == {"26": "fold-1", "30": "fold-0"}
    finally:
        paid.close()
