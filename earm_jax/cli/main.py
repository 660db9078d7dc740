"""The ``earm`` command: one Typer app, each command in its own module."""

from __future__ import annotations

import typer

from earm_jax.cli import locomo, retriever, serve_scorer, simulate

app = typer.Typer(
    help="earm_jax: experience-amortized LLM reranking for agent memory.",
    no_args_is_help=True,
    add_completion=False,
)
simulate.register(app)
locomo.register(app)
serve_scorer.register(app)
retriever.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
