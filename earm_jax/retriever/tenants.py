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
not recompile. A server that any client can name tenants on bounds both the
tenants open at once (``max_open``, least recently used closed first) and the
tenant folders it creates (``max_tenants``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from pathlib import Path

from earm_jax.retriever.config import runtime_options
from earm_jax.retriever.online import OnlineRetriever, RetrieverConfig
from earm_jax.scoring.base import Scorer
from earm_jax.store.embeddings import CachedEmbedder, TextEmbedder
from earm_jax.store.journal_format import FOLDER_MODE, JOURNAL_NAME

_NAME = re.compile(r"[A-Za-z0-9@+_-][A-Za-z0-9@+._-]{0,127}")


def embedding_cache_path(folder: str | os.PathLike[str], embedder) -> Path:
    """Where a tenant's embedding cache lives: in its own folder, one file per
    embedding model (so another model never reads these vectors)."""
    identity = getattr(embedder, "identity", None)
    suffix = f"-{identity}" if isinstance(identity, str) and identity else ""
    return Path(folder) / f"embeddings{suffix}.sqlite"


def tenant_folder(root: str | os.PathLike[str], tenant: str) -> Path:
    """The folder of ``tenant`` under ``root`` (names are checked: no paths)."""
    if not isinstance(tenant, str) or not _NAME.fullmatch(tenant):
        raise ValueError(
            "tenant must be 1-128 characters of letters, digits and @+._- , not "
            f"starting with '.', got {tenant!r}"
        )
    return Path(root) / tenant


class TenantLimitError(ValueError):
    """A new tenant past ``max_tenants``: its folder is not created."""


class TenantRetrievers:
    """One :class:`OnlineRetriever` per tenant, each in its own folder.

    Tenants open on first use. With ``max_open``, at most that many stay open:
    opening one more closes the least recently used tenant that no call is
    using (its state is snapshotted, its folder lock and file handles
    released; every write it acknowledged is already committed). With
    ``max_tenants``, a tenant with no folder yet is refused
    (:class:`TenantLimitError`, nothing created) once that many tenant
    folders exist.

    Args:
      root: the folder that holds one sub-folder per tenant.
      scorer: shared by every tenant's retriever (``None``: similarity mode,
        no scorer calls; see :class:`OnlineRetriever`).
      embedder: shared by every tenant's retriever.
      config: shared by every tenant's retriever.
      max_open: the most tenants open at once (``None``: no cap). Calls that
        hold a tenant through :meth:`lease` keep it open past the cap until
        they end.
      max_tenants: the most tenant folders under ``root`` (``None``: no cap).
      embedding_cache: give each tenant an embedding cache of its own, inside
        its folder (:func:`embedding_cache_path`), which a ``delete`` purges
        of the deleted texts; ``embedder`` should have no cache of its own.
        Without it, ``embedder`` is used as it is.
      runtime: runtime options every tenant opens with (``query_retention``,
        ...), over ``config``'s or each folder's stored ones
        (:class:`OnlineRetriever`'s ``runtime``).
      key_file: the key file of every tenant's folder (:class:`OnlineRetriever`'s
        ``key_file``): each tenant folder it creates is keyed with it (the file
        is created, ``0600``, when missing), and an existing one opens only if
        it was keyed with it.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        scorer: Scorer | None,
        embedder: TextEmbedder,
        config: RetrieverConfig | None = None,
        *,
        max_open: int | None = None,
        max_tenants: int | None = None,
        embedding_cache: bool = False,
        runtime: Mapping[str, object] | None = None,
        key_file: str | os.PathLike[str] | None = None,
    ) -> None:
        if not isinstance(embedding_cache, bool):
            raise ValueError(
                f"embedding_cache must be True or False, got {embedding_cache!r}"
            )
        for name, value in (("max_open", max_open), ("max_tenants", max_tenants)):
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value < 1
            ):
                raise ValueError(f"{name} must be None or >= 1, got {value!r}")
        self.root = Path(root)
        self.root.mkdir(mode=FOLDER_MODE, parents=True, exist_ok=True)
        self.scorer, self.embedder, self.config = scorer, embedder, config
        self.runtime = runtime_options(runtime)
        # Checked now, not at the first tenant: the values, and with a config
        # the combination (without one, each tenant's stored settings judge
        # it when the tenant opens).
        dataclasses.replace(config or RetrieverConfig(preset="paper"), **self.runtime)
        self.key_file = None if key_file is None else Path(key_file)
        self.embedding_cache = embedding_cache
        self.max_open, self.max_tenants = max_open, max_tenants
        # Open tenants, least recently used first, and how many leases each has.
        self._open: OrderedDict[str, OnlineRetriever] = OrderedDict()
        self._users: dict[str, int] = {}
        # Tenants being closed by eviction: a new opening waits for the close.
        self._closing: dict[str, threading.Event] = {}
        # Tenant folders on disk, and names reserved by openings in flight.
        self._known: set[str] = set(self.tenants())
        # One lock per tenant, so threads asking for the same new tenant wait
        # for its one opening while other tenants open in parallel.
        self._opening: dict[str, threading.Lock] = {}
        self._table_lock = threading.Lock()

    def get(self, tenant: str) -> OnlineRetriever:
        """The retriever of ``tenant`` (opened, or created, on first use; safe
        to call from many threads at once). With ``max_open``, a later
        opening of another tenant may close it: hold it with :meth:`lease`."""
        retriever = self._acquire(tenant)
        self._release(tenant)
        return retriever

    __getitem__ = get

    @contextlib.contextmanager
    def lease(self, tenant: str) -> Iterator[OnlineRetriever]:
        """The retriever of ``tenant``, kept open until the block ends (the
        ``max_open`` cap closes only tenants nobody holds)."""
        retriever = self._acquire(tenant)
        try:
            yield retriever
        finally:
            self._release(tenant)

    def open_tenants(self) -> list[str]:
        """The tenants open now, least recently used first."""
        with self._table_lock:
            return list(self._open)

    def _reserve(self, tenant: str, folder: Path) -> None:
        """Counts ``tenant`` among the folders (called under the table lock)."""
        if tenant in self._known:
            return
        if (folder / JOURNAL_NAME).exists():
            self._known.add(tenant)
            return
        if self.max_tenants is not None and len(self._known) >= self.max_tenants:
            raise TenantLimitError(
                f"tenant {tenant!r} refused: {self.root} already holds "
                f"{len(self._known)} tenants, the limit (max_tenants="
                f"{self.max_tenants})"
            )
        self._known.add(tenant)

    def _acquire(self, tenant: str) -> OnlineRetriever:
        folder = tenant_folder(self.root, tenant)
        with self._table_lock:
            opened = self._take(tenant)
            if opened is not None:
                return opened
            self._reserve(tenant, folder)
            opening = self._opening.setdefault(tenant, threading.Lock())
        with opening:
            while True:
                with self._table_lock:
                    opened = self._take(tenant)
                    if opened is not None:
                        return opened
                    closing = self._closing.get(tenant)
                if closing is None:
                    break
                closing.wait()
            try:
                embedder = self.embedder
                if self.embedding_cache:
                    path = embedding_cache_path(folder, embedder)
                    embedder = CachedEmbedder(embedder, path)
                retriever = OnlineRetriever(
                    folder,
                    self.scorer,
                    embedder,
                    self.config,
                    key_file=self.key_file,
                    runtime=self.runtime,
                )
            except BaseException:
                with self._table_lock:
                    if not (folder / JOURNAL_NAME).exists():
                        self._known.discard(tenant)
                raise
            with self._table_lock:
                self._open[tenant] = retriever
                self._users[tenant] = 1
                victims = self._victims()
        self._close(victims)
        return retriever

    def _take(self, tenant: str) -> OnlineRetriever | None:
        """The open retriever of ``tenant``, leased (under the table lock)."""
        opened = self._open.get(tenant)
        if opened is not None:
            self._open.move_to_end(tenant)
            self._users[tenant] += 1
        return opened

    def _release(self, tenant: str) -> None:
        with self._table_lock:
            if tenant in self._users:
                self._users[tenant] -= 1
            victims = self._victims()
        self._close(victims)

    def _victims(self) -> list[tuple[str, OnlineRetriever]]:
        """The least recently used unheld tenants past ``max_open``, taken out
        of the table (under the table lock)."""
        if self.max_open is None:
            return []
        excess = len(self._open) - self.max_open
        victims = []
        for name in list(self._open):
            if excess <= 0:
                break
            if self._users[name] == 0:
                victims.append((name, self._open.pop(name)))
                del self._users[name]
                self._closing[name] = threading.Event()
                excess -= 1
        return victims

    def _close(self, victims: list[tuple[str, OnlineRetriever]]) -> None:
        for name, retriever in victims:
            try:
                retriever.close()
            finally:
                with self._table_lock:
                    self._closing.pop(name).set()

    def tenants(self) -> list[str]:
        """Every tenant with a folder under ``root``."""
        return sorted(
            p.name for p in self.root.iterdir() if (p / JOURNAL_NAME).exists()
        )

    def close(self) -> None:
        with self._table_lock:
            opened, self._open = list(self._open.values()), OrderedDict()
            self._users = {}
        for retriever in opened:
            retriever.close()

    def __enter__(self) -> TenantRetrievers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = [
    "TenantLimitError",
    "TenantRetrievers",
    "embedding_cache_path",
    "tenant_folder",
]
