"""A benchmark sent SIGTERM stops the scorer server it started.

``benchmarks/_serve.py`` starts ``earm serve-scorer`` as a child process; a
benchmark that dies of SIGTERM's default action would leave it (and its vLLM
server) running. Here the command is a stand-in that prints a URL as the real
one does and records how it was stopped, so the benchmark's side of the
contract is tested in seconds; the real command's own SIGTERM stop is tested
with a real vLLM server in ``tests/scoring/test_vllm_real.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# Prints a URL as `earm serve-scorer` does once healthy, then waits; SIGTERM
# is its clean stop, which it records.
_STAND_IN = textwrap.dedent(
    """
    import os, signal, sys, time
    record = os.environ["STAND_IN_RECORD"]
    def stop(signum, frame):
        with open(record, "a") as f:
            f.write("stopped\\n")
        sys.exit(0)
    signal.signal(signal.SIGTERM, stop)
    with open(record, "w") as f:
        f.write(f"{os.getpid()}\\n")
    print("http://127.0.0.1:9", flush=True)
    while True:
        time.sleep(0.1)
    """
)

_BENCHMARK = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, sys.argv[1])
    from benchmarks._serve import served_scorer
    program = (sys.executable, "-c", sys.argv[2])
    with served_scorer("model", "name", startup_timeout_s=60, program=program):
        print("serving", flush=True)
        time.sleep(600)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_benchmark_sent_sigterm_stops_its_server(tmp_path):
    record = tmp_path / "record"
    benchmark = subprocess.Popen(
        [sys.executable, "-c", _BENCHMARK, str(REPO), _STAND_IN],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "STAND_IN_RECORD": str(record)},
    )
    server_pid = None
    try:
        assert benchmark.stdout.readline().strip() == "serving"
        server_pid = int(record.read_text().split()[0])
        assert _alive(server_pid)
        benchmark.send_signal(signal.SIGTERM)
        # A bound on a hang, not a timing.
        assert benchmark.wait(timeout=60) == 128 + signal.SIGTERM
        assert record.read_text().split()[1:] == ["stopped"]
        deadline = time.monotonic() + 30
        while _alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(server_pid), "the server outlived its benchmark"
    finally:
        if benchmark.poll() is None:
            benchmark.kill()
            benchmark.wait()
        if server_pid is not None and _alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)
        benchmark.stdout.close()


def test_outside_the_block_sigterm_keeps_its_handler():
    from benchmarks._serve import stopping_on_sigterm

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RuntimeError), stopping_on_sigterm():
        assert signal.getsignal(signal.SIGTERM) is not before
        raise RuntimeError
    assert signal.getsignal(signal.SIGTERM) is before
