"""``earm locomo --scorer vllm --answer`` end to end against the real tiny servers.

The tiny random-weight LLM makes the scores and answers meaningless for quality;
this checks the protocol: every pool pair is scored once through the cache, the
seven policies run on those scores, answers are generated and judged, and a
rerun pays for nothing.
"""

from __future__ import annotations

import json

import pytest
import typer
from typer.testing import CliRunner

from earm_jax.cli import locomo as locomo_command
from earm_jax.eval.compare import POLICIES

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.locomo]

POOL = 12


def _app() -> typer.Typer:
    app = typer.Typer()
    locomo_command.register(app)
    app.command("noop")(lambda: None)
    return app


def test_locomo_with_the_vllm_scorer_and_answers(
    tiny_servers, tmp_path, locomo_path, embedding_cache_dir
):
    raw = json.loads((locomo_path / "30.json").read_text())
    raw["qa"] = [q for q in raw["qa"] if q.get("category") in (1, 2, 3, 4)][:5]
    data = tmp_path / "data"
    data.mkdir()
    (data / "30.json").write_text(json.dumps(raw))
    llm = tiny_servers.llm
    cache = tmp_path / "scores.sqlite"
    command = [
        "locomo",
        "--data",
        str(data),
        "--scorer",
        "vllm",
        "--base-url",
        llm.base_url,
        "--scorer-model",
        llm.model_name,
        "--score-cache",
        str(cache),
        "--pool-size",
        str(POOL),
        "--rank",
        "2",
        "--num-sweeps",
        "1",
        "--top-k",
        "3",
        "--resamples",
        "100",
        "--cache-dir",
        str(embedding_cache_dir),
    ]
    out = tmp_path / "first.json"
    result = CliRunner().invoke(
        _app(),
        [
            *command,
            "--json",
            str(out),
            "--answer",
            "--answer-base-url",
            llm.base_url,
            "--answer-model",
            llm.model_name,
            "--answer-limit",
            "2",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "random-weight" in result.output
    first = json.loads(out.read_text())
    counters = first["scorer_counters"]
    assert counters["failed_pairs_by_reason"] == {}
    assert counters["pairs_sent"] == 5 * POOL  # every pool pair, once
    assert first["results"]["full"]["calls"] == 5 * POOL
    answers = first["answers"]
    assert answers["questions"] == 2 and set(answers["by_policy"]) == set(POLICIES)
    for row in answers["by_policy"].values():
        assert row["graded"] + row["failed"] == 2
        if row["graded"]:
            assert 0.0 <= row["accuracy"] <= 1.0

    again = tmp_path / "again.json"
    result = CliRunner().invoke(_app(), [*command, "--json", str(again)])
    assert result.exit_code == 0, result.output
    rerun = json.loads(again.read_text())
    assert rerun["scorer_counters"]["pairs_sent"] == 0  # all from the score cache
    assert rerun["scorer_counters"]["cache_hits"] == 5 * POOL
    assert rerun["results"] == first["results"]
