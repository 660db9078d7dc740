"""One writer per folder, with real processes: removing the lock file lets no
second writer in, a removed journal stops the holder from writing to a file
nobody reads, and tenants open once under concurrent first use."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from earm_jax.retriever import OnlineRetriever
from earm_jax.retriever.maintenance import check
from earm_jax.retriever.tenants import TenantRetrievers
from earm_jax.store.lock import FolderLock, FolderLockedError

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer  # noqa: E402

# Run by the fast tier too: these are the retriever's lock / checksum basics.
pytestmark = pytest.mark.basics

WORKER = Path(__file__).with_name("lock_worker.py")


def _env(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")]
    )
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "jax-cache")
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
    return env


class Worker:
    """A retriever in another process, driven line by line."""

    def __init__(self, folder, env):
        self.process = subprocess.Popen(
            [sys.executable, str(WORKER), str(folder)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.first = self._line()
        if self.first == "":
            self.process.kill()
            pytest.fail(f"worker failed: {self.process.stderr.read()[-3000:]}")

    def _line(self, timeout=300.0):
        watchdog = threading.Timer(timeout, self.process.kill)
        watchdog.start()
        try:
            return self.process.stdout.readline().strip()
        finally:
            watchdog.cancel()

    def send(self, command):
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        line = self._line()
        assert line, self.process.stderr.read()[-3000:]
        return json.loads(line)

    def stop(self):
        if self.process.poll() is None:
            self.process.stdin.write("exit\n")
            self.process.stdin.flush()
        self.process.communicate(timeout=60)


def _open(folder):
    return OnlineRetriever(folder, KeywordScorer(), HashEmbedder(), CONFIG)


def test_removing_the_lock_file_lets_no_second_writer_in(tmp_path):
    folder, env = tmp_path / "agent", _env(tmp_path)
    holder = Worker(folder, env)
    assert holder.first == "READY"
    try:
        assert holder.send("query What about chess?") == {"index": 0}
        (folder / "lock").unlink()
        # This process, and a third one, are refused: the journal is still
        # locked by the holder, whose pid the error names.
        with pytest.raises(FolderLockedError, match=f"process {holder.process.pid}"):
            _open(folder)
        intruder = Worker(folder, env)
        assert json.loads(intruder.first)["error"] == "FolderLockedError"
        intruder.stop()
        # The holder goes on: removing the lock file broke nothing.
        assert holder.send("query What about hiking?") == {"index": 1}
        assert holder.send("close") == {"closed": True}
    finally:
        holder.stop()
    with _open(folder) as reopened:
        assert reopened.num_queries == 2
        assert reopened.num_memories == 12
    report = check(folder, deep=True)
    assert report.ok, report.problems


def test_a_removed_journal_stops_the_holder_and_is_refused_to_others(tmp_path):
    folder, env = tmp_path / "agent", _env(tmp_path)
    holder = Worker(folder, env)
    assert holder.first == "READY"
    try:
        assert holder.send("query What about chess?") == {"index": 0}
        for name in ("lock", "journal.sqlite", "journal.sqlite-wal"):
            (folder / name).unlink(missing_ok=True)
        # The holder's next write would go to a file nobody reads: refused,
        # and it says nothing was stored.
        answer = holder.send("add Sam bought a new chess board.")
        assert answer["error"] == "LockLostError", answer
        assert "stored nothing" in answer["message"]
        answer = holder.send("query What about chess?")
        assert answer["error"] == "LockLostError", answer
    finally:
        holder.stop()


def test_lock_of_a_folder_without_guarded_files_watches_the_lock_file(tmp_path):
    lock = FolderLock(tmp_path)
    lock.verify()
    (tmp_path / "lock").unlink()
    with pytest.raises(RuntimeError, match="removed"):
        lock.verify()
    lock.release()


def test_tenants_open_once_under_concurrent_first_use(tmp_path):
    scorer, embedder = KeywordScorer(), HashEmbedder()
    with TenantRetrievers(tmp_path, scorer, embedder, CONFIG) as tenants:
        barrier = threading.Barrier(8)
        got, errors = [None] * 8, []

        def first_use(number):
            barrier.wait()
            try:
                got[number] = tenants.get(["alice", "bob"][number % 2])
            except Exception as error:  # noqa: BLE001 - collected for the assert
                errors.append(error)

        threads = [threading.Thread(target=first_use, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert len({id(r) for r in got[0::2]}) == 1
        assert len({id(r) for r in got[1::2]}) == 1
        assert got[0] is not got[1]
        assert tenants.tenants() == ["alice", "bob"]


def _full_once(monkeypatch, function: str):
    """The next call of ``os.<function>`` in the lock module fails with ENOSPC."""
    import errno

    import earm_jax.store.lock as lock_module

    real = getattr(os, function)
    calls = []

    def full(*args, **kwargs):
        if not calls:
            calls.append(1)
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(lock_module.os, function, full)


@pytest.mark.parametrize("function", ["pwrite", "open"])
def test_a_full_disk_while_locking_leaves_the_folder_unlocked(
    tmp_path, monkeypatch, function
):
    """Writing (or creating) the lock file on a full disk is a DiskFullError
    naming the folder and its free bytes, and leaves nothing held: the same
    process opens the folder once space is back."""
    from earm_jax.store.journal import DiskFullError

    folder = tmp_path / "memory"
    folder.mkdir()
    _full_once(monkeypatch, function)
    with pytest.raises(DiskFullError, match=r"the disk is full \(.*free"):
        FolderLock(folder, guarded=("journal.sqlite",))
    monkeypatch.undo()
    with FolderLock(folder, guarded=("journal.sqlite",)) as lock:
        assert lock.held
    assert oct((folder / "lock").stat().st_mode & 0o777) == "0o600"


def test_a_retriever_opened_on_a_full_disk_opens_again_in_the_same_process(
    tmp_path, monkeypatch
):
    from earm_jax.store.journal import DiskFullError

    folder = tmp_path / "memory"
    _full_once(monkeypatch, "pwrite")
    with pytest.raises(DiskFullError):
        _open(folder)
    monkeypatch.undo()
    retriever = _open(folder)
    try:
        retriever.add(["Caroline moved from Sweden."])
    finally:
        retriever.close()
