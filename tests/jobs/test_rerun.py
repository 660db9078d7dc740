"""Rerunning a result JSON's recorded command: the process it builds, and
``earm results --verify`` end to end on a table whose source a small script
writes (a rerun that reproduces passes; a moved number fails, named)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from earm_jax.cli import main
from earm_jax.jobs.rerun import RerunError, rerun_argv, table_differences
from earm_jax.jobs.results_tables import read_table_list

PY = "python"


def test_earm_commands_write_to_the_fresh_file_and_drop_plots():
    argv = rerun_argv(
        "earm locomo --data ../d --json benchmarks/results/x.json --plot x.png -q",
        Path("/t/fresh.json"),
        Path("."),
        python=PY,
        replace={"--data": "/abs/d"},
    )
    assert argv == [
        PY, "-m", "earm_jax.cli.main", "locomo", "--data", "/abs/d",
        "--json", "/t/fresh.json", "-q",
    ]  # fmt: skip


def test_equals_forms_and_scripts_found_in_their_folder(tmp_path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "q.py").write_text("")
    argv = rerun_argv(
        "q.py --data ../d --out=benchmarks/results/q.json",
        Path("/t/f.json"),
        tmp_path,
        python=PY,
    )
    assert argv == [PY, "benchmarks/q.py", "--data", "../d", "--out", "/t/f.json"]


def test_a_script_that_records_no_output_option_is_pointed_away_from_the_repo(
    tmp_path,
):
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "e.py").write_text("")
    argv = rerun_argv(
        "python experiments/e.py --n 3", Path("/t/f.json"), tmp_path, python=PY
    )
    assert argv == [PY, "experiments/e.py", "--n", "3", "--out", "/t/f.json"]


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ("earm a --json x && earm b --json y", "chain"),
        ("earm a --json x (stopped after b)", "note"),
        ("earm simulate --quiet", "no --json"),
        ("make all", "cannot rerun"),
        ("missing.py --out x", "not in"),
        ("", "empty"),
    ],
)
def test_commands_that_cannot_be_rerun_say_why(command, message, tmp_path):
    with pytest.raises(RerunError, match=message):
        rerun_argv(command, Path("/t/f.json"), tmp_path, python=PY)


TABLE = {
    "source": "a.json",
    "columns": [
        {"header": "policy", "format": "{label}"},
        {
            "header": "R",
            "values": ["r/{key}/mean", "r/{key}/ci/0"],
            "format": "{0:.3f} [{1:.3f}]",
        },
    ],
    "rows": [{"key": "x", "label": "X"}, {"key": "y", "label": "Y"}],
}
SPEC = read_table_list({"tables": {"t": TABLE}})["t"]


def _payload(x: float, y: float) -> dict:
    return {"r": {"x": {"mean": x, "ci": [x - 0.1]}, "y": {"mean": y, "ci": [0.0]}}}


def test_differences_name_table_row_column_and_both_numbers():
    committed = {"a.json": _payload(0.5, 0.2)}
    close = {"a.json": _payload(0.5015, 0.2)}
    assert table_differences(SPEC, committed, close, tolerance=0.002) == []
    moved = table_differences(
        SPEC, committed, {"a.json": _payload(0.5, 0.25)}, tolerance=0.002
    )
    assert [(d.row, d.column, d.committed, d.rerun) for d in moved] == [
        ("Y", "R", 0.2, 0.25)
    ]
    assert "t: `a.json` row 'Y', column 'R': committed 0.2000, rerun 0.2500" in (
        moved[0].line()
    )


def test_a_number_missing_from_the_rerun_is_a_difference():
    moved = table_differences(
        SPEC, {"a.json": _payload(0.5, 0.2)}, {"a.json": {"r": {}}}, tolerance=1.0
    )
    assert len(moved) == 4 and all(math.isnan(d.rerun) for d in moved)


SCRIPT = """
import argparse, json
parser = argparse.ArgumentParser()
parser.add_argument("--value", type=float)
parser.add_argument("--out")
args = parser.parse_args()
rows = {"x": {"mean": args.value, "ci": [0.1]}, "y": {"mean": 0.2, "ci": [0.0]}}
json.dump({"r": rows, "command": "unused"}, open(args.out, "w"))
"""


def _folder(tmp_path: Path, committed_x: float) -> Path:
    results = tmp_path / "benchmarks" / "results"
    results.mkdir(parents=True)
    (tmp_path / "experiments").mkdir()
    (tmp_path / "experiments" / "make.py").write_text(SCRIPT)
    payload = _payload(committed_x, 0.2)
    payload["r"]["x"]["ci"] = [0.1]
    payload["command"] = "python experiments/make.py --value 0.5 --out a.json"
    (results / "a.json").write_text(json.dumps(payload))
    (results / "tables.json").write_text(json.dumps({"tables": {"t": TABLE}}))
    return tmp_path


def test_verify_reruns_the_recorded_command_and_passes_when_it_reproduces(
    tmp_path, capsys, monkeypatch
):
    monkeypatch.chdir(_folder(tmp_path, 0.5))
    status = main.run(["results", "--verify", "t"])
    output = capsys.readouterr().out
    assert status == 0, output
    assert "agrees within 0.002" in output
    assert not (tmp_path / "a.json").exists()  # the rerun never writes the repo


def test_verify_fails_naming_the_number_that_moved(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(_folder(tmp_path, 0.6))
    status = main.run(["results", "--verify", "t"])
    output = capsys.readouterr().out
    assert status == 1
    assert "row 'X', column 'R': committed 0.6000, rerun 0.5000" in output


def test_verify_an_unknown_table_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(_folder(tmp_path, 0.5))
    status = main.run(["results", "--verify", "nope"])
    assert status == 2
    assert "no table 'nope'" in capsys.readouterr().err
