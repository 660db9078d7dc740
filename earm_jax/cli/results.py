"""``earm results``: the docs' results tables, from the result JSONs."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.errors import UserError, user_errors
from earm_jax.jobs.rerun import RerunError, rerun_json, table_differences
from earm_jax.jobs.results_tables import (
    TABLE_LIST,
    marked_tables,
    page_diff,
    provenance,
    read_table_list,
    regenerate,
    source_folders,
    stale_tables,
)


def _default_pages() -> list[Path]:
    return [Path("README.md"), *sorted(Path("docs").glob("*.md"))]


def _read_json(path: Path, fix: str) -> dict:
    with user_errors(fix, OSError, json.JSONDecodeError):
        return json.loads(path.read_text(encoding="utf-8"))


def _find(source: str, folders: list[Path]) -> Path:
    """The first of the folders holding ``source`` (the results folder's own
    path, for the error, where none does)."""
    for folder in folders:
        if (folder / source).is_file():
            return folder / source
    return folders[0] / source


def _read_page(page: Path) -> str:
    with user_errors(
        "pass pages that exist (default README.md and docs/*.md)", OSError
    ):
        return page.read_text(encoding="utf-8")


def results(
    pages: Annotated[
        list[Path] | None,
        typer.Argument(help="Pages to rewrite (default README.md and docs/*.md)."),
    ] = None,
    results_folder: Annotated[
        Path, typer.Option("--results", help="Folder of result JSONs.")
    ] = Path("benchmarks/results"),
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Change nothing; print a diff and exit 1 where a table is stale.",
        ),
    ] = False,
    verify: Annotated[
        str | None,
        typer.Option(
            "--verify",
            help="Change nothing; rerun the command each source JSON of this "
            "table recorded and exit 1 where a number it shows moved.",
        ),
    ] = None,
    only: Annotated[
        list[str] | None,
        typer.Option(
            "--source",
            help="With --verify: rerun only this source JSON (repeatable).",
        ),
    ] = None,
    tolerance: Annotated[
        float,
        typer.Option(
            "--tolerance",
            help="With --verify: the largest difference that still agrees.",
            min=0.0,
        ),
    ] = 0.002,
) -> None:
    """Rewrite the generated results tables of the pages from the result JSONs.

    A table sits between `<!-- results:NAME -->` and `<!-- /results:NAME -->`;
    the results folder's tables.json says which JSON feeds which table (a JSON
    is looked up in that folder, then in the `folders` tables.json names).
    """
    pages = pages or _default_pages()
    table_list = results_folder / TABLE_LIST
    if not table_list.is_file():
        raise UserError(
            f"no {TABLE_LIST} in {str(results_folder)!r}",
            "run from the repository root or pass --results benchmarks/results",
        )
    table_payload = _read_json(table_list, f"fix {table_list}")
    with user_errors(
        f"fix {table_list}: each table needs columns and rows", KeyError, ValueError
    ):
        tables = read_table_list(table_payload)
        folders = [results_folder, *source_folders(table_payload, results_folder)]
    if verify is not None:
        _verify(verify, tables, folders, only or [], tolerance)
        return
    texts = {str(page): _read_page(page) for page in pages}
    shown = {name for text in texts.values() for name in marked_tables(text)}
    sources = {
        source for name in shown if name in tables for source in tables[name].sources()
    }
    payloads = {
        source: _read_json(
            _find(source, folders),
            f"commit {source} to {results_folder} or drop its table from {TABLE_LIST}",
        )
        for source in sorted(sources)
    }
    with user_errors(f"fix {table_list} or the page's marker", KeyError):
        fresh = regenerate(texts, tables, payloads)
    stale = {page: stale_tables(texts[page], fresh[page]) for page in texts}
    stale = {page: names for page, names in stale.items() if names}
    if check:
        for page, names in stale.items():
            typer.echo(f"{page}: stale tables {', '.join(names)}")
            typer.echo(page_diff(page, texts[page], fresh[page]))
        if stale:
            typer.echo(f"run `earm results` to regenerate ({len(stale)} pages)")
            raise typer.Exit(1)
        typer.echo(f"{len(shown)} tables on {len(texts)} pages match the result JSONs")
        return
    for page, names in stale.items():
        Path(page).write_text(fresh[page], encoding="utf-8")
        typer.echo(f"wrote {page}: {', '.join(names)}")
    if not stale:
        typer.echo(f"{len(shown)} tables already match the result JSONs")


def _verify(
    name: str,
    tables: dict,
    folders: list[Path],
    only: list[str],
    tolerance: float,
) -> None:
    """Reruns the table's sources into a temporary folder and compares every
    number the table shows; exits 1 naming each that moved."""
    if name not in tables:
        raise UserError(
            f"no table {name!r} in {TABLE_LIST}",
            "pass a table name the pages mark (`<!-- results:NAME -->`)",
        )
    spec = tables[name]
    sources = spec.sources()
    unknown = [source for source in only if source not in sources]
    if unknown:
        raise UserError(
            f"table {name!r} does not read {unknown}", f"pass one of {sources}"
        )
    committed = {
        source: _read_json(_find(source, folders), f"commit {source}")
        for source in sources
    }
    rerun: dict[str, dict] = {}
    for source in only or sources:
        command = provenance(committed[source]).command
        typer.echo(f"rerunning {source}: {command}")
        with tempfile.TemporaryDirectory() as folder:
            with user_errors(f"rerun {source}'s command by hand", RerunError):
                rerun[source] = rerun_json(command, Path(folder))
    with user_errors(f"fix {TABLE_LIST} or the rerun JSON", KeyError):
        moved = table_differences(spec, committed, rerun, tolerance=tolerance)
    for difference in moved:
        typer.echo(difference.line())
    if moved:
        typer.echo(f"{len(moved)} numbers moved by more than {tolerance}")
        raise typer.Exit(1)
    typer.echo(
        f"{name}: every number from {len(rerun)} rerun JSONs agrees within {tolerance}"
    )


def register(app: typer.Typer) -> None:
    app.command("results", short_help="Rewrite the pages' generated results tables.")(
        results
    )


__all__ = ["register"]
