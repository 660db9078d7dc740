"""What the retriever benchmark samples from the running process: resident
memory, bytes passed to ``write()``, bytes on disk, XLA compiles and the
machine's load, and the summaries of those samples."""

from __future__ import annotations

import os
from pathlib import Path

import jax
import numpy as np

# Each backend compile keeps its executable (and its memory mappings) until
# ``jax.clear_caches()``: compiles after warm-up are a source of growth.
_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


class CompileCounter:
    """Counts XLA backend compiles of this process from the moment it exists."""

    def __init__(self) -> None:
        self.count = 0
        self.seconds = 0.0
        jax.monitoring.register_event_duration_secs_listener(self._heard)

    def _heard(self, event: str, duration: float, **_: object) -> None:
        if event == _COMPILE_EVENT:
            self.count += 1
            self.seconds += duration


def rss_mib() -> float:
    """The process's resident set size (``VmRSS``) in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def wchar() -> int:
    """Bytes this process has passed to ``write()`` so far."""
    for line in Path("/proc/self/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    return 0


def folder_bytes(folder: Path) -> int:
    """Bytes of the files under ``folder`` (a tenant root: every tenant's)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def latency_summary(latency_ms: np.ndarray) -> dict:
    steady = latency_ms[10:] if len(latency_ms) > 20 else latency_ms
    return {
        "p50": float(np.percentile(latency_ms, 50)),
        "p95": float(np.percentile(latency_ms, 95)),
        "p99": float(np.percentile(latency_ms, 99)),
        "max": float(latency_ms.max()),
        "argmax_query": int(latency_ms.argmax()),
        "p50_after_10": float(np.percentile(steady, 50)),
    }


def rss_summary(samples: list[tuple[int, float, int]]) -> dict:
    """RSS after warm-up, at the end, and at each sample (``(queries, MiB,
    compiles so far)``)."""
    return {
        "after_warmup_mib": samples[0][1],
        "end_mib": samples[-1][1],
        "growth_mib": samples[-1][1] - samples[0][1],
        "compiles_after_warmup": samples[-1][2] - samples[0][2],
        "samples": [{"queries": q, "mib": m, "compiles": c} for q, m, c in samples],
    }


def disk_summary(before: int, after: int, queries: int) -> dict:
    """Bytes on disk before the first query and after the last (folder closed,
    so the ``-wal`` file is checkpointed into the journal), per query."""
    return {
        "before_queries": before,
        "after_close": after,
        "per_query": (after - before) / max(queries, 1),
    }


__all__ = [
    "CompileCounter",
    "disk_summary",
    "folder_bytes",
    "latency_summary",
    "load_average",
    "rss_mib",
    "rss_summary",
    "wchar",
]
