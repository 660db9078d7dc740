"""``earm mcp FOLDER``: the retriever as an MCP memory server (stdio or HTTP)."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.errors import UserError, user_errors
from earm_jax.cli.options import (
    ScorerBackend,
    ScorerDtype,
    ScorerMode,
)
from earm_jax.cli.options import scorer_backend as resolve_scorer_backend

_HOST_PORT = re.compile(r"(?P<host>[^:]+|\[[0-9a-fA-F:]+\]):(?P<port>\d{1,5})")


def parse_host_port(value: str) -> tuple[str, int]:
    """``HOST:PORT`` as ``(host, port)``.

    >>> parse_host_port("127.0.0.1:8765")
    ('127.0.0.1', 8765)
    """
    match = _HOST_PORT.fullmatch(value.strip())
    if match is None or not 0 < int(match["port"]) < 65536:
        raise UserError(
            f"--http must be HOST:PORT, got {value!r}", "e.g. --http 127.0.0.1:8765"
        )
    return match["host"].strip("[]"), int(match["port"])


def _scorer(
    model: Path | None,
    url: str | None,
    name: str | None,
    mode: str,
    backend: str = "torch-float32",
):
    if (model is None) == (url is None):
        raise UserError(
            "earm mcp needs one scorer: --scorer-model DIR or --scorer-url URL",
            "pass a cross-encoder folder (e.g. one written by `earm train-scorer`) "
            "or a vLLM server's URL with --scorer-name",
        )
    if model is not None:
        from earm_jax.scoring.cross_encoder import (
            CrossEncoderScorer,
            CrossEncoderSettings,
        )

        with user_errors("pass a one-label cross-encoder folder"):
            return CrossEncoderScorer(
                model,
                CrossEncoderSettings(backend=backend),  # type: ignore[arg-type]
            )
    if backend != "torch-float32":
        raise UserError(
            f"--scorer-backend {backend} is for --scorer-model (in process), not "
            "--scorer-url",
            "drop --scorer-backend (the server picks its own precision)",
        )
    if not name:
        raise UserError(
            "--scorer-url needs --scorer-name", "the model name the server serves"
        )
    from earm_jax.scoring.vllm import ScorerConfigError, connect

    with user_errors("start the server or fix --scorer-url", ScorerConfigError):
        return connect(url, name, mode)


def register(app: typer.Typer) -> None:
    """Adds the ``mcp`` command to ``app``."""

    @app.command("mcp")
    def mcp_command(
        folder: Annotated[
            Path, typer.Argument(help="Memory folder (one sub-folder per tenant).")
        ],
        http: Annotated[
            str | None,
            typer.Option(
                metavar="HOST:PORT",
                help="Serve streamable HTTP at http://HOST:PORT/mcp (default: stdio).",
            ),
        ] = None,
        scorer_model: Annotated[
            Path | None,
            typer.Option(help="In-process cross-encoder folder (no server)."),
        ] = None,
        scorer_url: Annotated[
            str | None, typer.Option(help="vLLM (OpenAI-compatible) server URL.")
        ] = None,
        scorer_name: Annotated[
            str | None, typer.Option(help="The model --scorer-url serves.")
        ] = None,
        scorer_mode: ScorerMode = "yesno",
        scorer_backend: ScorerBackend = None,
        scorer_dtype: ScorerDtype = None,
        tenant: Annotated[
            str, typer.Option(help="Tenant of tool calls that name none.")
        ] = "default",
        embedder: Annotated[
            Path | None,
            typer.Option(help="sentence-transformers folder (default: MiniLM)."),
        ] = None,
    ) -> None:
        """Serves the memory tools remember, recall, update, forget, get and
        stats over MCP (stdio, or streamable HTTP with --http)."""
        from earm_jax.retriever.mcp_server import build_server
        from earm_jax.retriever.tenants import TenantRetrievers, tenant_folder
        from earm_jax.store.embeddings import Embedder

        address = None if http is None else parse_host_port(http)
        with user_errors("use letters, digits and @+._- for --tenant"):
            tenant_folder(folder, tenant)
        backend = resolve_scorer_backend(scorer_backend, scorer_dtype)
        scorer = _scorer(scorer_model, scorer_url, scorer_name, scorer_mode, backend)
        # No embedding cache on disk: each tenant's journal keeps its memories'
        # vectors, and a shared cache would keep a forgotten text's digest and
        # vector after `forget`. One that an earlier version left goes now.
        stale = folder / ".embedding-cache"
        if stale.is_dir():
            shutil.rmtree(stale)
            print(
                f"earm mcp: removed {stale} (an embedding cache that outlived "
                "forgotten memories); the tenants' journals keep what they need",
                file=sys.stderr,
            )
        with user_errors("pass a sentence-transformers folder to --embedder"):
            text_embedder = Embedder(embedder, cache_dir=False)
        with TenantRetrievers(folder, scorer, text_embedder) as tenants:
            with user_errors("fix the folder or use another one"):
                tenants.get(tenant)  # open (or create) before serving
            server = build_server(tenants, tenant)
            if address is None:
                server.run("stdio")
            else:
                host, port = address
                server.run("streamable-http", host=host, port=port)
        close = getattr(scorer, "close", None)
        if close is not None:
            close()


__all__ = ["parse_host_port", "register"]
