"""The ``earm`` command: one Typer app, each command in its own module.

:func:`run` is the entry point: a mistake the user can fix (a missing file, a bad
option, a server that is not there) prints one ``error: problem — fix`` line on
stderr and exits with status 2; a bug still shows its traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from earm_jax import __version__
from earm_jax.cli import (
    advise,
    locomo,
    mcp,
    notebook,
    plots,
    record_scores,
    results,
    retriever,
    serve_scorer,
    simulate,
    train_scorer,
)
from earm_jax.cli.compile_cache import enable_compilation_cache
from earm_jax.cli.errors import UserError
from earm_jax.cli.options import HELP_STYLE

try:  # typer >= 0.20 carries its own click
    from typer._click.exceptions import ClickException, UsageError
    from typer.exceptions import Abort, Exit
except ImportError:  # pragma: no cover - older typer on top of click
    from click.exceptions import Abort, ClickException, Exit, UsageError

app = typer.Typer(
    help="earm_jax: experience-amortized LLM reranking for agent memory.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Click's plain help (HELP_STYLE) fits any width: flags show as flags.
    **HELP_STYLE,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if value:
        print(f"earm {__version__}")
        raise typer.Exit()


@app.callback()
def _options(
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the version and exit.",
        ),
    ] = False,
    compile_cache: Annotated[
        bool,
        typer.Option(
            "--compile-cache/--no-compile-cache",
            help=(
                "Keep compiled programs on disk ($JAX_COMPILATION_CACHE_DIR, "
                "else xla/ in $EARM_CACHE_DIR) so the next run skips compiling."
            ),
        ),
    ] = True,
) -> None:
    """earm_jax: experience-amortized LLM reranking for agent memory."""
    if compile_cache:
        enable_compilation_cache()


simulate.register(app)
locomo.register(app)
serve_scorer.register(app)
notebook.register(app)
plots.register(app)
results.register(app)
retriever.register(app)
train_scorer.register(app)
record_scores.register(app)
advise.register(app)
mcp.register(app)


def _usage_line(error: UsageError) -> str:
    message = " ".join(error.format_message().split())
    context = getattr(error, "ctx", None)
    command = context.command_path if context is not None else "earm"
    return f"error: {message} — see `{command} --help`"


def run(argv: list[str] | None = None) -> int:
    """Runs ``earm`` with ``argv`` (default ``sys.argv[1:]``); returns the exit
    status."""
    try:
        result = app(args=argv, prog_name="earm", standalone_mode=False)
    except UserError as error:
        print(error.line(), file=sys.stderr)
        return 2
    except UsageError as error:
        print(_usage_line(error), file=sys.stderr)
        return 2
    except Exit as error:
        return int(getattr(error, "exit_code", 0) or 0)
    except (Abort, KeyboardInterrupt):
        print("aborted", file=sys.stderr)
        return 130
    except ClickException as error:
        print(f"error: {' '.join(error.format_message().split())}", file=sys.stderr)
        return error.exit_code
    return result if isinstance(result, int) else 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
