"""A trained scorer whose manifest measured it no better than similarity is
refused, with both numbers and the fix, unless forced: by the manifest check,
``earm mcp --scorer-model`` and ``earm locomo --scorer cross-encoder``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from tiny_models import write_scorer_build  # noqa: E402

from earm_jax.cli.main import run  # noqa: E402
from earm_jax.scoring.scorer_manifest import (  # noqa: E402
    WeakScorerError,
    open_scorer_folder,
)


@pytest.mark.parametrize(("full", "semantic"), [(0.3, 0.4), (0.4, 0.4)])
def test_a_scorer_at_or_below_semantic_is_refused_unless_forced(
    tmp_path, full, semantic
):
    fold = write_scorer_build(tmp_path / "build", None, full, semantic)
    for path in (fold, fold.parent):  # the fold, or the whole build
        folder = open_scorer_folder(path)
        with pytest.raises(WeakScorerError) as caught:
            folder.check_strength(switch="--force-weak-scorer")
        message = str(caught.value)
        assert f"Full Recall@10 {full:.3f} <= Semantic {semantic:.3f}" in message
        assert "cross-fitted, turns" in message and "--force-weak-scorer" in message
        assert "\n" not in message
        folder.check_strength(force=True)


def test_a_stronger_scorer_or_an_unmeasured_folder_is_served(tmp_path):
    strong = write_scorer_build(tmp_path / "strong", None, 0.41, 0.4)
    open_scorer_folder(strong).check_strength()
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    assert open_scorer_folder(plain).recall_at_10() == []
    open_scorer_folder(plain).check_strength()


def test_without_cross_fitting_the_held_back_questions_count(tmp_path):
    fold = write_scorer_build(tmp_path / "build", None, 0.9, 0.1)
    path = fold.parent / "manifest.json"
    manifest = json.loads(path.read_text())
    del manifest["cross_fitted_quality"]
    manifest["folds"][0]["held_back_quality"] = {
        "turns": {"recall@10": {"full": 0.2, "semantic": 0.25}}
    }
    path.write_text(json.dumps(manifest))
    with pytest.raises(WeakScorerError, match="fold-0 held-back questions"):
        open_scorer_folder(fold).check_strength()


def test_earm_mcp_refuses_a_weak_scorer_before_touching_the_folder(tmp_path, capsys):
    from earm_jax.cli.served_scorer import check_scorer

    fold = write_scorer_build(tmp_path / "build", None, 0.3, 0.4)
    memory = tmp_path / "memory"
    capsys.readouterr()
    assert run(["mcp", str(memory), "--scorer-model", str(fold)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("error: ") and "0.300 <= Semantic 0.400" in line
    assert "--force-weak-scorer" in line
    assert not memory.exists()
    # Forced, the flags pass (the real server with a real model forced past
    # the check: tests/cli/test_mcp.py).
    check_scorer(fold, None, None, force_weak=True)
    # The switch is for a scorer folder only.
    assert run(["mcp", str(memory), "--force-weak-scorer"]) == 2
    assert "need a scorer" in capsys.readouterr().err


def test_earm_locomo_refuses_a_weak_scorer_unless_forced(tmp_path):
    from earm_jax.jobs.locomo import LocomoJob
    from earm_jax.jobs.locomo_scorers import cross_encoder_scorers

    fold = write_scorer_build(tmp_path / "build", None, 0.3, 0.4)
    job = LocomoJob(
        data=str(tmp_path),
        scorer="cross-encoder",
        scorer_model=str(fold.parent),
        score_cache=str(tmp_path / "scores.sqlite"),
    )
    with pytest.raises(WeakScorerError, match="--force-weak-scorer"):
        cross_encoder_scorers(job, [], None)
    forced = LocomoJob(**{**job.__dict__, "force_weak_scorer": True})
    cross_encoder_scorers(forced, [], None).close()
