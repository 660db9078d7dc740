"""The benchmarks and the experiments are thin programs over the package:
neither imports the other (what they share is in ``earm_jax.jobs.scripts`` and
the package), and no benchmark file grows past what one reader can hold."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAX_BENCHMARK_LINES = 600


def _imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    "path", sorted((REPO / "experiments").glob("*.py")), ids=lambda p: p.name
)
def test_an_experiment_imports_no_benchmark(path):
    bad = sorted(n for n in _imported(path) if n.split(".")[0] == "benchmarks")
    assert not bad, f"{path.name} imports {bad}: move what it needs into earm_jax"


@pytest.mark.parametrize(
    "path", sorted((REPO / "benchmarks").glob("*.py")), ids=lambda p: p.name
)
def test_a_benchmark_file_stays_short(path):
    lines = len(path.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_BENCHMARK_LINES, (
        f"{path.name} has {lines} lines: split it by what it measures"
    )


def _script(name: str):
    """``scripts/<name>.py`` loaded as a module (the folder is not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_durations_table_reads_a_pytest_log(tmp_path):
    """scripts/durations_table.py turns a run's durations block into the
    table CONTRIBUTING.md shows, and refuses a log without one."""
    module = _script("durations_table")
    log = (
        "===== slowest 25 durations =====\n"
        "12.50s call     tests/a.py::test_x[1]\n"
        "3.00s setup    tests/b.py::test_y\n"
        "===== short test summary info =====\n"
        "===== 10 passed, 1 skipped in 120.00s (0:02:00) =====\n"
    )
    found = module.table(log)
    assert "Run: 10 passed, 1 skipped in 2.0 min" in found
    assert "| 12.50 | call | `tests/a.py::test_x[1]` |" in found
    assert found.count("\n| ") == 4  # the header, its rule and two rows
    with pytest.raises(ValueError, match="slowest"):
        module.table("===== 10 passed in 1.00s =====\n")


def test_slow_tests_sums_each_test_and_keeps_what_the_log_lacks():
    """scripts/slow_tests.py sums a test's phases (ids with spaces and
    xdist's ``@group`` suffix included), replaces the times it measured
    again, keeps those the log lacks and drops tests no longer collected or
    measured again under the floor."""
    module = _script("slow_tests")
    log = (
        "===== slowest durations =====\n"
        "6.50s call     tests/a.py::test_x[1]\n"
        "2.00s setup    tests/a.py::test_x[1]\n"
        "1.25s call     tests/b.py::test_y[a b]@locomo-minilm\n"
        "0.20s call     tests/d.py::test_now_quick\n"
        "===== 10 passed in 120.00s (0:02:00) =====\n"
    )
    fresh = module.measured(log)
    assert fresh == {
        "tests/a.py::test_x[1]": 8.5,
        "tests/b.py::test_y[a b]": 1.25,
        "tests/d.py::test_now_quick": 0.2,
    }
    old = {
        "threshold_s": 5.0,
        "seconds": {
            "tests/a.py::test_x[1]": 1.0,
            "tests/c.py::test_z": 9.0,
            "tests/gone.py::test_old": 30.0,
            "tests/d.py::test_now_quick": 12.0,
        },
    }
    present = {
        "tests/a.py::test_x[1]",
        "tests/b.py::test_y[a b]",
        "tests/c.py::test_z",
        "tests/d.py::test_now_quick",
    }
    assert module.merged(old, fresh, present)["seconds"] == {
        "tests/a.py::test_x[1]": 8.5,
        "tests/b.py::test_y[a b]": 1.25,
        "tests/c.py::test_z": 9.0,
    }
    with pytest.raises(ValueError, match="slowest"):
        module.measured("===== 10 passed in 1.00s =====\n")


def test_the_recorded_slow_tests_leave_the_fast_tier():
    """A test recorded at or above tests/durations.json's threshold is
    deselected by ``-m "not slow"`` (the fast tier); a retriever ``basics``
    test stays in it whatever its recorded time."""
    recorded = json.loads((REPO / "tests" / "durations.json").read_text())
    threshold = recorded["threshold_s"]
    slow = sorted(t for t, s in recorded["seconds"].items() if s >= threshold)
    assert 0 < len(slow) < len(recorded["seconds"])
    core = next((t for t in slow if t.startswith("tests/core/")), None)
    basics = next(
        (t for t in slow if t.startswith("tests/retriever/test_lock.py::")), None
    )
    # The file records both kinds today; a remeasured file without them needs
    # this test to pick other examples, not to pass on nothing.
    assert core and basics, "no slow core test or slow lock test in durations.json"
    listing = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-m",
            "not slow",
            core.split("::")[0],
            basics.split("::")[0],
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    fast = {line.strip() for line in listing.splitlines() if "::" in line}
    assert core not in fast and basics in fast
    assert any(t.startswith(core.split("::")[0]) for t in fast)
