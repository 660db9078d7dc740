"""The regime map's cells and boundary, and ``earm advise`` on a user's labelled
answers: the math against a loop written out, the CSV's errors, the verdicts."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from earm_jax.cli import main
from earm_jax.eval.regime import (
    advise,
    boundary,
    map_cell,
    point_job_fields,
    top_similarity_order,
)
from earm_jax.jobs.advise import read_answers_csv


def _pools(seed: int = 0, questions: int = 60, size: int = 40):
    """Pools in similarity order with 2 relevant candidates each, one near the
    top and one deep in the pool, where similarity cannot find it."""
    rng = np.random.default_rng(seed)
    similarity = np.sort(rng.uniform(0.0, 0.8, (questions, size)), axis=1)[:, ::-1]
    relevant = np.zeros((questions, size), bool)
    relevant[np.arange(questions), rng.integers(0, 5, questions)] = True
    relevant[np.arange(questions), rng.integers(size // 2, size, questions)] = True
    valid = np.ones((questions, size), bool)
    valid[::7, -3:] = False  # some short pools
    relevant &= valid
    return similarity, relevant, valid


def _reference_top_similarity_recall(scores, similarity, relevant, valid, share, k):
    recalls = []
    for t in range(scores.shape[0]):
        rows = np.flatnonzero(valid[t])
        by_similarity = rows[np.argsort(-similarity[t, rows], kind="stable")]
        calls = math.ceil(share * rows.size - 1e-9)
        paid = by_similarity[:calls]
        paid = paid[np.argsort(-scores[t, paid], kind="stable")]
        ranking = [*paid, *by_similarity[calls:]]
        total = relevant[t].sum()
        if total:
            recalls.append(relevant[t, ranking[:k]].sum() / total)
    return float(np.mean(recalls))


@pytest.mark.parametrize("share", [0.1, 0.25, 0.6])
def test_top_similarity_matches_a_loop_written_out(share):
    similarity, relevant, valid = _pools()
    rng = np.random.default_rng(1)
    scores = np.clip(relevant + rng.normal(0, 0.3, relevant.shape), 0, 1)
    report = advise(scores, similarity, relevant, valid, share, (0.05, 0.2), k=5)
    expected = _reference_top_similarity_recall(
        scores, similarity, relevant, valid, share, 5
    )
    assert report["recall@5"]["top_similarity"] == pytest.approx(expected)
    pool = valid.sum(axis=1)
    assert report["calls_per_query"] == pytest.approx(np.ceil(share * pool).mean())
    # The paid candidates sit above every unpaid one, in answer order.
    keys = top_similarity_order(scores, similarity, valid, np.full(len(pool), 3))
    top = np.argsort(-keys, axis=1)[:, :3]
    np.testing.assert_array_equal(np.sort(top, axis=1), np.tile([0, 1, 2], (60, 1)))


def test_a_scorer_that_finds_deep_evidence_is_told_completing_pays():
    similarity, relevant, valid = _pools()
    sharp = np.where(relevant, 0.9, 0.1)
    report = advise(sharp, similarity, relevant, valid, 0.25, (0.05, 0.2))
    assert report["verdict"] == "complete"
    assert report["recall@10"]["full"] == pytest.approx(1.0)
    assert report["full_minus_top_similarity"]["ci"][0] > 0.05
    assert report["auc"] == pytest.approx(1.0)


def test_a_scorer_that_echoes_similarity_is_told_to_score_the_top():
    similarity, relevant, valid = _pools()
    echo = np.clip(similarity + 0.1, 0, 1)
    report = advise(echo, similarity, relevant, valid, 0.25, (0.05, 0.2))
    assert report["verdict"] == "top_similarity"
    assert report["full_minus_top_similarity"]["mean"] == pytest.approx(0.0)


@pytest.mark.parametrize("share", [0.1, 0.25])
def test_the_top_of_a_free_order_matches_a_loop_written_out(share):
    """A second order of the same pools (one that knows where the deep
    evidence is): its top paid for at the same calls, against Top-similarity,
    paired by question."""
    similarity, relevant, valid = _pools()
    rng = np.random.default_rng(2)
    scores = np.clip(relevant + rng.normal(0, 0.3, relevant.shape), 0, 1)
    # A logit-scale key, far outside [0, 1], that lifts the deep evidence.
    free = 8.0 * similarity + 6.0 * relevant - 9.0 + rng.normal(0, 1, relevant.shape)

    def with_order(order, k=10):
        return advise(
            scores,
            similarity,
            relevant,
            valid,
            share,
            (0.05, 0.2),
            k=k,
            free_order=order,
        )

    report = with_order(free, k=5)
    block = report["free_order"]
    expected = _reference_top_similarity_recall(scores, free, relevant, valid, share, 5)
    assert block["recall@5"]["top_of_free_order"] == pytest.approx(expected)
    gain = block["top_of_free_order_minus_top_similarity"]
    assert gain["mean"] == pytest.approx(
        expected - report["recall@5"]["top_similarity"]
    )
    assert gain["ci"][0] > 0 and block["advice"] == "go_down_it"
    # The similarity order given as the free order changes nothing.
    same = with_order(similarity)["free_order"]
    assert same["top_of_free_order_minus_top_similarity"]["mean"] == 0.0
    assert same["advice"] == "no_difference"
    # An order that buries the evidence is told to keep the similarity order.
    buried = with_order(similarity - 5.0 * relevant)["free_order"]
    assert buried["advice"] == "keep_similarity"
    with pytest.raises(ValueError, match="free_order"):
        with_order(free[:, :3])


def test_advise_refuses_what_it_cannot_measure():
    similarity, relevant, valid = _pools()
    scores = relevant.astype(float)
    with pytest.raises(ValueError, match="call_budget"):
        advise(scores, similarity, relevant, valid, 0.0, (0.05, 0.2))
    with pytest.raises(ValueError, match="shape"):
        advise(scores[:, :5], similarity, relevant, valid, 0.25, (0.05, 0.2))
    with pytest.raises(ValueError, match="relevant"):
        advise(scores, similarity, np.zeros_like(relevant), valid, 0.25, (0.05, 0.2))


def _csv(similarity, scores, relevant, valid, groups=False) -> str:
    lines = ["query_id,candidate_rank,similarity,score,label" + (",group" * groups)]
    for t in range(similarity.shape[0]):
        for n in np.flatnonzero(valid[t]):
            cells = (float(similarity[t, n]), float(scores[t, n]), int(relevant[t, n]))
            row = f"q{t},{n + 1}," + ",".join(map(repr, cells))
            lines.append(row + (f",c{t % 3}" if groups else ""))
    return "\n".join(lines) + "\n"


def test_the_csv_gives_the_same_advice_as_the_arrays():
    similarity, relevant, valid = _pools()
    rng = np.random.default_rng(2)
    scores = np.clip(relevant * 0.6 + rng.uniform(0, 0.4, relevant.shape), 0, 1)
    answers = read_answers_csv(
        io.StringIO(_csv(similarity, scores, relevant, valid, groups=True))
    )
    np.testing.assert_array_equal(answers.valid, valid)
    np.testing.assert_array_equal(answers.relevant, relevant)
    assert sorted(set(answers.groups)) == ["c0", "c1", "c2"]
    direct = advise(scores, similarity, relevant, valid, 0.25, (0.05, 0.2))
    read = advise(
        answers.scores,
        answers.similarity,
        answers.relevant,
        answers.valid,
        0.25,
        (0.05, 0.2),
    )
    assert read["recall@10"] == direct["recall@10"]


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("query_id,candidate_rank,similarity,score\nq,1,0.5,0.5\n", "label"),
        ("query_id,candidate_rank,similarity,score,label\nq,1,0.5,1.5,1\n", "score"),
        ("query_id,candidate_rank,similarity,score,label\nq,0,0.5,0.5,1\n", "rank"),
        ("query_id,candidate_rank,similarity,score,label\nq,1,x,0.5,1\n", "similarity"),
        (
            "query_id,candidate_rank,similarity,score,label\nq,1,0.5,0.5,maybe\n",
            "label",
        ),
        (
            "query_id,candidate_rank,similarity,score,label\nq,1,0.5,0.5,1\n"
            "q,1,0.4,0.5,0\n",
            "twice",
        ),
        ("query_id,candidate_rank,similarity,score,label\n", "no rows"),
    ],
)
def test_a_bad_csv_names_the_line_and_column(text, named):
    with pytest.raises(ValueError, match=named):
        read_answers_csv(io.StringIO(text))


def test_advise_command_prints_the_verdict_and_writes_json(tmp_path, capsys):
    similarity, relevant, valid = _pools()
    path = tmp_path / "answers.csv"
    path.write_text(
        _csv(similarity, np.where(relevant, 0.9, 0.1), relevant, valid),
        encoding="utf-8",
    )
    out = tmp_path / "advice.json"
    argv = ["advise", "--scores", str(path), "--call-budget", "0.25"]
    assert main.run([*argv, "--resamples", "200", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "completing pays" in printed and "Full - Top-similarity" in printed
    assert json.loads(out.read_text())["verdict"] == "complete"
    assert main.run([*argv[:3], "--call-budget", "1.5"]) == 2
    assert "--call-budget" in capsys.readouterr().err
    bad = tmp_path / "bad.csv"
    bad.write_text("query_id,score\n", encoding="utf-8")
    assert main.run(["advise", "--scores", str(bad)]) == 2
    assert "missing column" in capsys.readouterr().err


def _payload(recall: dict[str, float], margins: dict[str, tuple]) -> dict:
    contrasts = {
        f"{policy}-top_similarity": {"recall@10": {"mean": m, "ci": [lo, hi]}}
        for policy, (m, lo, hi) in margins.items()
    }
    top = recall["top_similarity"] - recall["semantic"]
    contrasts["top_similarity-semantic"] = {
        "recall@10": {"mean": top, "ci": [top - 0.02, top + 0.02]}
    }
    return {
        "results": {
            p: {"recall@10": {"mean": r}, "calls_per_query": 10.0}
            for p, r in recall.items()
        },
        "contrasts": contrasts,
        "scorer_quality": {"auc": 0.9, "auc_similarity": 0.7},
        "num_scored_queries": 100,
    }


def test_a_cell_names_its_winner_and_whether_completion_paid():
    recall = {
        "semantic": 0.40,
        "top_similarity": 0.55,
        "mixed": 0.45,
        "best": 0.58,
        "best_side": 0.60,
        "full": 0.65,
    }
    margins = {
        "mixed": (-0.10, -0.13, -0.07),
        "best": (0.03, -0.01, 0.07),
        "best_side": (0.05, 0.01, 0.09),
    }
    cell = map_cell(_payload(recall, margins), 0.25)
    assert cell["winner"] == "best_side" and cell["pays"]
    assert cell["scorer"]["full_minus_top_similarity"] == pytest.approx(0.10)
    assert cell["margins"]["semantic"]["mean"] == pytest.approx(-0.15)
    margins["best_side"] = (0.05, -0.01, 0.09)
    assert not map_cell(_payload(recall, margins), 0.25)["pays"]
    # Learned calls count as a completing policy where the run has them.
    recall["learned_calls"] = 0.62
    margins["learned_calls"] = (0.07, 0.03, 0.11)
    cell = map_cell(_payload(recall, margins), 0.25)
    assert cell["winner"] == "learned_calls" and cell["pays"]


def test_the_map_bounds_the_room_from_both_sides():
    def cell(room, pays):
        return {"scorer": {"full_minus_top_similarity": room}, "pays": pays}

    cells = {"a": {"0.10": cell(0.12, True), "0.25": cell(0.04, False)}}
    cells["b"] = {"0.10": cell(0.08, True), "0.25": cell(0.15, False)}
    found = boundary(cells)
    assert found["smallest_room_that_paid"] == pytest.approx(0.08)
    assert found["largest_room_that_did_not_pay"] == pytest.approx(0.15)
    assert found["cells_that_paid"] == 2 and found["cells"] == 4
    assert math.isnan(
        boundary({"a": {"0.10": cell(0.1, False)}})["smallest_room_that_paid"]
    )


def test_between_the_bounds_the_advice_is_to_measure():
    similarity, relevant, valid = _pools()
    sharp = np.where(relevant, 0.9, 0.1)
    room = advise(sharp, similarity, relevant, valid, 0.25, (0.0, 1.0))
    assert room["verdict"] == "measure"
    assert room["map_bounds"]["largest_room_that_did_not_pay"] == 1.0


def test_map_points_name_their_scorer():
    assert point_job_fields("model", "f.npz") == {
        "scorer": "recorded",
        "scores": ("f.npz",),
        "mix": "",
    }
    assert point_job_fields("oracle:0.30", "f.npz")["mix"] == "oracle:0.3"
    alone = point_job_fields("blend:0", "f.npz")
    assert (alone["mix"], alone["blend_weight"]) == ("", 0.0)
    assert "blend_weight" not in point_job_fields("model", "f.npz")
    assert point_job_fields("noise:0.3") == {"scorer": "evidence", "noises": (0.3,)}
    assert point_job_fields("graded:0.5")["graded"] == 0.5
    with pytest.raises(ValueError, match="scores"):
        point_job_fields("model")
    with pytest.raises(ValueError, match="point must be"):
        point_job_fields("perfect")


def test_the_advice_bounds_are_the_committed_maps():
    """``earm advise`` judges against the map the docs show, not numbers typed
    in: the constants equal the committed map's bounds."""
    from pathlib import Path

    from earm_jax.jobs.advise import MAP_BOUNDS

    committed = Path(__file__).resolve().parents[2] / "experiments" / "results"
    cells = json.loads((committed / "regime_map" / "turns.json").read_text())["cells"]
    found = boundary(cells)
    assert 0 < found["cells_that_paid"] < found["cells"]
    expected = (
        round(found["smallest_room_that_paid"], 3),
        round(found["largest_room_that_did_not_pay"], 3),
    )
    assert MAP_BOUNDS == expected, found
