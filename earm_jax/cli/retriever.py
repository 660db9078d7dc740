"""``earm retriever check|repair PATH``: inspect and fix a retriever folder."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.options import HELP_STYLE
from earm_jax.retriever import (
    CorruptFolderError,
    DiskFullError,
    FolderKeyError,
    FolderLockedError,
    check,
    repair,
)

KeyFile = Annotated[
    Path | None,
    typer.Option(
        help="The folder's key file (a folder created keyed opens only with it)."
    ),
]


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
        key_file: KeyFile = None,
    ) -> None:
        """Checks settings, every row's checksum, operations, the delete log
        and snapshot; each damaged row is one finding (exit 1 if any)."""
        try:
            report = check(path, deep=deep, key_file=key_file)
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
        key_file: KeyFile = None,
    ) -> None:
        """Restores what the journal can rebuild (the snapshot, damaged paid
        scores) and names what it cannot (exit 1: restore from a backup)."""
        try:
            actions = repair(path, key_file=key_file)
        except (FolderLockedError, DiskFullError) as error:
            typer.echo(str(error), err=True)
            raise typer.Exit(2) from None
        except (CorruptFolderError, FolderKeyError) as error:
            typer.echo(str(error), err=True)
            raise typer.Exit(1) from None
        for action in actions:
            typer.echo(action)

    app.add_typer(group, name="retriever")
