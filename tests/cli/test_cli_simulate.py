"""``earm simulate`` end to end: table, JSON shape, plot, reproducibility."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from earm_jax.cli import simulate as simulate_command
from earm_jax.eval.compare import POLICIES

SMALL = [
    "--streams",
    "3",
    "--queries",
    "25",
    "--memories",
    "300",
    "--pool-size",
    "60",
    "--rank",
    "2",
    "--resamples",
    "200",
    "--seed",
    "5",
]
CONTRASTS = {
    "mixed-observed_backfill",
    "mixed-observed",
    "observed-semantic",
    "observed_backfill-semantic",
    "mixed-semantic",
    "full-mixed",
    "mixed-bias_only",
    "mixed-top_similarity",
}


def _app() -> typer.Typer:
    app = typer.Typer()
    simulate_command.register(app)
    app.command("noop")(lambda: None)  # a second command keeps subcommand parsing
    return app


def test_simulate_writes_the_documented_json_and_a_plot(tmp_path):
    runner = CliRunner()
    out, png = tmp_path / "sim.json", tmp_path / "sim.png"
    result = runner.invoke(
        _app(), ["simulate", *SMALL, "--json", str(out), "--plot", str(png)]
    )
    assert result.exit_code == 0, result.output
    assert "not an LLM" in result.output
    # progress: one line per phase on stderr (readable in a log file too)
    try:
        printed = result.output + result.stderr
    except ValueError:  # stderr mixed into output
        printed = result.output
    assert "[simulate 1/1] policies run" in printed
    assert "[bootstrap 1/1]" in printed
    # README names and order in the table
    names = ["Semantic", "Observed-only", "Mixed (EARM)", "Top-similarity", "Full"]
    assert [result.output.index(f" {name} ") for name in names] == sorted(
        result.output.index(f" {name} ") for name in names
    )
    payload = json.loads(out.read_text())
    assert {
        "config",
        "seeds",
        "command",
        "date",
        "git_commit",
        "versions",
        "results",
        "contrasts",
        "gain_recovery",
    } <= set(payload)
    assert set(payload["results"]) == set(POLICIES)
    for row in payload["results"].values():
        assert isinstance(row["calls"], int)
        for metric in ("recall@10", "hit@10", "ndcg@10", "mrr", "recall@20"):
            low, high = row[metric]["ci"]
            assert low <= row[metric]["mean"] <= high
    assert CONTRASTS <= set(payload["contrasts"])
    assert set(payload["gain_recovery"]["recall@10"]) >= {"mean", "ci"}
    assert (
        payload["results"]["full"]["calls"] > payload["results"]["mixed"]["calls"] > 0
    )
    assert payload["results"]["semantic"]["calls"] == 0
    _check_orderings(payload)
    assert png.stat().st_size > 10_000

    again = tmp_path / "again.json"
    result = runner.invoke(
        _app(), ["simulate", "--from-json", str(out), "--json", str(again)]
    )
    assert result.exit_code == 0, result.output
    rerun = json.loads(again.read_text())
    assert rerun["results"] == payload["results"]
    assert rerun["contrasts"] == payload["contrasts"]


# Recall@10 gaps at SMALL, measured with
#   earm simulate --streams 3 --queries 25 --memories 300 --pool-size 60 \
#     --rank 2 --resamples 200 --seed 5 --json sim.json
# (Full 0.952, Top-similarity 0.893, Mixed 0.823, Observed 0.782, Semantic
# 0.707): each gap must keep at least half its measured size, and its 95% CI
# must exclude 0 (the run is seeded: a change to the code, not chance, moves it).
ORDERINGS = {  # contrast: (measured mean, least allowed mean)
    "full-mixed": (0.129, 0.06),
    "mixed-semantic": (0.117, 0.05),
    "top_similarity-semantic": (0.187, 0.09),
    "mixed-observed_backfill": (0.041, 0.02),
}


def _check_orderings(payload: dict) -> None:
    for name, (measured, least) in ORDERINGS.items():
        gap = payload["contrasts"][name]["recall@10"]
        assert gap["mean"] >= least and gap["ci"][0] > 0, (
            f"Recall@10 {name}: {gap['mean']:.3f} (CI {gap['ci']}), measured "
            f"{measured}, at least {least} with a CI above 0"
        )


def test_bad_option_is_a_clear_error():
    result = CliRunner().invoke(_app(), ["simulate", "--pool-size", "3000"])
    assert result.exit_code != 0
    assert "--pool-size=3000 exceeds --memories=2000" in str(result.exception)


def test_auto_budget_scale_pays_the_cap_and_reruns_from_json(tmp_path):
    """``--budget-scale auto``: the anchored policies' measured calls are the
    cap's share of Full's; the JSON records the scale, and ``--from-json``
    reruns it."""
    runner = CliRunner()
    out = tmp_path / "auto.json"
    args = ["simulate", *SMALL, "--call-budget", "0.2", "--budget-scale", "auto"]
    result = runner.invoke(_app(), [*args, "--json", str(out)])
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    results = payload["results"]
    share = results["top_similarity"]["calls"] / results["full"]["calls"]
    assert abs(share - 0.2) <= 0.01
    matched = payload["budget_scale_matched"]
    assert matched["share"] == share
    assert payload["config"]["budget_scale"] == matched["scale"] != 1.0
    again = tmp_path / "again.json"
    result = runner.invoke(
        _app(), ["simulate", "--from-json", str(out), "--json", str(again)]
    )
    assert result.exit_code == 0, result.output
    rerun = json.loads(again.read_text())["results"]
    assert rerun["top_similarity"]["calls"] == results["top_similarity"]["calls"]
    bad = runner.invoke(_app(), ["simulate", *SMALL, "--budget-scale", "lots"])
    assert bad.exit_code != 0
    assert "--budget-scale must be a number or auto" in str(bad.exception)


def test_a_run_inside_the_first_stage_says_why_its_rows_tie():
    """Five queries never leave the schedule's first stage (the whole pool):
    every anchored row equals Full's, and one line says why."""
    tiny = [*SMALL]
    tiny[tiny.index("--queries") + 1] = "5"
    result = CliRunner().invoke(_app(), ["simulate", *tiny, "--quiet"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    line = "why the rows tie: with --queries 5 every query is in the schedule's first"
    assert line in text
    assert text.index(line) < text.index("Paired contrasts")
    assert "raise --queries above 10" in text
