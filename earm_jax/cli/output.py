"""Result tables of the CLI commands, and how the CLI talks to a person.

Policies appear under the README's names and in its order
(:mod:`earm_jax.eval.labels`); a policy a result holds that the labels do not
know is shown by its key, after the known ones. Cells are ``mean ±h`` where
``h`` is the half-width of the 95% CI (exact bounds are in the JSON), so a row
of four metrics fits on one line at 100 columns.

Run metadata and JSON files: :mod:`earm_jax.jobs.metadata`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from earm_jax.eval import labels

TABLE_WIDTH = 100
"""Tables are laid out to fit this many columns."""

CI_NOTE = "cells: mean ±half-width of the 95% CI over queries (exact bounds: JSON)"


def console() -> Console:
    """A console at least :data:`TABLE_WIDTH` wide; plain text (no colour, no
    live bars) when the output is not a terminal, e.g. redirected to a file."""
    interactive = sys.stdout.isatty()
    width = max(Console().width, TABLE_WIDTH) if interactive else TABLE_WIDTH
    return Console(
        width=width,
        force_terminal=interactive or None,
        no_color=not interactive or "NO_COLOR" in os.environ,
        highlight=False,
    )


def _number(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _cell(entry: dict[str, Any]) -> str:
    """``mean ±half-width``; undefined values (JSON null) print as n/a."""
    low, high = entry["ci"]
    mean = entry["mean"]
    if mean is None or low is None or high is None:
        return _number(mean)
    return f"{mean:.3f} ±{(high - low) / 2:.3f}".replace("±0.", "±.")


def _table(title: str, caption: str | None = None) -> Table:
    return Table(
        title=title,
        caption=caption,
        box=box.SIMPLE_HEAD,
        caption_justify="left",
        title_justify="left",
        pad_edge=False,
    )


def results_table(summary: dict[str, Any], metrics: list[str], title: str) -> Table:
    """Policy x metric (mean ±CI), calls per query, and gain recovery on
    ``metrics[0]`` (the caption says what that is)."""
    recovery_metric = metrics[0]
    table = _table(
        title,
        caption=f"{CI_NOTE}.\n{labels.gain_recovery_note(recovery_metric)}.",
    )
    table.add_column("policy", no_wrap=True)
    table.add_column("calls/\nquery", justify="right", no_wrap=True)
    for metric in metrics:
        table.add_column(metric, justify="right", no_wrap=True)
    table.add_column(
        f"gain recovery\n({recovery_metric})", justify="right", no_wrap=True
    )
    recovery = summary.get("gain_recovery_by_policy", {})
    for policy in labels.ordered(summary["results"]):
        row = summary["results"][policy]
        gain = recovery.get(policy, {}).get(recovery_metric)
        table.add_row(
            labels.policy_label(policy),
            f"{row['calls_per_query']:.1f}",
            *[_cell(row[m]) for m in metrics],
            _cell(gain) if gain else "",
        )
    return table


def contrasts_table(summary: dict[str, Any], metrics: list[str], title: str) -> Table:
    """Paired contrasts (treatment − baseline, same queries), README order."""
    table = _table(title, caption="paired difference, mean ±half-width of 95% CI")
    table.add_column("contrast", no_wrap=True)
    for metric in metrics:
        table.add_column(metric, justify="right", no_wrap=True)
    for name in labels.ordered_contrasts(summary["contrasts"]):
        row = summary["contrasts"][name]
        table.add_row(labels.contrast_label(name), *[_cell(row[m]) for m in metrics])
    return table


def shown_metrics(ks: tuple[int, ...] | list[int]) -> list[str]:
    """The metrics a table shows: Recall@K for each K, nDCG@K0 and MRR."""
    return [f"recall@{k}" for k in ks] + [f"ndcg@{ks[0]}", "mrr"]


def expansion_lines(summary: dict[str, Any]) -> list[str]:
    """One line per cut-off K about search expansion (``summary["expansion"]``;
    none without it): expanded memories in the top K and their precision."""
    expansion = summary.get("expansion")
    if not expansion:
        return []
    lines = []
    for key, entry in expansion.items():
        if not key.startswith("@"):
            continue
        precision = entry["precision"]["mean"]
        lines.append(
            f"{expansion['policy']} top{key[1:]}: "
            f"{entry['expanded_per_query']['mean']:.3f} expanded memories per "
            f"query, in {entry['queries_with_expanded']['mean']:.1%} of queries, "
            "precision " + ("n/a" if precision is None else f"{precision:.1%}")
        )
    return lines


def tie_note(summary: dict[str, Any], cause: str, fix: str) -> str | None:
    """The line that says why the anchored policies' rows equal Full's, when
    they pay for the whole pool as Full does (``cause``: why every query got
    the whole pool; ``fix``: what to change), else ``None``."""
    results = summary.get("results", {})
    full, mixed = results.get("full"), results.get("mixed")
    if not full or not mixed or not full.get("calls"):
        return None
    if mixed.get("calls") != full["calls"]:
        return None
    return (
        f"why the rows tie: {cause}, where the anchored policies pay for the "
        f"whole pool, as Full does; {fix}"
    )


def print_summary(
    out: Console,
    summary: dict[str, Any],
    metrics: list[str],
    title: str,
    notes: list[str],
    why: str | None = None,
) -> None:
    """Prints a run's results table, the ``why`` line right under it (plain
    text; e.g. :func:`tie_note`), its paired contrasts, the ``notes`` lines
    (rich markup) and its expansion lines (plain text): the report that
    ``earm simulate`` and ``earm locomo`` share."""
    out.print(results_table(summary, metrics, title))
    if why:
        out.print(why, markup=False)
    out.print(contrasts_table(summary, metrics, "Paired contrasts"))
    for note in notes:
        out.print(note)
    for line in expansion_lines(summary):
        out.print(line, markup=False)


__all__ = [
    "expansion_lines",
    "CI_NOTE",
    "TABLE_WIDTH",
    "console",
    "contrasts_table",
    "print_summary",
    "results_table",
    "shown_metrics",
    "tie_note",
]
