"""Every result JSON records the git commit, the date and the exact command."""

from __future__ import annotations

import datetime
import re
from pathlib import Path

from earm_jax.jobs.metadata import provenance

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def test_provenance_has_commit_date_and_the_command_with_the_script():
    record = provenance("python", ["benchmarks/bench_solver.py", "--preset", "cpu"])
    assert record["command"] == "python benchmarks/bench_solver.py --preset cpu"
    assert re.fullmatch(r"[0-9a-f]{40}(\+dirty)?", record["git_commit"])
    assert datetime.datetime.fromisoformat(record["date"]).tzinfo is not None
    assert provenance(argv=["simulate", "--json", "x"])["command"].startswith(
        "earm simulate"
    )


def test_every_benchmark_that_writes_json_records_provenance():
    for script in sorted(BENCHMARKS.glob("*.py")):
        text = script.read_text()
        if script.name.startswith("_") or "json" not in text:
            continue
        writes = "write_json(" in text or ".write_text(json.dumps" in text
        if not writes:
            continue
        assert ".write_text(json.dumps" not in text, f"{script.name}: use write_json"
        records = "metadata(" in text or "provenance(" in text
        assert records, f"{script.name}: record metadata() (provenance)"
