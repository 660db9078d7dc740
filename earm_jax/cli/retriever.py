"""``earm retriever check|repair PATH``: inspect and fix a retriever folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.options import HELP_STYLE
from earm_jax.retriever import (
    CorruptFolderError,
    DiskFullError,
    FolderLockedError,
    check,
    repair,
)


def register(app: typer.Typer) -> None:
    """Adds the ``retriever`` command group to ``app``."""
    group = typer.Typer(
        help="Check or repair an online retriever's folder.",
        no_args_is_help=True,
        **HELP_STYLE,
    )

    @group.command(
        "check", short_help="Check a folder's rows, operations and snapshot."
    )
    def check_command(
        path: Annotated[Path, typer.Argument(help="The retriever's folder.")],
        deep: Annotated[
            bool,
            typer.Option(help="Also replay the whole journal and compare the state."),
        ] = False,
    ) -> None:
        """Checks settings, every row's checksum, operations and snapshot; each
        damaged row is one finding (exit 1 if any)."""
        try:
            report = check(path, deep=deep)
        except (FolderLockedError, DiskFullError) as error:
            typer.echo(str(error), err=True)
            raise typer.Exit(2) from None
        if report.ok:
            typer.echo(
                f"{path}: ok ({report.num_memories} memories, {report.num_queries} "
                f"queries, {report.num_scores} paid scores, snapshot at operation "
                f"{report.snapshot_seq} of {report.last_seq})"
            )
            return
        for problem in report.problems:
            typer.echo(f"problem: {problem}", err=True)
        raise typer.Exit(1)

    @group.command("repair", short_help="Restore what the journal can rebuild.")
    def repair_command(
        path: Annotated[Path, typer.Argument(help="The retriever's folder.")],
    ) -> None:
        """Restores what the journal can rebuild (the snapshot, damaged paid
        scores) and names what it cannot (exit 1: restore from a backup)."""
        try:
            actions = repair(path)
        except (FolderLockedError, DiskFullError) as error:
            typer.echo(str(error), err=True)
            raise typer.Exit(2) from None
        except CorruptFolderError as error:
            typer.echo(str(error), err=True)
            raise typer.Exit(1) from None
        for action in actions:
            typer.echo(action)

    app.add_typer(group, name="retriever")
