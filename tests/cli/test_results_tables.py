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
    lookup,
    marked_tables,
    provenance,
    read_table_list,
    render_table,
    source_folders,
)

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
TABLE_PAYLOAD = json.loads((RESULTS / TABLE_LIST).read_text())
FOLDERS = [RESULTS, *source_folders(TABLE_PAYLOAD, RESULTS)]


def _where(source: str) -> list[Path]:
    """The folders of the results tables that hold ``source``."""
    return [folder / source for folder in FOLDERS if (folder / source).is_file()]


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
            # In exactly one folder: a name in two would be read from the first.
            assert len(_where(source)) == 1, (spec.name, source, _where(source))


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
    tables = read_table_list(TABLE_PAYLOAD)
    shown = marked_tables((REPO / "README.md").read_text())
    for name in {source for table in shown for source in tables[table].sources()}:
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(_where(name)[0], results / name)
    shutil.copy(RESULTS / TABLE_LIST, results / TABLE_LIST)
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
    # The date is still the JSON's own; only the commit is missing.
    assert "commit not recorded" in table and payload["date"][:10] in table


def test_a_page_showing_an_undeclared_table_is_a_one_line_error(tmp_path, capsys):
    page = tmp_path / "page.md"
    page.write_text("<!-- results:nowhere -->\n<!-- /results:nowhere -->\n")
    argv = ["results", "--check", "--results", str(RESULTS), str(page)]
    status, output = _run(capsys, argv)
    assert status == 2 and "nowhere" in output and "Traceback" not in output


RESULT_JSONS = sorted(
    p.name for p in RESULTS.glob("*.json") if p.name not in {TABLE_LIST, "figures.json"}
)
TABLE_SOURCES = sorted(
    {s for spec in read_table_list(TABLE_PAYLOAD).values() for s in spec.sources()}
)


@pytest.mark.parametrize("source", sorted(set(RESULT_JSONS) | set(TABLE_SOURCES)))
def test_provenance_reads_what_each_committed_json_recorded(source):
    where = provenance(json.loads(_where(source)[0].read_text()))
    for field in where:
        assert field and field == field.strip()
    if where.date != "date not recorded":
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", where.date)


ABSOLUTE_PATH = re.compile(r"(?:^|[\s=])/\w[^\s/]*/")


def _strings(value):
    if isinstance(value, dict):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _strings(item)
    elif isinstance(value, str):
        yield value


@pytest.mark.parametrize("source", TABLE_SOURCES)
def test_no_table_source_names_a_path_of_the_machine_it_ran_on(source):
    # Its command is what a reader reruns from the repository root.
    payload = json.loads(_where(source)[0].read_text())
    assert [text for text in _strings(payload) if ABSOLUTE_PATH.search(text)] == []


RUNS = {
    "runs": [
        {"rank": 2, "calls": 30, "recall": 0.5},
        {"rank": 8, "calls": 30, "recall": 0.625},
    ],
    "full": {"calls": 120},
}


def test_a_path_picks_a_list_item_by_its_fields_and_only_one():
    assert lookup(RUNS, "runs/rank=8/recall") == 0.625
    assert lookup(RUNS, "runs/rank=2,calls=30/recall") == 0.5
    assert lookup(RUNS, "runs/1/recall") == 0.625  # an index still works
    with pytest.raises(KeyError, match="0 items match 'rank=4'"):
        lookup(RUNS, "runs/rank=4/recall")
    with pytest.raises(KeyError, match="2 items match 'calls=30'"):
        lookup(RUNS, "runs/calls=30/recall")


def test_ratios_blank_cells_and_a_column_per_source():
    spec = read_table_list(
        {
            "tables": {
                "demo": {
                    "columns": [
                        {"header": "", "format": "{label}"},
                        {"header": "cap 25%", "source": "a.json"},
                        {"header": "cap 15%", "source": "b.json"},
                    ],
                    "rows": [
                        {
                            "label": "rank 8",
                            "values": [
                                "runs/rank=8/recall",
                                {"ratio": ["runs/rank=8/calls", "full/calls"]},
                            ],
                            "format": "{0:.3f} ({1:.1%} of Full's calls)",
                            # b.json has no rank 8: a blank cell, nothing read
                            "formats": {"cap 15%": ""},
                        },
                    ],
                }
            }
        }
    )["demo"]
    assert spec.sources() == ["a.json", "b.json"]
    text = render_table(spec, {"a.json": RUNS, "b.json": {"runs": []}})
    assert "| rank 8 | 0.625 (25.0% of Full's calls) |  |" in text
    assert "source" not in text.splitlines()[0]  # the sources are per column
    assert "- `a.json`, command not recorded" in text
    assert "- `b.json`, command not recorded" in text
    with pytest.raises(KeyError, match="`a.json`.*0 items match"):
        render_table(spec, {"a.json": RUNS | {"runs": []}, "b.json": RUNS})


@pytest.mark.parametrize(
    ("column", "row", "message"),
    [
        ({"header": "x", "values": [{"ratio": ["a"]}], "format": "{0}"}, {}, "ratio"),
        ({"header": "x", "values": ["a"]}, {}, "no format"),
        ({"header": "x"}, {}, "no format for the columns"),
    ],
)
def test_a_malformed_table_is_refused_by_name(column, row, message):
    table = {"source": "run.json", "columns": [column], "rows": [row]}
    with pytest.raises(ValueError, match=message):
        read_table_list({"tables": {"demo": table}})


def test_a_source_in_another_results_folder_is_found_there(tmp_path, capsys):
    results, studies = tmp_path / "results", tmp_path / "studies"
    results.mkdir()
    studies.mkdir()
    table = {
        "source": "study.json",
        "columns": [{"header": "R@10", "values": ["recall"], "format": "{0:.2f}"}],
        "rows": [{}],
    }
    listing = {"folders": ["../studies"], "tables": {"study": table}}
    (results / TABLE_LIST).write_text(json.dumps(listing))
    (studies / "study.json").write_text(json.dumps({"recall": 0.5, "command": "x"}))
    page = tmp_path / "page.md"
    page.write_text("<!-- results:study -->\n<!-- /results:study -->\n")
    status, output = _run(capsys, ["results", "--results", str(results), str(page)])
    assert status == 0, output
    assert "| 0.50 |" in page.read_text()
    assert "Source: `study.json`, `x`;" in page.read_text()
