"""``earm mcp FOLDER``: the retriever as an MCP memory server (stdio or HTTP);
``earm mcp-token``: the bearer tokens an HTTP server accepts."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path
from typing import Annotated

import typer

from earm_jax.cli.errors import UserError, user_errors
from earm_jax.cli.options import (
    HELP_STYLE,
    ScorerBackend,
    ScorerDtype,
    ScorerMode,
)
from earm_jax.cli.options import scorer_backend as resolve_scorer_backend
from earm_jax.cli.served_scorer import check_scorer, served_scorer

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


SIMILARITY_MODE_NOTE = (
    "earm mcp: similarity mode: no scorer, so recall returns the memories "
    "most similar to the query (score (1 + cosine) / 2) and calls no scorer; "
    "pass --scorer-model DIR or --scorer-url URL to rerank"
)


def check_access(
    address: tuple[str, int] | None,
    tokens: Path | None,
    no_auth: bool,
    allowed_hosts: list[str],
) -> None:
    """Refuses an HTTP server nobody has to authenticate to, except on a
    loopback address with an explicit ``--no-auth``.

    >>> check_access(("127.0.0.1", 8765), None, True, [])
    >>> try:
    ...     check_access(("0.0.0.0", 8765), None, True, [])
    ... except UserError as error:
    ...     print(error.problem)
    --no-auth serves anyone who reaches 0.0.0.0:8765
    """
    from earm_jax.retriever.mcp_http import is_loopback

    if address is None:
        if tokens is not None or no_auth or allowed_hosts:
            raise UserError(
                "--tokens, --no-auth and --allowed-host apply to --http only",
                "add --http HOST:PORT, or drop them (stdio needs no credentials)",
            )
        return
    host, port = address
    where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    if tokens is not None and no_auth:
        raise UserError("--tokens and --no-auth contradict", "pass one of them")
    if no_auth and not is_loopback(host):
        raise UserError(
            f"--no-auth serves anyone who reaches {where}",
            "use --tokens FILE, or bind a loopback address (127.0.0.1)",
        )
    if tokens is None and not no_auth:
        raise UserError(
            "earm mcp --http needs credentials: --tokens FILE",
            "make one with `earm mcp-token add --tokens FILE --tenant NAME`, or "
            "pass --no-auth on a loopback address (127.0.0.1, ::1, localhost)",
        )


# Repeated from earm_jax.retriever.config, so that checking the flags (and
# --help) imports no JAX; a test checks they agree.
PRESETS = ("best", "learned_calls", "top_similarity", "paper")
QUERY_RETENTIONS = ("keep", "hash-only", "none")


def check_retriever_flags(preset: str | None, query_retention: str | None) -> None:
    """Refuses a ``--preset`` or ``--query-retention`` the retriever does not
    take, and the combinations it refuses.

    >>> check_retriever_flags("learned_calls", "hash-only")
    >>> try:
    ...     check_retriever_flags("learned_calls", "none")
    ... except UserError as error:
    ...     print(error.fix)
    pass --query-retention hash-only or keep, or --preset top_similarity or paper
    """
    if preset is not None and preset not in PRESETS:
        raise UserError(
            f"--preset must be one of {', '.join(PRESETS)}, got {preset!r}",
            "e.g. --preset learned_calls (default: best)",
        )
    if query_retention is not None and query_retention not in QUERY_RETENTIONS:
        raise UserError(
            f"--query-retention must be one of {', '.join(QUERY_RETENTIONS)}, got "
            f"{query_retention!r}",
            "e.g. --query-retention none (default: hash-only)",
        )
    if preset in (None, "best", "learned_calls") and query_retention == "none":
        raise UserError(
            "--query-retention none keeps nothing of a query, but --preset "
            f"{preset or 'best'} pays where a regression on each query's "
            "embedding points and rebuilds it when a tenant reopens",
            "pass --query-retention hash-only or keep, or --preset top_similarity "
            "or paper",
        )


def check_key_file(key_file: Path | None, folder: Path) -> bool:
    """Refuses a ``--key-file`` inside ``folder`` (a copy of the folder must
    not carry the key that guards it), one that is not a private key file, and
    a missing one while ``folder`` holds tenants already (a new key opens none
    of them). Returns whether the key file is to be created."""
    if key_file is None:
        return False
    from earm_jax.store.folder_key import FolderKeyError, read_key_file
    from earm_jax.store.journal_format import JOURNAL_NAME

    resolved, root = key_file.resolve(), folder.resolve()
    if resolved == root or root in resolved.parents:
        raise UserError(
            f"--key-file {key_file} is inside {folder}: a copy or backup of the "
            "folder would carry the key that guards it",
            "keep the key file outside the folder",
        )
    if key_file.exists():
        with user_errors(
            "pass the key file the tenants were created with", FolderKeyError
        ):
            read_key_file(key_file, folder)
        return False
    tenants = (
        sorted(p.name for p in folder.iterdir() if (p / JOURNAL_NAME).exists())
        if folder.is_dir()
        else []
    )
    if tenants:
        raise UserError(
            f"--key-file {key_file} does not exist, and {folder} holds tenants "
            f"already ({', '.join(tenants[:3])}{', ...' if len(tenants) > 3 else ''}"
            "): a new key opens none of them",
            "pass the key file they were created with (or drop --key-file for "
            "unkeyed tenants)",
        )
    return True


def _lock_root(folder: Path):
    """Locks ``folder`` for this server: a second ``earm mcp`` on it is refused
    with one line naming the holder."""
    from earm_jax.store.lock import FolderLock, FolderLockedError

    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    try:
        return FolderLock(folder)
    except FolderLockedError as error:
        holder = error.holder
        raise UserError(
            f"{folder} is in use by another earm mcp (process "
            f"{holder.get('pid', '?')} on {holder.get('host', '?')}, since "
            f"{holder.get('since', '?')})",
            "stop that server, or serve another folder",
        ) from error


def register(app: typer.Typer) -> None:
    """Adds the ``mcp`` and ``mcp-token`` commands to ``app``."""

    @app.command("mcp", short_help="Serve an agent's memory over MCP (stdio or HTTP).")
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
            typer.Option(
                help="In-process cross-encoder: a model folder, or a folder "
                "`earm train-scorer` wrote (its first fold serves; no server)."
            ),
        ] = None,
        scorer_url: Annotated[
            str | None, typer.Option(help="vLLM (OpenAI-compatible) server URL.")
        ] = None,
        scorer_name: Annotated[
            str | None, typer.Option(help="The model --scorer-url serves.")
        ] = None,
        force_weak_scorer: Annotated[
            bool,
            typer.Option(
                "--force-weak-scorer",
                help="Serve a --scorer-model whose manifest measured Full "
                "Recall@10 at or below Semantic's (refused by default).",
            ),
        ] = False,
        scorer_blend: Annotated[
            bool,
            typer.Option(
                help="Blend --scorer-model's answers with the cosine and word "
                "coverage as its folder's similarity_blend.json says (what "
                "`earm locomo` measures); --no-scorer-blend serves the "
                "cross-encoder alone (tenants created before the blend was "
                "served hold its experience).",
            ),
        ] = True,
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
        tokens: Annotated[
            Path | None,
            typer.Option(
                help="Token file of `earm mcp-token add`: --http requires a "
                "bearer token from it, and each token reaches only its tenants."
            ),
        ] = None,
        no_auth: Annotated[
            bool,
            typer.Option(
                "--no-auth",
                help="Serve --http on a loopback address without credentials "
                "(anyone on this machine can then use every tenant).",
            ),
        ] = False,
        allowed_host: Annotated[
            list[str] | None,
            typer.Option(
                metavar="NAME",
                help="A host name clients use to reach --http (e.g. a reverse "
                "proxy's); repeatable. Other Host and Origin headers are refused.",
            ),
        ] = None,
        max_open_tenants: Annotated[
            int,
            typer.Option(
                min=1,
                help="Tenants kept open at once; the least recently used closes.",
            ),
        ] = 32,
        max_tenants: Annotated[
            int,
            typer.Option(
                min=1,
                help="Tenant folders this server creates at most; "
                "a new tenant past it is refused.",
            ),
        ] = 100,
        preset: Annotated[
            str | None,
            typer.Option(
                metavar="NAME",
                help="The retriever preset of every tenant: best (the default for "
                "new tenants), learned_calls, top_similarity or paper. New tenant "
                "folders are created with it; an existing tenant created with "
                "other settings is refused.",
            ),
        ] = None,
        query_retention: Annotated[
            str | None,
            typer.Option(
                metavar="keep|hash-only|none",
                help="What every tenant keeps of a query's text (default: "
                "hash-only, or the tenant's stored setting).",
            ),
        ] = None,
        free_order: Annotated[
            Path | None,
            typer.Option(
                help="Go down a free order (cosine + word coverage, known before "
                "any call) instead of the similarity order: a model folder or "
                "`earm train-scorer` build holding free_order.json (the fold it "
                "serves), or that file. With --preset (default best), new tenant "
                "folders are created with it; an existing tenant created with "
                "other settings is refused.",
            ),
        ] = None,
        key_file: Annotated[
            Path | None,
            typer.Option(
                help="Key file of the tenant folders (HMAC digests): each one "
                "the server creates is keyed with it, each existing one opens "
                "only with it. Created 0600 when missing; keep it outside FOLDER "
                "and keep a copy.",
            ),
        ] = None,
    ) -> None:
        """Serves the memory tools remember, recall, update, forget, get and
        stats over MCP (stdio, or streamable HTTP with --http). Without
        --scorer-model or --scorer-url it runs in similarity mode: memories in
        embedding-similarity order, no scorer calls."""
        from earm_jax.retriever.mcp_http import TokenFileError, TokenFileVerifier
        from earm_jax.retriever.mcp_server import build_server
        from earm_jax.retriever.tenants import TenantRetrievers, tenant_folder
        from earm_jax.store.embeddings import Embedder
        from earm_jax.store.folder_key import FolderKeyError, create_key_file
        from earm_jax.store.journal import CorruptFolderError
        from earm_jax.store.lock import FolderLockedError

        address = None if http is None else parse_host_port(http)
        allowed_hosts = list(allowed_host or [])
        check_access(address, tokens, no_auth, allowed_hosts)
        verifier = None
        if tokens is not None:
            with user_errors(
                "make it with `earm mcp-token add --tokens FILE --tenant NAME`",
                TokenFileError,
            ):
                verifier = TokenFileVerifier(tokens)
        with user_errors("use letters, digits and @+._- for --tenant"):
            tenant_folder(folder, tenant)
        backend = resolve_scorer_backend(scorer_backend, scorer_dtype)
        check_scorer(scorer_model, scorer_url, scorer_name, backend, force_weak_scorer)
        check_retriever_flags(preset, query_retention)
        order = None
        if free_order is not None:
            from earm_jax.scoring.scorer_manifest import free_order_from

            with user_errors(
                "pass a folder `earm train-scorer` wrote (word coverage on), or "
                "its free_order.json"
            ):
                order = free_order_from(free_order)
        new_key = check_key_file(key_file, folder)
        root_lock = _lock_root(folder)
        try:
            if new_key and key_file is not None and not key_file.exists():
                with user_errors(
                    "pass a --key-file path in a writable folder", OSError
                ):
                    create_key_file(key_file, folder)
                print(
                    f"earm mcp: created key file {key_file} for the tenants of "
                    f"{folder}; keep a copy where the folder's backups are not "
                    "(without it no tenant folder opens)",
                    file=sys.stderr,
                )
            # Each tenant caches its embeddings in its own folder, and `forget`
            # purges them there; a cache shared by every tenant (which an
            # earlier version kept here) would keep a forgotten text's digest
            # and vector, so it goes now.
            stale = folder / ".embedding-cache"
            if stale.is_dir():
                shutil.rmtree(stale)
                print(
                    f"earm mcp: removed {stale} (an embedding cache that outlived "
                    "forgotten memories); each tenant now caches in its own folder",
                    file=sys.stderr,
                )
            with user_errors("pass a sentence-transformers folder to --embedder"):
                text_embedder = Embedder(embedder, cache_dir=False)
            scorer = served_scorer(
                scorer_model,
                scorer_url,
                scorer_name,
                scorer_mode,
                backend,
                text_embedder,
                scorer_blend,
            )
            from earm_jax.retriever.config import RetrieverConfig

            tenants = TenantRetrievers(
                folder,
                scorer,
                text_embedder,
                None
                if preset is None and order is None
                else RetrieverConfig(preset=preset or "best", free_order=order),
                max_open=max_open_tenants,
                max_tenants=max_tenants,
                embedding_cache=True,
                runtime=None
                if query_retention is None
                else {"query_retention": query_retention},
                key_file=key_file,
            )
            if scorer is None:
                print(SIMILARITY_MODE_NOTE, file=sys.stderr)
            try:
                if verifier is None:  # with tokens, each token names its tenants
                    with user_errors(
                        "stop the process that uses it, or fix the folder",
                        ValueError,
                        CorruptFolderError,
                        FolderLockedError,
                    ):
                        with user_errors(
                            "pass --key-file with the key the tenants were "
                            "created with (none for unkeyed tenants)",
                            FolderKeyError,
                        ):
                            with tenants.lease(tenant):  # open before serving
                                pass
                if address is None:
                    build_server(tenants, tenant).run("stdio")
                else:
                    from earm_jax.retriever.mcp_http import serve_http

                    host, port = address
                    server = build_server(
                        tenants,
                        tenant,
                        token_verifier=verifier,
                        server_url=f"http://{host}:{port}"
                        if ":" not in host
                        else f"http://[{host}]:{port}",
                    )
                    serve_http(server, host, port, allowed_hosts)
            finally:
                tenants.close()
            close = getattr(scorer, "close", None)
            if close is not None:
                close()
        finally:
            root_lock.release()

    token_app = typer.Typer(
        help="Bearer tokens of `earm mcp --http --tokens FILE`.",
        no_args_is_help=True,
        **HELP_STYLE,
    )

    @token_app.command(
        "add", short_help="Create a token for --tenant and print it once."
    )
    def token_add(
        tokens: Annotated[
            Path, typer.Option(help="The token file (created 0600 if missing).")
        ],
        tenant: Annotated[
            list[str],
            typer.Option(
                help="A tenant the token may use (repeatable; the first is the "
                "default of calls that name none)."
            ),
        ],
    ) -> None:
        """Creates a random token for --tenant and prints it once (the file
        keeps only its SHA-256)."""
        from earm_jax.retriever.mcp_http import TokenFileError, add_token

        with user_errors(
            "use letters, digits and @+._- for --tenant, and a token file "
            "`earm mcp-token` wrote",
            ValueError,
            TokenFileError,
        ):
            token_id, token = add_token(tokens, tenant)
        print(token)
        print(
            f"token {token_id} for {', '.join(tenant)} added to {tokens}; it is "
            "shown only now (send it as `Authorization: Bearer TOKEN`)",
            file=sys.stderr,
        )

    @token_app.command("list")
    def token_list(
        tokens: Annotated[Path, typer.Option(help="The token file.")],
    ) -> None:
        """Lists the tokens' ids, tenants and creation times (never a token)."""
        from earm_jax.retriever.mcp_http import TokenFileError, read_tokens

        with user_errors(
            "pass a token file `earm mcp-token add` wrote", TokenFileError
        ):
            data = read_tokens(tokens)
        for entry in data["tokens"]:
            print(
                f"{entry.get('id', '?')}  {entry.get('created', '?')}  "
                f"{','.join(entry['tenants'])}"
            )

    @token_app.command("revoke", short_help="Remove a token.")
    def token_revoke(
        token_id: Annotated[str, typer.Argument(help="The id `list` shows.")],
        tokens: Annotated[Path, typer.Option(help="The token file.")],
    ) -> None:
        """Removes a token: a running server refuses it from its next request."""
        from earm_jax.retriever.mcp_http import TokenFileError, revoke_token

        with user_errors(
            "see the ids with `earm mcp-token list`", KeyError, TokenFileError
        ):
            tenants = revoke_token(tokens, token_id)
        print(f"revoked {token_id} (tenants {', '.join(tenants)})", file=sys.stderr)

    app.add_typer(token_app, name="mcp-token")


__all__ = [
    "PRESETS",
    "QUERY_RETENTIONS",
    "SIMILARITY_MODE_NOTE",
    "check_access",
    "check_key_file",
    "check_retriever_flags",
    "check_scorer",
    "parse_host_port",
    "register",
]
