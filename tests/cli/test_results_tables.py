"""``earm results``: the committed results tables are what the result JSONs
give, and a table edited by hand is caught, by name, with a diff."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from earm_jax.cli import main
from earm_jax.jobs.results_tables import (
    TABLE_LIST,
    marked_tables,
    provenance,
    read_table_list,
)

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def _run(capsys, argv: list[str]) -> tuple[int, str]:
    status = main.run(argv)
    captured = capsys.readouterr()
    return status, captured.out + captured.err


def test_the_committed_tables_match_the_result_jsons(capsys, monkeypatch):
    monkeypatch.chdir(REPO)
    status, output = _run(capsys, ["results", "--check"])
    assert status == 0, output
    assert "match the result JSONs" in output


def test_every_declared_table_is_on_a_page_and_every_page_table_is_declared():
    tables = read_table_list(json.loads((RESULTS / TABLE_LIST).read_text()))
    shown = {name for page in PAGES for name in marked_tables(page.read_text())}
    assert shown == set(tables)
    assert "readme-headline" in marked_tables((REPO / "README.md").read_text())
    for spec in tables.values():
        for source in spec.sources():
            assert (RESULTS / source).is_file(), (spec.name, source)


def _copy(tmp_path: Path, page: str) -> Path:
    copy = tmp_path / Path(page).name
    shutil.copy(REPO / page, copy)
    return copy


def test_a_number_edited_by_hand_fails_the_check_naming_its_table(tmp_path, capsys):
    page = _copy(tmp_path, "docs/policies.md")
    text = page.read_text()
    assert "| **0.774** (24.6%) |" in text
    page.write_text(text.replace("| **0.774** (24.6%) |", "| **0.775** (24.6%) |"))
    argv = ["results", "--check", "--results", str(RESULTS), str(page)]
    status, output = _run(capsys, argv)
    assert status == 1, output
    assert "stale tables adaptive-locomo-cap25" in output
    assert "-| turns | noise 0.1 | 0.451 | 0.682 | 0.906 | **0.775**" in output
    assert "+| turns | noise 0.1 | 0.451 | 0.682 | 0.906 | **0.774**" in output
    assert page.read_text().count("0.775") == 1  # --check writes nothing

    status, output = _run(capsys, argv[:1] + argv[2:])  # without --check: repaired
    assert status == 0 and "wrote" in output
    assert page.read_text() == (REPO / "docs" / "policies.md").read_text()


def test_a_changed_result_json_changes_the_table_and_its_provenance(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    for name in (TABLE_LIST, "conversations_best_turns_noise01.json"):
        shutil.copy(RESULTS / name, results / name)
    source = results / "conversations_best_turns_noise01.json"
    payload = json.loads(source.read_text())
    payload["results"]["full"]["recall@10"]["mean"] = 0.5
    del payload["git_commit"]  # an older JSON: shown as missing, not guessed
    source.write_text(json.dumps(payload))
    page = _copy(tmp_path, "README.md")
    status, output = _run(capsys, ["results", "--results", str(results), str(page)])
    assert status == 0, output
    table = page.read_text().split("<!-- results:readme-headline -->")[1]
    assert "| Full | 200 | 0.500 |" in table
    assert "commit not recorded" in table and "2026-12-02" in table


def test_a_page_showing_an_undeclared_table_is_a_one_line_error(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("<!-- results:nowhere -->\n<!-- /results:nowhere -->\n")
    argv = ["results", "--check", "--results", str(RESULTS), str(page)]
    status, output = _run(capsys, argv)
    assert status == 2 and "nowhere" in output and "Traceback" not in output


RESULT_JSONS = sorted(
    p.name for p in RESULTS.glob("*.json") if p.name not in {TABLE_LIST, "figures.json"}
)


@pytest.mark.parametrize("source", RESULT_JSONS)
def test_provenance_reads_what_each_committed_json_recorded(source):
    where = provenance(json.loads((RESULTS / source).read_text()))
    for field in where:
        assert field and field == field.strip()
    if where.date != "date not recorded":
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", where.date)
