"""Every mistake a user can make on the command line is one line on stderr:
``error: <the problem> — <the fix>``, exit status 2, no traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from locomo_data import locomo_dir, require_locomo

from earm_jax.cli import main

# Read before the tests below remove $EARM_LOCOMO_DATA from their environment.
LOCOMO = locomo_dir()


def _error(capsys, argv: list[str]) -> str:
    status = main.run(argv)
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert status == 2, (status, captured.out, captured.err)
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("error: ")
    assert "Traceback" not in captured.err + captured.out
    return lines[0]


@pytest.fixture(autouse=True)
def _no_data_env(monkeypatch):
    monkeypatch.delenv("EARM_LOCOMO_DATA", raising=False)


def test_locomo_without_data_mentions_the_environment_variable(capsys):
    line = _error(capsys, ["locomo"])
    assert "--data" in line and "$EARM_LOCOMO_DATA" in line


def test_locomo_missing_path(capsys, tmp_path):
    line = _error(capsys, ["locomo", "--data", str(tmp_path / "missing")])
    assert "does not exist" in line and "missing" in line and "locomo10.json" in line


def test_locomo_honours_the_environment_variable(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("EARM_LOCOMO_DATA", str(tmp_path / "nowhere"))
    line = _error(capsys, ["locomo"])
    assert "$EARM_LOCOMO_DATA" in line and "nowhere" in line


def test_locomo_file_that_is_not_locomo(capsys, tmp_path):
    path = tmp_path / "other.json"
    path.write_text(json.dumps({"hello": "world"}))
    line = _error(capsys, ["locomo", "--data", str(path)])
    assert "other.json" in line and "locomo10.json" in line


def test_locomo_file_that_is_not_json(capsys, tmp_path):
    path = tmp_path / "broken.json"
    path.write_text("{not json")
    line = _error(capsys, ["locomo", "--data", str(path)])
    assert "not valid JSON" in line


def test_locomo_folder_without_json(capsys, tmp_path):
    line = _error(capsys, ["locomo", "--data", str(tmp_path)])
    assert "holds no *.json" in line


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--memories", "facts"], "--memories must be turns or observations"),
        (
            ["--scorer", "gpt"],
            "--scorer must be evidence, cross-encoder, vllm or recorded",
        ),
        (["--scorer", "vllm"], "earm serve-scorer"),
        (["--answer"], "--answer needs --answer-base-url"),
        (["--noise", "high"], "--noise must be comma-separated numbers"),
        (["--rank", "2,x"], "--rank must be comma-separated integers"),
        (["--limit", "-1"], "--limit must be >= 0"),
        (["--top-k", "0"], "ks must be positive"),
    ],
)
def test_locomo_bad_options(capsys, tmp_path, argv, expected):
    data = tmp_path / "conversations"
    data.mkdir()
    _copy_one_conversation(data)
    line = _error(capsys, ["locomo", "--data", str(data), *argv])
    assert expected in line and " — " in line


def _copy_one_conversation(folder: Path) -> None:
    require_locomo(LOCOMO)
    (folder / "26.json").write_text((LOCOMO / "26.json").read_text())


def test_locomo_unknown_conversation_lists_the_known_ones(capsys, tmp_path):
    _copy_one_conversation(tmp_path)
    line = _error(capsys, ["locomo", "--data", str(tmp_path), "--conversations", "99"])
    assert "no conversation 99" in line and "26" in line


def test_simulate_bad_setting(capsys):
    line = _error(capsys, ["simulate", "--pool-size", "3000"])
    assert "--pool-size=3000 exceeds --memories=2000" in line


def test_simulate_from_missing_json(capsys, tmp_path):
    line = _error(capsys, ["simulate", "--from-json", str(tmp_path / "x.json")])
    assert "does not exist" in line and "earm simulate --json" in line


def test_simulate_from_json_that_is_not_a_result(capsys, tmp_path):
    path = tmp_path / "x.json"
    path.write_text("[1, 2]")
    line = _error(capsys, ["simulate", "--from-json", str(path)])
    assert "is not an `earm simulate` result" in line


def test_usage_errors_are_one_line(capsys):
    line = _error(capsys, ["simulate", "--streams", "many"])
    assert "--streams" in line and "integer" in line and "earm simulate --help" in line
    line = _error(capsys, ["simulate", "--no-such-option"])
    assert "--no-such-option" in line
    line = _error(capsys, ["no-such-command"])
    assert "no-such-command" in line


def test_notebook_errors(capsys, tmp_path):
    line = _error(capsys, ["notebook", str(tmp_path / "nb.md")])
    assert "does not exist" in line
    line = _error(capsys, ["notebook", "--size", "huge"])
    assert "--size must be small or full" in line


def test_plots_without_results(capsys, tmp_path):
    line = _error(capsys, ["plots", "--results", str(tmp_path / "none")])
    assert "is not a folder" in line
    line = _error(capsys, ["plots", "--results", str(tmp_path)])
    assert "figures.json" in line and "does not exist" in line


def test_serve_scorer_checks_its_python(capsys, tmp_path):
    # this interpreter has no vLLM (the main venv never does)
    line = _error(
        capsys,
        ["serve-scorer", "--model", "m", "--device", "gpu", "--python", sys.executable],
    )
    assert "has no vLLM" in line and "EARM_VLLM_PYTHON" in line
    line = _error(
        capsys, ["serve-scorer", "--model", "m", "--python", str(tmp_path / "nopython")]
    )
    assert "has no vLLM" in line
    line = _error(capsys, ["serve-scorer", "--model", "m", "--device", "tpu"])
    assert "--device must be cpu or gpu" in line


def test_serve_scorer_default_context_length_depends_on_the_device(capsys):
    assert main.run(["serve-scorer", "--model", "m", "--dry-run"]) == 0
    assert "--max-model-len 2048" in capsys.readouterr().out
    assert (
        main.run(["serve-scorer", "--model", "m", "--device", "gpu", "--dry-run"]) == 0
    )
    assert "--max-model-len 8192" in capsys.readouterr().out


def test_locomo_unreachable_scoring_server(capsys, tmp_path):
    _copy_one_conversation(tmp_path)
    argv = ["locomo", "--data", str(tmp_path), "--limit", "2", "--scorer", "vllm"]
    argv += ["--base-url", "http://127.0.0.1:9", "--scorer-model", "m"]
    line = _error(capsys, argv)
    assert "cannot reach the scoring server" in line and "earm serve-scorer" in line


def test_plots_write_only_where_told(capsys):
    results = str(Path(__file__).resolve().parents[2] / "benchmarks" / "results")
    line = _error(capsys, ["plots", "--results", results])
    assert "writes only where told" in line and "--in-place" in line
    line = _error(capsys, ["plots", "--results", results, "--out", "x", "--in-place"])
    assert "two places" in line
