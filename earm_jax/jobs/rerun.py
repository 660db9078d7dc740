"""Rerun the command a result JSON recorded and compare the numbers.

A committed result JSON records the command that wrote it (``command``). This
module turns that line back into a process that writes a fresh JSON somewhere
else (the output option pointed at a temporary file, plots dropped), and
compares what a docs table reads from the committed JSON with what it reads
from the fresh one. ``earm results --verify`` and the claims test tier both
stand on it, so a change to the code behind a claim shows as a number that
moved, named by table, row and column.

:func:`rerun_argv` only builds the process; :func:`rerun_json` runs it.

Example:
    >>> argv = rerun_argv(
    ...     "earm simulate --json benchmarks/results/a.json --plot a.png --quiet",
    ...     Path("/tmp/fresh.json"), Path("."), python="python")
    >>> argv[3:]
    ['simulate', '--json', '/tmp/fresh.json', '--quiet']
"""

from __future__ import annotations

import json
import math
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from earm_jax.jobs.results_tables import TableSpec, cell_values

OUTPUT_OPTIONS = ("--json", "--out")
"""Options that name the JSON a command writes: pointed at the fresh file."""

DROPPED_OPTIONS = ("--plot",)
"""Options whose value is a side output a rerun does not need."""

SCRIPT_FOLDERS = ("benchmarks", "experiments")
"""Where a command recorded as a bare ``script.py`` lives."""

CHAIN_TOKENS = ("&&", "||", ";", "|")


class RerunError(ValueError):
    """A recorded command that cannot be rerun as it stands."""


class Difference(NamedTuple):
    """One number a table shows that the rerun does not reproduce."""

    table: str
    source: str
    row: str
    column: str
    committed: float
    rerun: float

    def line(self) -> str:
        return (
            f"{self.table}: `{self.source}` row {self.row!r}, column "
            f"{self.column!r}: committed {self.committed:.4f}, rerun "
            f"{self.rerun:.4f} (Δ {self.rerun - self.committed:+.4f})"
        )


def _program(head: str, root: Path, python: str) -> list[str]:
    """The process that runs a command's first word."""
    if head == "earm":
        return [python, "-m", "earm_jax.cli.main"]
    if head in ("python", "python3"):
        return [python]
    if head.endswith(".py"):
        for folder in ("", *SCRIPT_FOLDERS):
            if (root / folder / head).is_file():
                return [python, str(Path(folder) / head)] if folder else [python, head]
        raise RerunError(f"the recorded script {head!r} is not in {SCRIPT_FOLDERS}")
    raise RerunError(f"cannot rerun a command starting with {head!r}")


def rerun_argv(
    command: str,
    out: Path,
    root: Path,
    *,
    python: str,
    replace: Mapping[str, str] | None = None,
) -> list[str]:
    """The argv that reruns ``command`` (as a result JSON recorded it) from
    ``root``, writing its JSON to ``out``; an option in ``replace`` takes that
    value instead of the recorded one (a data folder that lives elsewhere).

    Raises:
        RerunError: a chained command, one that names no output option, or a
            program this cannot start.
    """
    words = shlex.split(command)
    if not words:
        raise RerunError("the JSON records an empty command")
    if any(word in CHAIN_TOKENS for word in words) or words[-1].endswith(")"):
        raise RerunError(
            "the recorded command is a chain or carries a note; rerun its parts by hand"
        )
    argv = _program(words[0], root, python)
    rest = words[1:]
    if argv[-1] == python and rest and rest[0].endswith(".py"):
        argv.append(rest.pop(0))
    pointed = False
    index = 0
    while index < len(rest):
        word = rest[index]
        name, equals, value = word.partition("=")
        if name in OUTPUT_OPTIONS:
            argv += [name, str(out)]
            pointed = True
            index += 1 if equals else 2
            continue
        if name in DROPPED_OPTIONS:
            index += 1 if equals else 2
            continue
        if replace and name in replace:
            argv += [name, replace[name]]
            index += 1 if equals else 2
            continue
        argv.append(word)
        index += 1
    if not pointed:
        if argv[1:2] == ["-m"]:
            raise RerunError("the recorded command names no --json: it wrote no JSON")
        # A script writes its default path when not told: never the committed file.
        argv += ["--out", str(out)]
    return argv


def rerun_json(
    command: str,
    folder: Path,
    *,
    root: Path = Path("."),
    python: str = sys.executable,
    env: Mapping[str, str] | None = None,
    replace: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Reruns ``command`` from ``root`` into ``folder``; returns the JSON it
    wrote.

    Raises:
        RerunError: the command cannot be rerun, fails (its last output lines
            are in the message) or writes no JSON.
    """
    out = folder / "rerun.json"
    argv = rerun_argv(command, out, root, python=python, replace=replace)
    done = subprocess.run(
        argv, cwd=root, env=env, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        tail = " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])
        raise RerunError(f"`{command}` exited {done.returncode}: {tail}")
    if not out.is_file():
        raise RerunError(f"`{command}` wrote no JSON at {out}")
    return json.loads(out.read_text(encoding="utf-8"))


def _numbers(values: Sequence[Any]) -> list[float]:
    return [
        float(value)
        for value in values
        if isinstance(value, (int, float)) and not isinstance(value, bool)
    ]


def table_differences(
    spec: TableSpec,
    committed: Mapping[str, Mapping[str, Any]],
    rerun: Mapping[str, Mapping[str, Any]],
    *,
    tolerance: float,
) -> list[Difference]:
    """Every number the table shows from a rerun source that differs from the
    committed one by more than ``tolerance`` (a number missing from the rerun
    counts, as NaN). Only the sources in ``rerun`` are compared."""
    found: list[Difference] = []
    for row in spec.rows:
        label = str(row.get("label", row.get("policy", "")))
        for column in spec.columns:
            source = column.source or row.get("source", spec.source)
            if source not in rerun:
                continue
            old = _numbers(cell_values(column, row, committed[source]))
            try:
                new = _numbers(cell_values(column, row, rerun[source]))
            except KeyError:
                new = []
            new += [math.nan] * (len(old) - len(new))
            for before, after in zip(old, new, strict=False):
                if not abs(after - before) <= tolerance:
                    found.append(
                        Difference(
                            spec.name, source, label, column.header, before, after
                        )
                    )
    return found


__all__ = [
    "DROPPED_OPTIONS",
    "OUTPUT_OPTIONS",
    "Difference",
    "RerunError",
    "rerun_argv",
    "rerun_json",
    "table_differences",
]
