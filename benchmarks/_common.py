"""Shared pieces of the benchmarks: timing here; run metadata, JSON output,
tables and the LoCoMo arguments from :mod:`earm_jax.jobs.scripts` (which the
experiments use too)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from pathlib import Path

from earm_jax.jobs.scripts import locomo_arguments, print_table
from earm_jax.jobs.scripts import script_metadata as metadata
from earm_jax.jobs.scripts import write_script_json as write_json

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results"


def time_call(
    fn: Callable[[], object],
    *,
    repeats: int = 5,
    warmup: int = 1,
    budget_s: float | None = None,
) -> dict:
    """Median wall time of ``fn()`` (which must block until its result is ready).

    Stops early once ``budget_s`` seconds of timed repeats have been spent
    (always at least one timed repeat).
    """
    for _ in range(warmup):
        fn()
    times = []
    start = time.perf_counter()
    for _ in range(repeats):
        begin = time.perf_counter()
        fn()
        times.append(time.perf_counter() - begin)
        if budget_s is not None and time.perf_counter() - start > budget_s:
            break
    return {
        "median_s": statistics.median(times),
        "min_s": min(times),
        "max_s": max(times),
        "repeats": len(times),
        "times_s": times,
    }


__all__ = [
    "RESULTS",
    "REPO_ROOT",
    "locomo_arguments",
    "metadata",
    "print_table",
    "time_call",
    "write_json",
]
