"""EARM as an MCP memory server (``earm mcp FOLDER``), on the official ``mcp``
Python SDK.

Tools (every one takes an optional ``tenant``; without it the server's
default tenant):

* ``remember(text, metadata=None, id=None)``: stores a memory, returns its id;
* ``recall(query, k=5, where=None)``: the ``k`` most relevant memories, best
  first (``where``: metadata keys that must match);
* ``update(id, text=None, metadata=None, keep_history=True)``: edits a memory
  (a new text starts with no evidence; ``keep_history=False`` forgets the old
  text as ``forget`` does);
* ``forget(ids)``: deletes memories (never returned again, gone from disk);
* ``get(ids)``: the memories ``ids``;
* ``stats()``: memories, queries, scorer calls paid, the calls a reranker
  scoring every candidate of every query would have paid, the ranking
  mode (``"scorer"``, or ``"similarity"`` when the server has no scorer) and
  the pool order (``"similarity"``, or ``"free"``: ``earm mcp --free-order``).

A memory's ``score`` in a ``recall`` is in [0, 1]: the scorer's answer where
it was paid at this query, else the retriever's estimate of it; in similarity
mode (no scorer, no calls) the cosine similarity of query and memory mapped to
[0, 1] as ``(1 + cos) / 2``, and the memories are in that similarity's order
(under a free order: the order's fitted probability that the memory is
evidence, in that order).

A tenant is a folder ``FOLDER/<tenant>/`` of a
:class:`~earm_jax.retriever.tenants.TenantRetrievers`: one tenant never sees
another's memories or scores. With a ``token_verifier`` (HTTP, see
:mod:`earm_jax.retriever.mcp_http`) every call carries a bearer token, and a
call may name only the tenants its token lists (without one: the token's
first); any other is refused before its folder is opened. Every tool awaits
the retriever's coroutine API (:mod:`earm_jax.retriever.asynchronous`), so
concurrent recalls overlap their scoring. A tool that fails (a bad argument,
an unknown id, an argument of the wrong type, which the error names) returns
an MCP tool error whose text is one line; the server keeps serving. A tool's
reply is sent after its write is committed: what a client saw acknowledged
survives a kill.

Install with ``pip install earm_jax[mcp]``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from earm_jax.retriever.online import OnlineRetriever, Retrieved
from earm_jax.retriever.tenants import TenantLimitError, TenantRetrievers
from earm_jax.store.journal import CorruptFolderError
from earm_jax.store.lock import FolderLockedError

_T = TypeVar("_T")

Id = int | str
Tenant = Annotated[
    str | None,
    Field(description="Whose memory (default: the server's tenant)."),
]

INSTRUCTIONS = (
    "Long-term memory. Call `remember` for each fact worth keeping, `recall` "
    "with a question before answering from memory, `update` or `forget` when a "
    "fact changes or must go."
)


def _one_line(error: BaseException) -> str:
    message = error.args[0] if isinstance(error, KeyError) and error.args else error
    text = " ".join(str(message).split()) or type(error).__name__
    return text[:500]


def _argument_errors(tool: str, error: ValidationError) -> str:
    """One line naming each argument that failed validation (not its value:
    that is the caller's data).

    >>> from pydantic import TypeAdapter
    >>> try:
    ...     TypeAdapter(dict[str, int]).validate_python({"k": [5]})
    ... except ValidationError as error:
    ...     print(_argument_errors("recall", error))
    recall: argument k: Input should be a valid integer
    """
    parts = []
    for problem in error.errors():
        location = [str(p) for p in problem["loc"]]
        if location and location[0].endswith("Arguments"):
            location = location[1:]
        name = ".".join(location) or "arguments"
        parts.append(f"argument {name}: {' '.join(problem['msg'].split())}")
    return _one_line(f"{tool}: " + "; ".join(parts))


class _Server(MCPServer):
    """The SDK's server, with argument errors on one line."""

    async def call_tool(self, name, arguments, context=None):
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as error:
            cause = error.__cause__
            if isinstance(cause, ValidationError):
                raise ToolError(_argument_errors(name, cause)) from cause
            raise


def _memories(answer: Retrieved) -> list[dict[str, Any]]:
    position = {mid: i for i, mid in enumerate(answer.memory_ids)}
    out = []
    for mid in answer.by_score():
        i = position[mid]
        out.append(
            {
                "id": mid,
                "text": answer.texts[i],
                "metadata": answer.metadata[i],
                "score": answer.scores[i],
            }
        )
    return out


def build_server(
    tenants: TenantRetrievers,
    tenant: str = "default",
    *,
    name: str = "earm",
    token_verifier: TokenVerifier | None = None,
    server_url: str = "http://127.0.0.1",
) -> MCPServer:
    """The MCP server over ``tenants`` (the caller closes them).

    Args:
      tenants: one retriever per tenant.
      tenant: the tenant of calls that name none (without a token verifier).
      name: the server's name, as clients list it.
      token_verifier: with one, HTTP requests need a bearer token it accepts
        (401 otherwise), and each call may name only the tenants listed in
        the token's ``claims["tenants"]`` (default: the first of them).
      server_url: where the server is reached (the SDK's auth settings name
        it as the issuer of the tokens).
    """

    def tenant_of(named: str | None) -> str:
        if token_verifier is None:
            return named or tenant
        token = get_access_token()
        allowed = list((token.claims or {}).get("tenants", [])) if token else []
        if not allowed:
            raise ToolError("refused: this call carries no token for any tenant")
        if named is None:
            return allowed[0]
        if named not in allowed:
            raise ToolError(
                f"refused: tenant {named!r} is not one of this token's tenants "
                f"({', '.join(allowed)})"
            )
        return named

    async def call(
        tenant_name: str | None, fn: Callable[[OnlineRetriever], Awaitable[_T]]
    ) -> _T:
        chosen = tenant_of(tenant_name)
        try:
            with tenants.lease(chosen) as retriever:
                return await fn(retriever)
        except TenantLimitError as error:
            raise ToolError(
                f"{_one_line(error)}; ask the operator to raise --max-tenants"
            ) from error
        except (
            ValueError,
            KeyError,
            TypeError,
            CorruptFolderError,
            FolderLockedError,
        ) as error:
            raise ToolError(_one_line(error)) from error
        except (OSError, sqlite3.Error) as error:
            # A full disk (DiskFullError names the folder and its free bytes)
            # or another storage fault: one line, and the server keeps serving.
            raise ToolError(f"storage: {_one_line(error)}") from error

    auth = None
    if token_verifier is not None:
        auth = AuthSettings(issuer_url=server_url, resource_server_url=None)
    server = _Server(
        name=name,
        instructions=INSTRUCTIONS,
        token_verifier=token_verifier,
        auth=auth,
    )

    @server.tool()
    async def remember(
        text: Annotated[str, Field(description="The memory, as a sentence.")],
        metadata: Annotated[
            dict[str, Any] | None, Field(description="JSON metadata to keep with it.")
        ] = None,
        id: Annotated[
            Id | None, Field(description="Your id for it (default: a new integer).")
        ] = None,
        tenant: Tenant = None,
    ) -> dict[str, Any]:
        """Stores one memory; returns its id."""
        ids = None if id is None else [id]
        meta = None if metadata is None else [metadata]
        added = await call(tenant, lambda r: r.aadd([text], meta, ids))
        return {"id": added[0]}

    @server.tool()
    async def recall(
        query: Annotated[str, Field(description="What to look for (a question).")],
        k: Annotated[int, Field(description="How many memories.", ge=1)] = 5,
        where: Annotated[
            dict[str, Any] | None,
            Field(description="Metadata that must match (key: value)."),
        ] = None,
        tenant: Tenant = None,
    ) -> dict[str, Any]:
        """The memories most relevant to ``query``, best first."""
        answer = await call(tenant, lambda r: r.aquery(query, k=k, where=where))
        return {
            "memories": _memories(answer),
            "calls": answer.calls,
            "query_index": answer.query_index,
        }

    @server.tool()
    async def update(
        id: Annotated[Id, Field(description="The memory's id.")],
        text: Annotated[str | None, Field(description="Its new text.")] = None,
        metadata: Annotated[
            dict[str, Any] | None, Field(description="Its new metadata.")
        ] = None,
        keep_history: Annotated[
            bool,
            Field(
                description="Keep the old text in the folder's history (false: "
                "it is forgotten, as by forget)."
            ),
        ] = True,
        tenant: Tenant = None,
    ) -> dict[str, Any]:
        """Replaces a memory's text and/or metadata (the id stays)."""
        await call(tenant, lambda r: r.aupdate(id, text, metadata, keep_history))
        return {"id": id}

    @server.tool()
    async def forget(
        ids: Annotated[list[Id], Field(description="The ids to delete.")],
        tenant: Tenant = None,
    ) -> dict[str, Any]:
        """Deletes memories for good (never recalled again)."""
        await call(tenant, lambda r: r.adelete(ids))
        return {"forgotten": ids}

    @server.tool()
    async def get(
        ids: Annotated[list[Id], Field(description="The ids to read.")],
        tenant: Tenant = None,
    ) -> dict[str, Any]:
        """The memories ``ids`` that exist, and the ids that do not (never
        stored, or forgotten)."""

        async def read(retriever: OnlineRetriever) -> tuple[list, list]:
            found, missing = [], []
            for one in ids:
                try:
                    found.extend(await retriever.aget([one]))
                except KeyError:
                    missing.append(one)
            return found, missing

        found, missing = await call(tenant, read)
        return {
            "memories": [
                {"id": m.id, "text": m.text, "metadata": m.metadata} for m in found
            ],
            "missing": missing,
        }

    @server.tool()
    async def stats(tenant: Tenant = None) -> dict[str, Any]:
        """Memories, queries, scorer calls paid, what scoring every candidate
        of every query would have paid, the ranking mode ("scorer", or
        "similarity": no scorer, memories in their pool's order) and the pool
        order ("similarity", or "free": cosine + word coverage)."""

        async def read(retriever: OnlineRetriever) -> tuple[Any, bool, str]:
            return (
                await retriever.ausage(),
                retriever.similarity_only,
                retriever.config.pool_order,
            )

        used, similarity_only, pool_order = await call(tenant, read)
        return {
            "mode": "similarity" if similarity_only else "scorer",
            "pool_order": pool_order,
            "memories": used.memories,
            "queries": used.queries,
            "calls_paid": used.calls,
            "cache_hits": used.cache_hits,
            "full_pool_calls": used.full_pool_calls,
        }

    return server


__all__ = ["INSTRUCTIONS", "build_server"]
