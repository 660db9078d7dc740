"""Shared pieces of the solver benchmarks: run metadata, JSON output, timing."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from earm_jax.jobs.metadata import provenance
from earm_jax.jobs.metadata import write_json as write_result

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results"


def metadata(argv: list[str] | None = None) -> dict:
    """Commit, date, command, versions, machine and load (the shared provenance)."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    return provenance("python", [sys.argv[0], *arguments])


def locomo_arguments(description: str, out: str) -> argparse.ArgumentParser:
    """The arguments every LoCoMo benchmark takes (data, memories, noise, rank)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True)
    parser.add_argument("--setting", default="turns", choices=("turns", "observations"))
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--out", default=out)
    return parser


def write_json(payload: dict, path: str | Path | None) -> Path | None:
    """Writes ``payload`` to ``path`` (and to ``$OUT`` when that is set)."""
    if not path:
        return None
    written = write_result(path, payload)
    out = os.environ.get("OUT")
    if out:
        write_result(Path(out) / Path(path).name, payload)
    return written


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


def print_table(rows: list[dict], columns: list[str], title: str = "") -> None:
    """A plain fixed-width table on stdout."""
    if title:
        print(f"\n{title}")
    if not rows:
        print("  (no rows)")
        return

    def cell(value):
        if isinstance(value, float):
            return f"{value:.4g}"
        return "" if value is None else str(value)

    widths = [max(len(c), *(len(cell(r.get(c))) for r in rows)) for c in columns]
    print("  ".join(c.rjust(w) for c, w in zip(columns, widths, strict=True)))
    for r in rows:
        print(
            "  ".join(
                cell(r.get(c)).rjust(w) for c, w in zip(columns, widths, strict=True)
            )
        )
