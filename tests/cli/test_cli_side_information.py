"""``earm simulate --side-information``: the policies mixed_side, mixed_fused
and best_side, their contrasts, and mixed_side's and mixed_fused's calls equal
to Mixed's (same anchors)."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from earm_jax.cli import simulate as simulate_command
from earm_jax.cli.errors import UserError
from earm_jax.eval.compare import POLICIES

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow

SMALL = [
    "--streams",
    "2",
    "--queries",
    "20",
    "--memories",
    "300",
    "--pool-size",
    "60",
    "--rank",
    "2",
    "--resamples",
    "100",
    "--seed",
    "1",
    "--preset",
    "best",
]


def test_simulate_side_information_json(tmp_path):
    app = typer.Typer()
    simulate_command.register(app)
    app.command("noop")(lambda: None)
    out = tmp_path / "sim.json"
    result = CliRunner().invoke(
        app, ["simulate", *SMALL, "--side-information", "16", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    payload = json.loads(out.read_text())
    assert payload["config"]["side_information"] == 16
    assert set(payload["results"]) == set(POLICIES) | {
        "best",
        "mixed_side",
        "mixed_fused",
        "best_side",
        "learned_calls",
    }
    for name in (
        "mixed_side-mixed",
        "mixed_side-bias_only",
        "best_side-best",
        "learned_calls-top_similarity",
        "mixed_fused-mixed",
    ):
        assert name in payload["contrasts"]
    results = payload["results"]
    assert results["mixed_side"]["calls"] == results["mixed"]["calls"]
    assert results["mixed_fused"]["calls"] == results["mixed"]["calls"]
    # Learned calls pay Top-similarity's calls, only elsewhere in the pool.
    assert results["learned_calls"]["calls"] == results["top_similarity"]["calls"]


def test_simulate_side_information_must_be_a_width():
    app = typer.Typer()
    simulate_command.register(app)
    app.command("noop")(lambda: None)
    result = CliRunner().invoke(app, ["simulate", "--side-information", "-3"])
    assert isinstance(result.exception, UserError)
    assert "side-information must be an embedding width" in str(result.exception)
