"""A full disk never locks a folder: wherever opening (or checking) a folder
hits it (the lock file, the marker, the high-water mark, the journal, the
embedding cache), the call raises ``DiskFullError`` naming the folder and its
free bytes, keeps no lock and no file handle, and the same process opens the
folder once space is back. Over MCP a full disk is a one-line tool error."""

from __future__ import annotations

import asyncio
import errno
import os
import sqlite3
import sys
from pathlib import Path

import pytest

import earm_jax.store.embeddings as embeddings_module
from earm_jax.retriever import OnlineRetriever, check
from earm_jax.store.embeddings import CachedEmbedder
from earm_jax.store.journal import DiskFullError, Journal

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories  # noqa: E402


def _full_once(monkeypatch, function: str, target: str) -> list[int]:
    """The next ``os.<function>`` on the file named ``target`` fails as a full
    disk does (``set_meta``: the journal's next write); returns the list that
    counts the failures, so a test sees the fault was hit."""
    hits: list[int] = []
    if function == "set_meta":
        real_meta = Journal.set_meta

        def full_meta(*args, **kwargs):
            if not hits:
                hits.append(1)
                raise sqlite3.OperationalError("database or disk is full")
            return real_meta(*args, **kwargs)

        monkeypatch.setattr(Journal, "set_meta", full_meta)
        return hits
    real = getattr(os, function)

    def full(where, *args, **kwargs):
        name = (
            os.readlink(f"/proc/self/fd/{where}") if isinstance(where, int) else where
        )
        if not hits and Path(name).name == target:
            hits.append(1)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(where, *args, **kwargs)

    monkeypatch.setattr(os, function, full)
    return hits


def _handles() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def _open(folder):
    embedder = CachedEmbedder(HashEmbedder(), folder / "embeddings.sqlite")
    return OnlineRetriever(folder, KeywordScorer(), embedder, CONFIG)


# Every place a new folder's open writes to, in the order it writes.
PLACES = {
    "lock file": ("pwrite", "lock"),
    "journal": ("set_meta", "journal.sqlite"),
    "embedding cache": ("open", "embeddings.sqlite"),
    "marker": ("write", "retriever.json.tmp"),
    "high-water mark": ("pwrite", "high_water"),
}


@pytest.mark.parametrize("place", list(PLACES))
def test_a_full_disk_at_open_is_named_and_leaves_nothing_held(
    tmp_path, monkeypatch, place
):
    folder = tmp_path / "memory"
    folder.mkdir()
    before = _handles()
    hits = _full_once(monkeypatch, *PLACES[place])
    with pytest.raises(DiskFullError) as raised:
        _open(folder)
    assert hits, f"the {place} was never written"
    message = str(raised.value)
    assert str(folder) in message and "bytes free" in message, message
    assert raised.value.errno == errno.ENOSPC
    assert _handles() == before  # no lock, no journal, no cache left open
    monkeypatch.undo()
    # Space is back: the same process opens the folder, and it works.
    with _open(folder) as agent:
        agent.add(memories(6))
        assert agent.query("What did Sam say about chess?").memory_ids
    with _open(folder) as again:
        assert again.num_memories == 6 and again.num_queries == 1


def test_a_full_disk_during_a_deep_check_is_raised_not_a_finding(tmp_path, monkeypatch):
    folder = tmp_path / "memory"
    with _open(folder) as agent:
        agent.add(memories(6))
        agent.query("What did Sam say about chess?")
    before = _handles()
    hits = _full_once(monkeypatch, "pwrite", "lock")
    with pytest.raises(DiskFullError, match="bytes free"):
        check(folder, deep=True)
    assert hits and _handles() == before
    monkeypatch.undo()
    report = check(folder, deep=True)
    assert report.ok, report.problems
    assert report.num_queries == 1


def test_a_full_embedding_cache_is_one_line_over_mcp(tmp_path, monkeypatch):
    pytest.importorskip("mcp")
    from mcp import Client

    from earm_jax.retriever.mcp_server import build_server
    from earm_jax.retriever.tenants import TenantRetrievers

    real_connect = sqlite3.connect

    class FullDisk:
        """A cache connection whose writes find the disk full."""

        def __init__(self, *args, **kwargs):
            self.connection = real_connect(*args, **kwargs)

        def execute(self, *args):
            return self.connection.execute(*args)

        def executemany(self, *args):
            raise sqlite3.OperationalError("database or disk is full")

        def close(self):
            self.connection.close()

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            return self.connection.__exit__(*exc_info)

    async def session(tenants) -> tuple[str, object]:
        async with Client(build_server(tenants)) as client:
            first = await client.call_tool("remember", {"text": "Sam plays chess."})
            assert not first.is_error, first.content
            with monkeypatch.context() as patch:
                patch.setattr(embeddings_module.sqlite3, "connect", FullDisk)
                refused = await client.call_tool(
                    "remember", {"text": "Caroline moved from Sweden."}
                )
            again = await client.call_tool(
                "remember", {"text": "Caroline moved from Sweden."}
            )
            assert not again.is_error, again.content
            stats = await client.call_tool("stats", {})
            assert stats.structured_content["memories"] == 2
            assert refused.is_error
            return refused.content[0].text, stats

    with TenantRetrievers(
        tmp_path / "memory",
        KeywordScorer(),
        HashEmbedder(),
        CONFIG,
        embedding_cache=True,
    ) as tenants:
        text, _ = asyncio.run(session(tenants))
    # The SDK prefixes "Error executing tool remember: "; the reason follows.
    assert "\n" not in text
    assert text.startswith("Error executing tool remember: storage: "), text
    assert "the disk is full" in text and "bytes free" in text, text
    assert str(tmp_path / "memory" / "default") in text
