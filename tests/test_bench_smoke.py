"""A tiny run of the benchmark code paths (no timing assertions, ever)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Compiles for tens of seconds: the full run has it, the fast tier does not.
pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _bench_solver(arguments: list[str], out: Path) -> dict:
    """``bench_solver.py`` in its own Python (the way it is run, with its XLA
    flags set before JAX, and apart from the state of this test process)."""
    done = _script("bench_solver.py", *arguments, "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(out.read_text())


def test_bench_solver_smoke_writes_json(tmp_path):
    out = tmp_path / "smoke.json"
    payload = _bench_solver(
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
        ],
        out,
    )
    written = payload
    assert written["meta"]["versions"]["jax"]
    assert written["meta"]["machine"]["load_average_1_5_15"] is not None
    assert written["meta"]["git_commit"] and written["meta"]["date"]
    (row,) = payload["numpy"]["rows"]
    # The NumPy loop is the same math: completions agree with the JAX run.
    assert row["max_abs_completion_difference"] < 1e-4, row
    assert payload["latency"]["rows"][0]["repeats"] >= 1


def test_bench_solver_throughput_times_the_chunked_step_too(tmp_path):
    payload = _bench_solver(
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
        ],
        tmp_path / "throughput.json",
    )
    rows = {(r["solver"], r["S"]) for r in payload["throughput"]["rows"]}
    assert rows == {("incremental", 2), ("incremental_chunked", 2)}


def _script(name: str, *arguments: str) -> subprocess.CompletedProcess:
    """A benchmark script in its own Python (it sets XLA flags before JAX)."""
    return subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / name), *arguments],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )


TINY = ["--streams", "2", "--memories", "60", "--pool", "16", "--rank", "2"]


def test_profile_step_attributes_time_to_operations(tmp_path):
    out = tmp_path / "profile.json"
    done = _script("profile_step.py", *TINY, "--queries", "6", "--out", str(out))
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(out.read_text())
    assert payload["top"] and payload["by_kind"]
    assert all(row["op_name"] is not None and row["ms"] >= 0 for row in payload["top"])
    assert abs(sum(row["share"] for row in payload["by_kind"]) - 1.0) < 1e-6


def test_ab_commits_runs_head_against_the_working_tree(tmp_path):
    out = tmp_path / "ab.json"
    done = _script(
        "ab_commits.py",
        "HEAD",
        "WORKTREE",
        *TINY,
        "--queries",
        "6",
        "--rounds",
        "2",
        "--out",
        str(out),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = json.loads(out.read_text())["rows"]
    assert [row["commit"] for row in rows] == ["HEAD", "WORKTREE"]
    assert rows[0]["anchors_equal_reference"]
    assert rows[0]["max_abs_completion_difference"] == 0.0
    assert len(rows[1]["speedup_vs_reference_by_round"]) == 2


def test_the_suite_entry_point_names_maintained_scripts_only():
    from benchmarks import __main__ as suite

    for name in suite.BENCHMARKS:
        for quick in (True, False):
            line = suite.commands(name, quick, REPO / "out")
            if line is None:
                continue
            script = Path(line[0])
            assert script.parent == REPO / "benchmarks" and script.exists(), line
    # The one-off studies live apart from the suite.
    assert not (REPO / "benchmarks" / "baseline_c45063e.py").exists()
    assert (REPO / "experiments" / "README.md").exists()


@pytest.mark.locomo
def test_scorer_backends_compares_with_torch_on_the_same_pairs(
    tmp_path, monkeypatch, locomo_path, embedding_cache_dir
):
    pytest.importorskip("onnxruntime")
    from benchmarks import bench_scorer_backends
    from tests.scoring.tiny_models import build_cross_encoder

    monkeypatch.setenv("EARM_CACHE_DIR", str(tmp_path / "user-cache"))
    model = build_cross_encoder(tmp_path / "model")
    out = tmp_path / "backends.json"
    payload = bench_scorer_backends.main(
        [
            "--scorer-model",
            str(model),
            "--data",
            str(locomo_path),
            "--conversations",
            "26",
            "--memories",
            "turns,observations",
            "--questions",
            "2",
            "--pool-size",
            "20",
            "--rounds",
            "2",
            "--backends",
            "torch-float32,onnx-float32",
            "--cache-dir",
            str(embedding_cache_dir),
            "--out",
            str(out),
        ]
    )
    assert json.loads(out.read_text())["default"] == payload["default"]
    reference = payload["backends"]["torch-float32"]
    assert reference["max_abs_delta"] == 0.0 and reference["top10_overlap"] == 10
    onnx = payload["backends"]["onnx-float32"]
    assert onnx["max_abs_delta"] < 1e-4 and onnx["passes"]
    assert set(payload["memories"]) == {"turns", "observations"}
    assert payload["questions_per_setting"] == {"turns": 2, "observations": 2}
    assert len(payload["memories"]["turns"]["onnx-float32"]["times_s"]) == 2
    assert payload["meta"]["command"].startswith(
        "python -m benchmarks.bench_scorer_backends --scorer-model"
    )


@pytest.mark.parametrize(
    ("name", "committed"),
    [
        ("solver", "solver_cpu_paired_divide.json"),
        ("memory", "solver_memory_log.json"),
        ("retriever", "retriever_cpu.json"),
        ("scoring", "scoring_cpu.json"),
    ],
)
def test_the_suite_reads_headline_numbers_from_each_json(name, committed):
    from benchmarks import __main__ as suite

    payload = json.loads((REPO / "benchmarks" / "results" / committed).read_text())
    lines = suite.headlines(name, payload)
    assert lines and all("{" not in line for line in lines), lines


_RUN = subprocess.run


def _fake_run(line, **options):
    """A benchmark that prints a raw JSON row and writes its JSON (other
    commands, such as the metadata's git, run)."""
    if line[:2] != [sys.executable, str(REPO / "benchmarks" / "state_memory.py")]:
        return _RUN(line, **options)
    options["stdout"].write('{"row": 1}\n')
    source = REPO / "benchmarks" / "results" / "solver_memory_log.json"
    Path(line[-1]).write_text(source.read_text())
    return subprocess.CompletedProcess(line, 0)


def test_the_suite_writes_outside_the_repository_and_prints_a_summary(
    monkeypatch, capsys, tmp_path
):
    from benchmarks import __main__ as suite

    monkeypatch.setattr(suite.subprocess, "run", _fake_run)
    monkeypatch.setattr(suite.tempfile, "tempdir", str(tmp_path))
    ran = suite.main(["--quick", "--only", "memory"])
    out = Path(ran["out"])
    assert out.is_dir() and REPO not in out.parents
    printed = capsys.readouterr().out
    assert "memory: ok" in printed and "bytes per stream" in printed
    assert '{"row"' not in printed  # the script's raw rows stay in its log
    assert '{"row": 1}' in (out / "memory.log").read_text()
    assert json.loads((out / "suite.json").read_text())["runs"][0]["name"] == "memory"
    suite.main(["--quick", "--only", "memory", "--json", "--out", str(out)])
    assert json.loads(capsys.readouterr().out)["out"] == str(out)


def test_the_scorer_roofline_counts_the_flops_torch_counts(tmp_path):
    """The roofline's analytic count equals torch's own FLOP counter on a
    real forward pass of a BERT cross-encoder, at two lengths."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode
    from transformers import AutoModelForSequenceClassification

    from benchmarks import scorer_roofline
    from tests.scoring.tiny_models import build_cross_encoder

    folder = build_cross_encoder(tmp_path / "model")
    shape = scorer_roofline.model_shape(folder)
    # Eager attention: the counter does not see CPU SDPA's fused kernel.
    model = AutoModelForSequenceClassification.from_pretrained(
        str(folder), attn_implementation="eager"
    ).eval()
    for length in (7, 33):
        ids = torch.ones((3, length), dtype=torch.long)
        with torch.inference_mode(), FlopCounterMode(display=False) as counter:
            model(input_ids=ids, attention_mask=torch.ones_like(ids))
        expected = 3 * scorer_roofline.sequence_flops(length, shape)
        assert counter.get_total_flops() == expected, (length, shape)


def test_the_scorer_roofline_pads_batches_by_their_longest_pair():
    from benchmarks.scorer_roofline import batch_widths

    lengths = np.array([5, 9, 7, 3, 8])
    # By tokens: 9, 8, 7 | 5, 3. By characters: 9 (40), 8 (30), 5 (20) | 7, 3.
    assert batch_widths(lengths, lengths, batch_size=3) == [(3, 9), (2, 5)]
    widths = batch_widths(lengths, [20, 40, 10, 5, 30], batch_size=3)
    assert widths == [(3, 9), (2, 7)]


@pytest.mark.locomo
def test_the_scorer_roofline_writes_its_rates(
    tmp_path, locomo_path, embedding_cache_dir
):
    from benchmarks import scorer_roofline
    from tests.scoring.tiny_models import build_cross_encoder

    model = build_cross_encoder(tmp_path / "model")
    out = tmp_path / "roofline.json"
    payload = scorer_roofline.main(
        [
            "--scorer-model",
            str(model),
            "--data",
            str(locomo_path),
            "--conversations",
            "26",
            "--memories",
            "turns,observations",
            "--questions",
            "1",
            "--pool-size",
            "20",
            "--rounds",
            "1",
            "--cache-dir",
            str(embedding_cache_dir),
            "--out",
            str(out),
        ]
    )
    assert json.loads(out.read_text())["pairs"] == payload["pairs"] == 40
    flops = payload["gflop_per_pair"]
    assert flops["padded"] >= flops["useful"] > 0
    achieved = payload["achieved_gflops_per_s"]
    assert achieved == pytest.approx(payload["pairs_per_s"] * flops["padded"])
    for ceiling in payload["ceilings"].values():
        assert ceiling["ceiling_speedup"] == pytest.approx(
            ceiling["gflops_per_s"] / achieved
        )
        assert ceiling["ceiling_speedup_without_padding"] == pytest.approx(
            ceiling["ceiling_speedup"] * (1 + payload["padding_overhead"])
        )
    # Sorted by tokens, fixed-size batches pad the least.
    assert 0 <= payload["padding_overhead"]
    assert (
        payload["padding_overhead"] <= payload["padding_overhead_sorted_by_characters"]
    )
    assert payload["meta"]["command"].startswith("python -m benchmarks.scorer_roofline")
