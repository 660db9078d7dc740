"""The trained cross-encoder through the CLI: ``train-scorer``, ``locomo
--scorer cross-encoder``, ``simulate --scorer-profile``, ``serve-scorer --fold``."""

from __future__ import annotations

import json

import pytest

from earm_jax.cli import main

pytestmark = [pytest.mark.slow, pytest.mark.locomo]


def _locomo(folder, cache, locomo_path, embedding_cache_dir, out, *extra):
    return main.run(
        [
            "locomo",
            "--data",
            str(locomo_path),
            "--conversations",
            "26,30",
            "--limit",
            "4",
            "--scorer",
            "cross-encoder",
            "--scorer-model",
            str(folder),
            "--score-cache",
            str(cache),
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
            # The fixture is trained for seconds: weaker than similarity.
            "--force-weak-scorer",
            *extra,
        ]
    )


def test_locomo_scores_each_conversation_with_its_fold_and_pays_once(
    trained_scorer, locomo_path, embedding_cache_dir, tmp_path
):
    folder, cache, manifest = trained_scorer
    out = tmp_path / "paper.json"
    assert _locomo(folder, cache, locomo_path, embedding_cache_dir, out) == 0
    payload = json.loads(out.read_text())
    # Training scored the held-out pools into the same cache, under the same
    # identity (the backend its manifest records): the evaluation pays for
    # nothing.
    assert payload["config"]["scorer_backend"] == manifest["job"]["scoring"]["backend"]
    assert payload["scorer_counters"]["pairs_sent"] == 0
    assert payload["scorer_counters"]["cache_hits"] > 0
    held = {e["id"]: f["name"] for f in manifest["folds"] for e in f["held_out"]}
    assert payload["scorer_folds"] == held
    quality = payload["runs"][0]["scorer_quality"]
    assert quality["queries"] == 8 and quality["auc"] is not None
    assert set(quality["recall@10"]) >= {"full", "semantic", "oracle"}
    assert "reliability" in quality and "by_category" in quality
    assert "cross-encoder" in payload["scorer_note"]
    best = tmp_path / "best.json"
    assert (
        _locomo(
            folder, cache, locomo_path, embedding_cache_dir, best, "--preset", "best"
        )
        == 0
    )
    payload = json.loads(best.read_text())
    assert payload["scorer_counters"]["pairs_sent"] == 0
    assert "best" in payload["results"]


def test_a_conversation_the_model_trained_on_is_refused(
    locomo_path, embedding_cache_dir, tmp_path, capsys
):
    folder = tmp_path / "one-fold"
    cache = tmp_path / "scores.sqlite"
    status = main.run(
        [
            "train-scorer",
            "--data",
            str(locomo_path),
            "--conversations",
            "30",
            "--limit",
            "3",
            "--max-steps",
            "1",
            "--group-size",
            "4",
            "--hard-negatives",
            "1",
            "--layers",
            "2",
            "--warmup-fraction",
            "0.3",
            "--hardest-share",
            "0.5",
            "--out",
            str(folder),
            "--cache-dir",
            str(embedding_cache_dir),
            "--score-cache",
            str(cache),
            "--quiet",
        ]
    )
    assert status == 0
    manifest = json.loads((folder / "manifest.json").read_text())
    assert (
        len(manifest["folds"]) == 1
        and "profile-turns.json" in manifest["profiles"].values()
    )
    # --layers 2: the fold is MiniLM's first 2 layers, and the manifest says so.
    assert manifest["job"]["training"]["layers"] == 2
    assert manifest["job"]["training"]["warmup_fraction"] == 0.3
    assert manifest["job"]["training"]["hardest_share"] == 0.5
    fold = json.loads((folder / "fold-0" / "config.json").read_text())
    assert fold["num_hidden_layers"] == 2
    capsys.readouterr()
    out = tmp_path / "x.json"
    args = ["--conversations", "30", "--limit", "3"]
    status = main.run(
        [
            "locomo",
            "--data",
            str(locomo_path),
            *args,
            "--scorer",
            "cross-encoder",
            "--scorer-model",
            str(folder),
            "--score-cache",
            str(cache),
            "--cache-dir",
            str(embedding_cache_dir),
            "--quiet",
            "--json",
            str(out),
        ]
    )
    err = capsys.readouterr().err
    assert status == 2
    assert err.startswith("error:") and "30" in err and "--allow-in-sample" in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


def test_train_scorer_mistakes_are_one_line(locomo_path, tmp_path, capsys):
    full = tmp_path / "full"
    full.mkdir()
    (full / "x").write_text("x")
    cases = [
        (["--folds", "0"], "folds"),
        (["--memories", "sessions"], "settings"),
        (["--conversations", "99"], "99"),
        (["--precision", "half"], "precision"),
        (["--layers", "7"], "layers"),
        (["--layers", "-1"], "layers"),
        (["--warmup-fraction", "1.5"], "warmup_fraction"),
        (["--hardest-share", "0"], "hardest_share"),
    ]
    for extra, word in cases:
        status = main.run(
            [
                "train-scorer",
                "--data",
                str(locomo_path),
                "--out",
                str(tmp_path / "o"),
                *extra,
            ]
        )
        err = capsys.readouterr().err
        assert status == 2 and err.startswith("error:") and word in err, (extra, err)
        assert not (tmp_path / "o").exists(), extra
    status = main.run(["train-scorer", "--data", str(locomo_path), "--out", str(full)])
    assert status == 2 and "not an empty folder" in capsys.readouterr().err


def test_simulate_draws_answers_from_the_measured_profile(
    trained_scorer, tmp_path, capsys
):
    folder, _, manifest = trained_scorer
    profile = folder / manifest["profiles"]["turns"]
    out = tmp_path / "sim.json"
    small = [
        "--streams",
        "2",
        "--queries",
        "20",
        "--memories",
        "300",
        "--pool-size",
        "60",
    ]
    status = main.run(
        [
            "simulate",
            *small,
            "--rank",
            "2",
            "--resamples",
            "50",
            "--quiet",
            "--scorer-profile",
            str(profile),
            "--json",
            str(out),
        ]
    )
    assert status == 0, capsys.readouterr().err
    payload = json.loads(out.read_text())
    assert payload["config"]["scorer_profile"]["format"] == "earm-scorer-profile-v2"
    assert "profile" in payload["scorer"]
    rerun = tmp_path / "again.json"
    assert (
        main.run(["simulate", "--from-json", str(out), "--quiet", "--json", str(rerun)])
        == 0
    )
    again = json.loads(rerun.read_text())
    assert again["results"]["mixed"] == payload["results"]["mixed"]
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "earm-scorer-profile-v1", "rank_edges": [1]}))
    capsys.readouterr()
    assert main.run(["simulate", *small, "--scorer-profile", str(bad)]) == 2
    assert "rank_edges" in capsys.readouterr().err


def test_serve_scorer_serves_one_fold_with_the_pooling_runner(trained_scorer, capsys):
    folder, _, _ = trained_scorer
    assert main.run(["serve-scorer", "--model", str(folder), "--dry-run"]) == 2
    assert "--fold" in capsys.readouterr().err
    assert (
        main.run(
            ["serve-scorer", "--model", str(folder), "--fold", "fold-1", "--dry-run"]
        )
        == 0
    )
    command = capsys.readouterr().out
    assert str(folder / "fold-1") in command
    assert "--runner pooling" in command and "--max-model-len 256" in command
    assert (
        main.run(
            ["serve-scorer", "--model", str(folder), "--fold", "fold-9", "--dry-run"]
        )
        == 2
    )
