"""``earm notebook``: execute a jupytext notebook, write the .ipynb and figures."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.errors import UserError, user_errors

DEFAULT_NOTEBOOK = Path("notebooks/rank_budget_tradeoffs.md")


def notebook(
    path: Annotated[
        Path, typer.Argument(help="A jupytext notebook (notebooks/*.md).")
    ] = DEFAULT_NOTEBOOK,
    size: Annotated[
        str,
        typer.Option(
            help="small (a check, ~1-2 min on 2 cores) or full (the numbers the "
            "text quotes, ~15 min)."
        ),
    ] = "small",
    out: Annotated[
        Path, typer.Option(help="Folder for <name>.ipynb and <name>_figure<n>.png.")
    ] = Path("notebooks/out"),
    timeout: Annotated[float, typer.Option(help="Seconds per cell.")] = 3600.0,
) -> None:
    """Run a notebook in a fresh kernel; write the executed .ipynb and its PNGs."""
    with user_errors(
        "install the notebook extra: pip install 'earm_jax[notebooks]'",
        ModuleNotFoundError,
    ):
        import nbclient  # noqa: F401

        from earm_jax.jobs.notebook import SIZES, run_notebook
    if size not in SIZES:
        raise UserError(
            f"--size must be small or full, got {size!r}", "e.g. --size small"
        )
    if not path.is_file():
        raise UserError(
            f"notebook {str(path)!r} does not exist",
            "run from the repository root or give the notebook's path "
            f"(default {DEFAULT_NOTEBOOK})",
        )
    from nbclient.exceptions import CellExecutionError

    typer.echo(f"running {path} at size {size} ...", err=True)
    try:
        target, figures, seconds = run_notebook(path, out, size, timeout_s=timeout)
    except CellExecutionError as error:
        first = str(error).strip().splitlines()[-1] if str(error).strip() else ""
        raise UserError(
            f"a cell of {path} failed: {first}",
            f"open {out / (path.stem + '.ipynb')} to see the cell and its traceback",
        ) from error
    typer.echo(f"ran in {seconds:.0f} s; wrote {target}")
    for figure in figures:
        typer.echo(f"wrote {figure}")


def register(app: typer.Typer) -> None:
    app.command("notebook", short_help="Run a notebook in a fresh kernel.")(notebook)


__all__ = ["register"]
