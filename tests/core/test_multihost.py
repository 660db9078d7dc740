"""Sharded run_batch over 2 processes (``jax.distributed``) equals it in one process.

Two processes of ``examples/multihost_run_batch.py`` on 127.0.0.1, 2 CPU devices
each (4 global devices, 2 streams per device), gather the mixed scores to every
host. They must equal the single-process, unsharded ``run_batch`` on the same
streams and keys: bit for bit where the batch is the same (2 streams, a device's
share), and to float rounding for the whole 8-stream batch (XLA's CPU code for a
``vmap`` of 8 rounds differently from one of 2).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

import earm_jax as ej

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "multihost_run_batch.py"
PROCESSES, LOCAL_DEVICES, STREAMS = 2, 2, 8
TIMEOUT_S = 180


def _example():
    spec = importlib.util.spec_from_file_location("multihost_run_batch", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _last_json_line(text: str) -> dict:
    """The process's summary (gloo also prints its connection lines to stdout)."""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    assert lines, text
    return json.loads(lines[-1])


def _launch(tmp_path: Path) -> list[tuple[subprocess.Popen, Path, Path]]:
    coordinator = f"127.0.0.1:{_free_port()}"
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    # The processes compile as this one does (the reference is compared bit
    # for bit): with XLA's optimizations on unless this process has them off.
    if not jax.config.read("jax_disable_most_optimizations"):
        env.pop("JAX_DISABLE_MOST_OPTIMIZATIONS", None)
    launched = []
    for process_id in range(PROCESSES):
        stdout = tmp_path / f"process{process_id}.out"
        stderr = tmp_path / f"process{process_id}.err"
        command = [
            sys.executable,
            str(EXAMPLE),
            f"--coordinator={coordinator}",
            f"--num-processes={PROCESSES}",
            f"--process-id={process_id}",
            f"--streams={STREAMS}",
            f"--local-devices={LOCAL_DEVICES}",
        ]
        if process_id == 0:
            command.append(f"--out={tmp_path / 'summary.json'}")
        with stdout.open("w") as out, stderr.open("w") as err:
            process = subprocess.Popen(
                command, stdout=out, stderr=err, env=env, cwd=REPO
            )
        launched.append((process, stdout, stderr))
    return launched


def _rows(tree, start: int, stop: int):
    return jax.tree.map(lambda x: x[start:stop], tree)


def _wait_all(launched, deadline: float) -> None:
    for process, stdout, stderr in launched:
        try:
            process.wait(timeout=max(deadline - time.monotonic(), 1.0))
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"still running after {TIMEOUT_S} s (killed):\n"
                + (stdout.read_text() + stderr.read_text())[-4000:]
            )


@pytest.mark.slow  # ~60 s on 2 busy cores: 3 processes each compile run_batch
def test_two_processes_equal_single_process_run_batch(tmp_path):
    example = _example()
    start = time.monotonic()
    launched = _launch(tmp_path)
    try:
        # The reference, computed while the two processes run.
        solver, keys, streams = example.simulated_problem(STREAMS)
        batch = jax.jit(functools.partial(ej.run_batch, solver))
        whole = np.asarray(batch(keys, streams)[1].scores)
        share = STREAMS // (PROCESSES * LOCAL_DEVICES)  # streams per device
        per_device = np.concatenate(
            [
                np.asarray(batch(*_rows((keys, streams), i, i + share))[1].scores)
                for i in range(0, STREAMS, share)
            ]
        )
        _wait_all(launched, start + TIMEOUT_S)
    finally:
        for process, _, _ in launched:
            if process.poll() is None:
                process.kill()
            process.wait()
    reports = []
    for process, stdout, stderr in launched:
        output = stdout.read_text() + stderr.read_text()
        assert process.returncode == 0, output[-4000:]
        reports.append(_last_json_line(stdout.read_text()))

    for process_id, report in enumerate(reports):
        assert report["process_id"] == process_id
        assert report["process_count"] == PROCESSES
        assert report["global_devices"] == PROCESSES * LOCAL_DEVICES
        assert report["local_devices"] == LOCAL_DEVICES
        assert report["devices_per_process"] == [LOCAL_DEVICES] * PROCESSES
        per_process = STREAMS // PROCESSES
        assert report["local_streams"] == [
            process_id * per_process,
            (process_id + 1) * per_process,
        ]
    # Every host gathered the same global scores.
    assert reports[0]["scores_sha256"] == reports[1]["scores_sha256"]
    summary = json.loads((tmp_path / "summary.json").read_text())
    scores = np.load(summary["scores_file"])
    assert scores.shape == whole.shape == (STREAMS, 20, 32)

    np.testing.assert_array_equal(scores, per_device)
    assert np.array_equal(np.isfinite(scores), np.isfinite(whole))
    np.testing.assert_allclose(scores, whole, rtol=0, atol=1e-4)
    np.testing.assert_array_equal(  # NaN (no relevant memory) counts as equal
        summary["mixed_recall_at_10"], example.mixed_recall_at_10(per_device, streams)
    )


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--num-processes", "2", "--process-id", "0"], "--coordinator"),
        (
            ["--coordinator", "127.0.0.1", "--num-processes", "2", "--process-id", "0"],
            "--coordinator",
        ),
        (
            [
                "--coordinator",
                "127.0.0.1:1",
                "--num-processes",
                "0",
                "--process-id",
                "0",
            ],
            "--num-processes",
        ),
        (
            [
                "--coordinator",
                "127.0.0.1:1",
                "--num-processes",
                "2",
                "--process-id",
                "2",
            ],
            "--process-id",
        ),
        (
            [
                "--coordinator",
                "127.0.0.1:1",
                "--num-processes",
                "2",
                "--process-id",
                "1",
                "--streams",
                "6",
            ],
            "--streams",
        ),
    ],
)
def test_bad_arguments_fail_with_one_line_naming_the_argument(argv, named, capsys):
    with pytest.raises(SystemExit) as exit_info:
        _example().parse_args(argv)
    assert exit_info.value.code == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and named in error, error
