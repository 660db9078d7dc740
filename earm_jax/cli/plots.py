"""``earm plots``: the docs figures, from the result JSONs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.errors import UserError, user_errors


def plots(
    results: Annotated[Path, typer.Option(help="Folder of result JSONs.")] = Path(
        "benchmarks/results"
    ),
    out: Annotated[
        Path | None,
        typer.Option(help="Folder for the PNGs (or --in-place)."),
    ] = None,
    in_place: Annotated[
        bool,
        typer.Option(
            "--in-place",
            help="Redraw the tracked figures: the folder figures/ beside the "
            "results (benchmarks/results/figures by default).",
        ),
    ] = False,
    metric: Annotated[str, typer.Option(help="Quality metric to draw.")] = "recall@10",
) -> None:
    """Draw the figures (quality vs calls, stages, latency, throughput).

    From the result JSONs: quality vs calls and per-stage curves (simulation and
    LoCoMo), the LoCoMo grid, latency vs history, throughput vs streams.
    """
    with user_errors(
        "install the plot extra: pip install 'earm_jax[plot]'", ImportError
    ):
        import matplotlib  # noqa: F401

        from earm_jax.jobs.plots import (
            FIGURE_LIST,
            benchmark_figures,
            read_figure_list,
        )
    if not results.is_dir():
        raise UserError(
            f"--results {str(results)!r} is not a folder",
            "run from the repository root or pass --results benchmarks/results",
        )
    with user_errors(
        f"the results folder lists its figures in {FIGURE_LIST} (see "
        "benchmarks/results/figures.json)"
    ):
        figures = read_figure_list(results)
    if out is None and not in_place:
        raise UserError(
            "earm plots writes only where told",
            "pass --out DIR, or --in-place to redraw the tracked figures in "
            f"{results / 'figures'}",
        )
    if out is not None and in_place:
        raise UserError("--out and --in-place name two places", "pass one of them")
    out = results / "figures" if out is None else out
    with user_errors(
        "rerun the job that wrote the JSON, or pass another --metric (e.g. recall@10)",
        KeyError,
    ):
        written = benchmark_figures(results, out, metric)
    if not written:
        names = ", ".join(sorted({figure.source for figure in figures}))
        raise UserError(
            f"no result JSON found in {str(results)!r}", f"expected {names}"
        )
    for path in written:
        typer.echo(f"wrote {path}")


def register(app: typer.Typer) -> None:
    app.command("plots", short_help="Draw the docs figures from the result JSONs.")(
        plots
    )


__all__ = ["register"]
