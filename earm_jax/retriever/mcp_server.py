"""EARM as an MCP memory server (``earm mcp FOLDER``), on the official ``mcp``
Python SDK.

Tools (every one takes an optional ``tenant``; without it the server's
default tenant):

* ``remember(text, metadata=None, id=None)``: stores a memory, returns its id;
* ``recall(query, k=5, where=None)``: the ``k`` most relevant memories, best
  first (``where``: metadata keys that must match);
* ``update(id, text=None, metadata=None)``: edits a memory (a new text starts
  with no evidence);
* ``forget(ids)``: deletes memories (never returned again, gone from disk);
* ``get(ids)``: the memories ``ids``;
* ``stats()``: memories, queries, scorer calls paid, and the calls a reranker
  scoring every candidate of every query would have paid.

A tenant is a folder ``FOLDER/<tenant>/`` of a
:class:`~earm_jax.retriever.tenants.TenantRetrievers`: one tenant never sees
another's memories or scores. Every tool awaits the retriever's coroutine API
(:mod:`earm_jax.retriever.asynchronous`), so concurrent recalls overlap their
scoring. A tool that fails (a bad argument, an unknown id) returns an MCP tool
error whose text is one line; the server keeps serving. A tool's reply is sent
after its write is committed: what a client saw acknowledged survives a kill.

Install with ``pip install earm_jax[mcp]``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field

from earm_jax.retriever.online import OnlineRetriever, Retrieved
from earm_jax.retriever.tenants import TenantRetrievers
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
) -> MCPServer:
    """The MCP server over ``tenants`` (the caller closes them).

    Args:
      tenants: one retriever per tenant.
      tenant: the tenant of calls that name none.
      name: the server's name, as clients list it.
    """

    async def call(
        tenant_name: str | None, fn: Callable[[OnlineRetriever], Awaitable[_T]]
    ) -> _T:
        try:
            retriever = tenants.get(tenant_name or tenant)
            return await fn(retriever)
        except (
            ValueError,
            KeyError,
            TypeError,
            CorruptFolderError,
            FolderLockedError,
        ) as error:
            raise ToolError(_one_line(error)) from error
        except OSError as error:
            raise ToolError(f"storage: {_one_line(error)}") from error

    server = MCPServer(name=name, instructions=INSTRUCTIONS)

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
        tenant: Tenant = None,
    ) -> dict[str, Any]:
        """Replaces a memory's text and/or metadata (the id stays)."""
        await call(tenant, lambda r: r.aupdate(id, text, metadata))
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
        """Memories, queries, scorer calls paid, and what scoring every
        candidate of every query would have paid."""

        used = await call(tenant, lambda r: r.ausage())
        return {
            "memories": used.memories,
            "queries": used.queries,
            "calls_paid": used.calls,
            "cache_hits": used.cache_hits,
            "full_pool_calls": used.full_pool_calls,
        }

    return server


__all__ = ["INSTRUCTIONS", "build_server"]
