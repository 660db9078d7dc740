"""A full disk never locks a folder: wherever opening (or checking) a folder
hits it (the lock file, the marker, the high-water mark, the journal, the
embedding cache), the call raises ``DiskFullError`` naming the folder and its
free bytes, keeps no lock and no file handle, and the same process opens the
folder once space is back. Over MCP a full disk is a one-line tool error.

The tests on a real tmpfs (run as root, skipped where mounting is not
allowed) cover what injected faults cannot: SQLite itself creating and
growing ``journal.sqlite-wal`` and ``-shm`` on a full disk, which it reports
as a "disk I/O error" rather than SQLITE_FULL."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

import earm_jax.store.embeddings as embeddings_module
from earm_jax.retriever import OnlineRetriever, check
from earm_jax.store.embeddings import CachedEmbedder
from earm_jax.store.integrity import CorruptFolderError
from earm_jax.store.journal import DiskFullError, Journal
from earm_jax.store.journal_format import is_disk_full

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


# --------------------------------------------------- a real full file system


@pytest.fixture
def small_disk(tmp_path):
    """A 2 MiB tmpfs, unmounted afterwards (skipped where mounting is not
    allowed: not root, or no mount permission in a container)."""
    where = tmp_path / "disk"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("mounting a tmpfs needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(where)],
        capture_output=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


@contextlib.contextmanager
def _filled(disk: Path, leave: int):
    """Fills ``disk`` but ``leave`` bytes; frees the space again on exit."""
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        handle.write(b"\0" * max(shutil.disk_usage(disk).free - leave, 0))
    try:
        yield
    finally:
        filler.unlink()


def _sqlite_io_error(error: BaseException) -> bool:
    cause = error.__cause__
    code = getattr(cause, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_IOERR


# Room for the lock file's one page, not for the WAL index's first 32 KiB.
NO_ROOM_FOR_THE_WAL_INDEX = 16 * 1024


@pytest.mark.parametrize("folder_state", ["new", "existing"])
def test_a_full_disk_while_sqlite_makes_its_wal_files_is_named_and_retried(
    small_disk, folder_state
):
    folder = small_disk / "memory"
    asked = "What did Sam say about chess?"
    if folder_state == "existing":
        with _open(folder) as agent:
            agent.add(memories(6))
            agent.query(asked)
        # Closed cleanly: SQLite removed the -wal and -shm files, so the
        # next open creates them.
        assert not (folder / "journal.sqlite-shm").exists()
    before = _handles()
    with _filled(small_disk, NO_ROOM_FOR_THE_WAL_INDEX):
        with pytest.raises(DiskFullError) as raised:
            _open(folder)
        message = str(raised.value)
        assert str(folder) in message and "bytes free" in message, message
        assert raised.value.errno == errno.ENOSPC
        # SQLite said "disk I/O error" (growing -shm), not SQLITE_FULL.
        assert _sqlite_io_error(raised.value), repr(raised.value.__cause__)
        assert _handles() == before  # no lock, no journal left open
        # Still full: the same process is told the same, not "in use by" itself.
        with pytest.raises(DiskFullError):
            _open(folder)
        if folder_state == "existing":
            with pytest.raises(DiskFullError, match="bytes free"):
                check(folder, deep=True)
        assert _handles() == before
    # Space is back: the same process opens the folder; nothing was lost.
    with _open(folder) as agent:
        if folder_state == "new":
            agent.add(memories(6))
            agent.query(asked)
        assert agent.num_memories == 6 and agent.num_queries == 1
        agent.add(["Caroline moved from Sweden."])
    with _open(folder) as again:
        assert again.num_memories == 7 and again.num_queries == 1
    assert check(folder, deep=True).ok


# Where a write finds the disk full first: the journal (an embedder without a
# cache), or the embedding cache, which is written before the journal.
WRITES = {
    "journal": ("stored nothing", lambda folder: HashEmbedder()),
    "embedding cache": (
        "nothing was cached",
        lambda folder: CachedEmbedder(HashEmbedder(), folder / "embeddings.sqlite"),
    ),
}


@pytest.mark.parametrize("first_full", list(WRITES))
def test_a_write_on_a_full_disk_is_named_and_every_acknowledged_write_kept(
    small_disk, first_full
):
    folder = small_disk / "memory"
    consequence, embedder = WRITES[first_full]

    def open_folder():
        return OnlineRetriever(folder, KeywordScorer(), embedder(folder), CONFIG)

    acknowledged = []
    with open_folder() as agent:
        acknowledged += agent.add(memories(6))
        with _filled(small_disk, 0):
            with pytest.raises(DiskFullError) as raised:
                for number in range(200):
                    acknowledged += agent.add([f"Note {number}: " + "x" * 2000])
            message = str(raised.value)
            assert str(folder) in message and "bytes free" in message, message
            assert consequence in message, message
        # Space is back: the same retriever writes again.
        acknowledged += agent.add(["Caroline moved from Sweden."])
        assert agent.query("Where did Caroline move from?").memory_ids
    with open_folder() as again:
        assert again.num_memories == len(acknowledged) and again.num_queries == 1
        assert [m.id for m in again.get(acknowledged)] == acknowledged
    assert check(folder, deep=True).ok


def _io_error() -> sqlite3.OperationalError:
    error = sqlite3.OperationalError("disk I/O error")
    error.sqlite_errorcode = 4874  # SQLITE_IOERR_SHMSIZE
    error.sqlite_errorname = "SQLITE_IOERR_SHMSIZE"
    return error


def test_an_io_error_on_a_disk_with_room_is_not_called_disk_full(tmp_path, monkeypatch):
    assert shutil.disk_usage(tmp_path).free > 64 << 20  # the premise
    assert not is_disk_full(_io_error(), tmp_path)
    assert is_disk_full(sqlite3.OperationalError("database or disk is full"))

    def failing_connect(*args, **kwargs):
        raise _io_error()

    monkeypatch.setattr(sqlite3, "connect", failing_connect)
    folder = tmp_path / "memory"
    with pytest.raises(CorruptFolderError, match="disk I/O error"):
        _open(folder)


def test_an_io_error_on_a_full_disk_is_disk_full(small_disk):
    with _filled(small_disk, 0):
        assert is_disk_full(_io_error(), small_disk)
    assert not is_disk_full(_io_error(), small_disk)
