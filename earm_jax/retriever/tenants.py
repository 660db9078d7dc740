"""Many agents (tenants) in one process: one retriever folder per tenant.

``TenantRetrievers(root, scorer, embedder, config)`` opens ``root/<tenant>/``
on first use. Why one folder per tenant rather than one shared store:

* isolation by construction: a tenant's memories, experience matrix and paid
  scores live in its own journal, so no query of tenant A can read, score
  against, return or learn from tenant B's memories or scores (a shared score
  cache keyed by text would hand A a score B paid for, and a shared matrix
  would let B's relevance judgements shape A's completions);
* one lock each: tenants can be served by different processes;
* deleting a tenant is deleting a folder; backups and quotas are per tenant.

The cost is a little disk per tenant; compiled solver code is shared by every
retriever of the process (same shapes, same functions), so a new tenant does
not recompile.
"""

from __future__ import annotations

import os
import re
import threading
from pathlib import Path

from earm_jax.retriever.online import OnlineRetriever, RetrieverConfig
from earm_jax.scoring.base import Scorer
from earm_jax.store.embeddings import TextEmbedder

_NAME = re.compile(r"[A-Za-z0-9@+_-][A-Za-z0-9@+._-]{0,127}")


def tenant_folder(root: str | os.PathLike[str], tenant: str) -> Path:
    """The folder of ``tenant`` under ``root`` (names are checked: no paths)."""
    if not isinstance(tenant, str) or not _NAME.fullmatch(tenant):
        raise ValueError(
            "tenant must be 1-128 characters of letters, digits and @+._- , not "
            f"starting with '.', got {tenant!r}"
        )
    return Path(root) / tenant


class TenantRetrievers:
    """One :class:`OnlineRetriever` per tenant, each in its own folder.

    Args:
      root: the folder that holds one sub-folder per tenant.
      scorer: shared by every tenant's retriever.
      embedder: shared by every tenant's retriever.
      config: shared by every tenant's retriever.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        scorer: Scorer,
        embedder: TextEmbedder,
        config: RetrieverConfig | None = None,
    ) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)
        self.scorer, self.embedder, self.config = scorer, embedder, config
        self._open: dict[str, OnlineRetriever] = {}
        # One lock per tenant, so threads asking for the same new tenant wait
        # for its one opening while other tenants open in parallel.
        self._opening: dict[str, threading.Lock] = {}
        self._table_lock = threading.Lock()

    def get(self, tenant: str) -> OnlineRetriever:
        """The retriever of ``tenant`` (opened, or created, on first use; safe
        to call from many threads at once)."""
        folder = tenant_folder(self.root, tenant)
        opened = self._open.get(tenant)
        if opened is not None:
            return opened
        with self._table_lock:
            opening = self._opening.setdefault(tenant, threading.Lock())
        with opening:
            if tenant not in self._open:
                self._open[tenant] = OnlineRetriever(
                    folder, self.scorer, self.embedder, self.config
                )
            return self._open[tenant]

    __getitem__ = get

    def tenants(self) -> list[str]:
        """Every tenant with a folder under ``root``."""
        return sorted(
            p.name for p in self.root.iterdir() if (p / "journal.sqlite").exists()
        )

    def close(self) -> None:
        with self._table_lock:
            opened, self._open = list(self._open.values()), {}
        for retriever in opened:
            retriever.close()

    def __enter__(self) -> TenantRetrievers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = ["TenantRetrievers", "tenant_folder"]
