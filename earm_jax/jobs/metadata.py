"""What makes a result reproducible: commit, date, command, versions, machine.

Every result JSON (``earm simulate``, ``earm locomo``, the benchmarks) records
:func:`provenance`, and is written by :func:`write_json`.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

VERSIONED_PACKAGES = (
    "earm_jax",
    "jax",
    "jaxlib",
    "optax",
    "numpy",
    "scipy",
    "sentence-transformers",
    "torch",
    "scikit-surprise",
)


def versions() -> dict[str, str]:
    """Versions of Python and the installed packages that change results."""
    found = {"python": platform.python_version()}
    for name in VERSIONED_PACKAGES:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def machine() -> dict[str, Any]:
    """What ran it: platform, CPU, load (timings on a shared machine are noisy),
    JAX backend and devices."""
    import jax

    devices = jax.devices()
    try:
        load = list(os.getloadavg())
    except OSError:
        load = None
    return {
        "platform": platform.platform(),
        "processor": platform.machine(),
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "load_average_1_5_15": load,
        "jax_backend": jax.default_backend(),
        "devices": [str(device) for device in devices],
        "device_kind": devices[0].device_kind,
        "num_devices": len(devices),
        "xla_flags": os.environ.get("XLA_FLAGS"),
    }


def git_commit() -> str | None:
    """The checkout's commit (``+dirty`` with uncommitted changes), or None."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def command_line(program: str = "earm", argv: list[str] | None = None) -> str:
    """The command as typed: ``program`` and its arguments, each quoted for
    the shell where it needs it (a JSON ``--config`` reruns as written)."""
    args = sys.argv[1:] if argv is None else argv
    return " ".join([program, *(shlex.quote(arg) for arg in args)])


def provenance(program: str = "earm", argv: list[str] | None = None) -> dict[str, Any]:
    """``{command, date, git_commit, versions, machine}`` for a result JSON."""
    return {
        "command": command_line(program, argv),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "versions": versions(),
        "machine": machine(),
    }


def _jsonable(value: Any) -> Any:
    import numpy as np

    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def write_json(path: str | Path, payload: dict[str, Any]) -> Path:
    """Writes ``payload`` (NumPy values allowed) to ``path``, creating folders."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, default=_jsonable) + "\n")
    return path


__all__ = [
    "command_line",
    "git_commit",
    "machine",
    "provenance",
    "versions",
    "write_json",
]
