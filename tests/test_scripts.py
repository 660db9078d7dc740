"""The benchmarks and the experiments are thin programs over the package:
neither imports the other (what they share is in ``earm_jax.jobs.scripts`` and
the package), and no benchmark file grows past what one reader can hold."""

from __future__ import annotations

import ast
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


def test_the_durations_table_reads_a_pytest_log(tmp_path):
    """scripts/durations_table.py turns a run's durations block into the
    table CONTRIBUTING.md shows, and refuses a log without one."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "durations_table", REPO / "scripts" / "durations_table.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
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
