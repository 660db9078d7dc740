"""Shared output of the CLI commands: run metadata, JSON files, result tables."""

from __future__ import annotations

import json
import os
import platform
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

from rich.table import Table

VERSIONED_PACKAGES = (
    "earm_jax",
    "jax",
    "jaxlib",
    "optax",
    "numpy",
    "scipy",
    "sentence-transformers",
    "torch",
)


def versions() -> dict[str, str]:
    """Versions of Python and the packages that change results."""
    found = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def machine() -> dict[str, Any]:
    """What ran it: platform, CPU count, JAX backend and devices."""
    import jax

    return {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpu_count": os.cpu_count(),
        "jax_backend": jax.default_backend(),
        "devices": [str(device) for device in jax.devices()],
    }


def command_line() -> str:
    return " ".join(["earm", *sys.argv[1:]])


def write_json(path: Path, payload: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, sort_keys=False) + "\n")


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _cell(entry: dict[str, Any]) -> str:
    """``mean [low, high]``; undefined values (JSON null) print as n/a."""
    low, high = entry["ci"]
    return f"{_number(entry['mean'])} [{_number(low)}, {_number(high)}]"


def results_table(summary: dict[str, Any], metrics: list[str], title: str) -> Table:
    """Policy x metric (mean [95% CI]), calls, and gain recovery."""
    table = Table(title=title, show_lines=False)
    table.add_column("policy")
    table.add_column("calls/query", justify="right")
    for metric in metrics:
        table.add_column(metric, justify="right")
    table.add_column(f"gain recovery ({metrics[0]})", justify="right")
    recovery = summary.get("gain_recovery_by_policy", {})
    for policy, row in summary["results"].items():
        gain = recovery.get(policy, {}).get(metrics[0])
        table.add_row(
            policy,
            f"{row['calls_per_query']:.1f}",
            *[_cell(row[m]) for m in metrics],
            _cell(gain) if gain else "",
        )
    return table


def contrasts_table(summary: dict[str, Any], metrics: list[str], title: str) -> Table:
    table = Table(title=title)
    table.add_column("contrast")
    for metric in metrics:
        table.add_column(metric, justify="right")
    for name, row in summary["contrasts"].items():
        table.add_row(name, *[_cell(row[m]) for m in metrics])
    return table
