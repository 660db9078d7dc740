"""``earm simulate --expand``: the policy ``mixed_expand`` and the expansion block."""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from earm_jax.cli import simulate as simulate_command
from earm_jax.eval.compare import POLICIES

# Slow: runs `earm simulate --expand` end to end; ~1 min.
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
]


def test_simulate_expand_json(tmp_path):
    app = typer.Typer()
    simulate_command.register(app)
    app.command("noop")(lambda: None)
    out = tmp_path / "sim.json"
    result = CliRunner().invoke(
        app, ["simulate", *SMALL, "--expand", "4", "--json", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "mixed_expand top10" in result.output
    payload = json.loads(out.read_text())
    assert payload["config"]["expand"] == 4
    assert set(payload["results"]) == set(POLICIES) | {"mixed_expand"}
    assert "mixed_expand-mixed" in payload["contrasts"]
    expansion = payload["expansion"]
    assert 0 <= expansion["@10"]["expanded_per_query"]["mean"] <= 4
    assert 0 <= expansion["slots_filled_per_query"]["mean"] <= 4
