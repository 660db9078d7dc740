"""What the benchmark and experiment scripts share: the provenance of the
command that ran them, their JSON (also under ``$OUT``, where a device run
collects its files), a plain table and the arguments of a LoCoMo study.

Both ``benchmarks/`` and ``experiments/`` are programs over the package: what
they have in common lives here, so that neither imports the other.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from earm_jax.jobs.metadata import provenance
from earm_jax.jobs.metadata import write_json as write_result


def script_metadata(argv: list[str] | None = None) -> dict[str, Any]:
    """Commit, date, command (``python <script> <argv>``; ``argv`` defaults to
    the process's), versions, machine and load."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    return provenance("python", [sys.argv[0], *arguments])


def write_script_json(payload: dict[str, Any], path: str | Path | None) -> Path | None:
    """Writes ``payload`` to ``path`` (nothing when ``path`` is empty), and a
    copy to ``$OUT/<name>`` when ``$OUT`` is set; returns the path written."""
    if not path:
        return None
    written = write_result(path, payload)
    out = os.environ.get("OUT")
    if out:
        write_result(Path(out) / Path(path).name, payload)
    return written


def print_table(rows: list[dict], columns: list[str], title: str = "") -> None:
    """A plain fixed-width table of ``rows`` (dicts) on stdout."""
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


def locomo_arguments(description: str, out: str) -> argparse.ArgumentParser:
    """The arguments every LoCoMo study takes (data, memories, noise, rank,
    resamples, embedding cache, output)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--data", required=True)
    parser.add_argument("--setting", default="turns", choices=("turns", "observations"))
    parser.add_argument("--noise", type=float, default=0.1)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--resamples", type=int, default=2000)
    parser.add_argument("--cache-dir", default=None)
    parser.add_argument("--out", default=out)
    return parser


__all__ = ["locomo_arguments", "print_table", "script_metadata", "write_script_json"]
