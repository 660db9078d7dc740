"""A tiny run of the benchmark code paths (no timing assertions, ever)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_solver  # noqa: E402


def test_bench_solver_smoke_writes_json(tmp_path):
    out = tmp_path / "smoke.json"
    payload = bench_solver.main(
        [
            "--preset",
            "smoke",
            "--sections",
            "numpy",
            "latency",
            "--solvers",
            "incremental",
            "--latency-t",
            "8",
            "--out",
            str(out),
        ]
    )
    written = json.loads(out.read_text())
    assert written["meta"]["versions"]["jax"]
    assert written["meta"]["machine"]["load_average_1_5_15"] is not None
    assert written["meta"]["git_commit"] and written["meta"]["date"]
    (row,) = payload["numpy"]["rows"]
    # The NumPy loop is the same math: completions agree with the JAX run.
    assert row["max_abs_completion_difference"] < 1e-4, row
    assert payload["latency"]["rows"][0]["repeats"] >= 1


def test_bench_solver_throughput_times_the_chunked_step_too(tmp_path):
    payload = bench_solver.main(
        [
            "--preset",
            "smoke",
            "--sections",
            "throughput",
            "--solvers",
            "incremental",
            "--streams",
            "2",
            "--streams-per-chunk",
            "1",
            "--sweep-memories",
            "--out",
            str(tmp_path / "throughput.json"),
        ]
    )
    rows = {(r["solver"], r["S"]) for r in payload["throughput"]["rows"]}
    assert rows == {("incremental", 2), (bench_solver.CHUNKED, 2)}
