"""Shared pieces of the solver benchmarks: run metadata, JSON output, timing."""

from __future__ import annotations

import importlib.metadata
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "benchmarks" / "results"


def _version(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def metadata(argv: list[str] | None = None) -> dict:
    """Device, versions, command line, machine load: what makes a number comparable."""
    import jax

    devices = jax.devices()
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": " ".join([sys.executable.split("/")[-1]] + (argv or sys.argv)),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15": load,
        "jax_backend": jax.default_backend(),
        "devices": [str(d) for d in devices],
        "device_kind": devices[0].device_kind,
        "num_devices": len(devices),
        "versions": {
            name: _version(name)
            for name in ("jax", "jaxlib", "numpy", "scikit-surprise", "earm_jax")
        },
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }


def write_json(payload: dict, path: str | Path | None) -> Path | None:
    """Writes ``payload`` to ``path`` (and to ``$OUT`` when that is set)."""
    written = None
    if path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
        written = path
    out = os.environ.get("OUT")
    if out and path:
        target = Path(out) / Path(path).name
        target.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    return written


def _jsonable(value):
    try:
        import numpy as np

        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, np.ndarray):
            return value.tolist()
    except ImportError:  # pragma: no cover
        pass
    return str(value)


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
