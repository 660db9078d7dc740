"""Tables: README names and order, CIs on one line at 100 columns, new policies."""

from __future__ import annotations

import io

from rich.console import Console

from earm_jax.cli import output
from earm_jax.eval import labels

METRICS = ["recall@10", "recall@20", "ndcg@10", "mrr"]


def _entry(mean: float) -> dict:
    return {"mean": mean, "ci": [mean - 0.0123, mean + 0.0145]}


def _summary(policies: list[str]) -> dict:
    results = {
        p: {"calls": 100, "calls_per_query": 58.0, **{m: _entry(0.5) for m in METRICS}}
        for p in policies
    }
    contrasts = {
        name: {m: _entry(0.01) for m in METRICS}
        for name in (
            "mixed-top_similarity",
            "best-top_similarity",
            "mixed-semantic",
            "best-mixed",
            "observed_backfill-semantic",
        )
    }
    recovery = {p: {m: _entry(1.828) for m in METRICS} for p in policies}
    return {
        "results": results,
        "contrasts": contrasts,
        "gain_recovery_by_policy": recovery,
    }


def _render(table) -> list[str]:
    buffer = io.StringIO()
    Console(file=buffer, width=output.TABLE_WIDTH, no_color=True).print(table)
    return buffer.getvalue().splitlines()


# alphabetical, as the JSON stores them, plus a policy the labels do not know
STORED = sorted(labels.POLICY_LABELS) + ["best"]


def test_results_table_uses_readme_names_and_order_and_fits_100_columns():
    lines = _render(output.results_table(_summary(STORED), METRICS, "title"))
    names = [*labels.POLICY_LABELS.values(), "best"]
    rows = [
        next(
            i
            for i, line in enumerate(lines)
            if line.startswith(f" {n} ") or line.startswith(f"{n} ")
        )
        for n in names
    ]
    assert rows == sorted(rows), "README order, unknown policies last"
    assert all(len(line) <= output.TABLE_WIDTH for line in lines)
    assert not any("…" in line for line in lines), "no cell is cut"
    body = "\n".join(lines)
    assert "0.500 ±.013" in body  # the whole CI on the policy's line
    assert "gain recovery" in body and "(recall@10)" in body
    assert "above 1 it beats Full" in body  # says why 1.828 can happen


def test_contrasts_table_labels_new_policies_after_the_known_ones():
    lines = _render(output.contrasts_table(_summary(STORED), METRICS, "contrasts"))
    body = "\n".join(lines)
    assert "best − Top-similarity" in body and "best − Mixed (EARM)" in body
    assert body.index("Mixed (EARM) − Semantic") < body.index("best − Mixed (EARM)")
    assert all(len(line) <= output.TABLE_WIDTH for line in lines)
    assert not any("…" in line for line in lines)


def test_print_summary_prints_tables_then_notes_then_expansion_lines():
    buffer = io.StringIO()
    console = Console(file=buffer, width=output.TABLE_WIDTH, no_color=True)
    summary = _summary(STORED)
    output.print_summary(console, summary, METRICS, "the title", ["a [b]bold[/b] note"])
    text = buffer.getvalue()
    tables = _render(output.results_table(summary, METRICS, "the title"))
    tables += _render(output.contrasts_table(summary, METRICS, "Paired contrasts"))
    # The notes take rich markup ("[b]" is bold); without expansion, no more lines.
    assert text.splitlines() == [*tables, "a bold note"]


def test_the_tie_note_is_said_only_when_the_anchored_rows_pay_like_full():
    summary = _summary(["semantic", "mixed", "top_similarity", "full"])
    line = output.tie_note(summary, "with --queries 5 every query is early", "fix")
    assert line == (
        "why the rows tie: with --queries 5 every query is early, where the "
        "anchored policies pay for the whole pool, as Full does; fix"
    )
    summary["results"]["mixed"]["calls"] = 40  # a later stage paid less
    assert output.tie_note(summary, "cause", "fix") is None


def test_the_why_line_comes_right_under_the_results_table():
    console = Console(file=io.StringIO(), width=100)
    summary = _summary(["semantic", "mixed", "full"])
    output.print_summary(console, summary, METRICS, "T", ["a note"], why="WHY")
    text = console.file.getvalue()
    assert text.index("Full") < text.index("WHY") < text.index("Paired contrasts")
    assert text.index("Paired contrasts") < text.index("a note")
