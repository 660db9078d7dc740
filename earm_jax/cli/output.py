"""Result tables of the CLI commands.

Run metadata and JSON files: :mod:`earm_jax.jobs.metadata`.
"""

from __future__ import annotations

from typing import Any

from rich.table import Table


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
