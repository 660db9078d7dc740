"""The online retriever for one agent (host side): EARM over a growing memory,
kept crash-safe on disk. ``from earm_jax.retriever import OnlineRetriever``.

The Mem0 reranker (:mod:`earm_jax.retriever.mem0`) and the LangChain retriever
(:mod:`earm_jax.retriever.langchain`) and the LlamaIndex postprocessor
(:mod:`earm_jax.retriever.llamaindex`) are optional extras, imported on demand;
the MCP server is :mod:`earm_jax.retriever.mcp_server` (``earm mcp``). Every
call has a coroutine twin (``aquery``, ``arerank``, ``aadd``, ...;
:mod:`earm_jax.retriever.asynchronous`).
"""

from earm_jax.retriever.config import Memory as Memory
from earm_jax.retriever.config import Retrieved as Retrieved
from earm_jax.retriever.config import RetrieverConfig as RetrieverConfig
from earm_jax.retriever.config import Usage as Usage
from earm_jax.retriever.maintenance import CheckReport as CheckReport
from earm_jax.retriever.maintenance import check as check
from earm_jax.retriever.maintenance import repair as repair
from earm_jax.retriever.online import OnlineRetriever as OnlineRetriever
from earm_jax.retriever.tenants import TenantRetrievers as TenantRetrievers
from earm_jax.store.journal import CorruptFolderError as CorruptFolderError
from earm_jax.store.journal import DiskFullError as DiskFullError
from earm_jax.store.journal import FolderKeyError as FolderKeyError
from earm_jax.store.lock import FolderLockedError as FolderLockedError

__all__ = [
    "CheckReport",
    "CorruptFolderError",
    "DiskFullError",
    "FolderKeyError",
    "FolderLockedError",
    "Memory",
    "OnlineRetriever",
    "Retrieved",
    "RetrieverConfig",
    "TenantRetrievers",
    "Usage",
    "check",
    "repair",
]
