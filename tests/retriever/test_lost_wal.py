"""A journal that lost committed operations is refused, with real processes
and real files: a writer killed with ``kill -9`` while its latest commits are
only in ``journal.sqlite-wal``, that file then removed, emptied or cut short
(or the journal file replaced by an older copy). ``check`` names it, ``repair``
says it cannot restore it, putting the ``-wal`` file back opens everything,
and a ``-wal`` file that held nothing new is no loss and opens."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from earm_jax.retriever import OnlineRetriever
from earm_jax.retriever.maintenance import check, repair
from earm_jax.store.journal import CorruptFolderError

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories  # noqa: E402

WORKER = Path(__file__).with_name("wal_worker.py")
MISSING = r"committed operation\(s\) are missing"


def _open(folder):
    return OnlineRetriever(folder, KeywordScorer(), HashEmbedder(), CONFIG)


def _killed_writer(folder: Path, *flags: str) -> tuple[int, int]:
    """Runs the worker until READY, kills it with SIGKILL; returns the
    ``(memories, queries)`` it acknowledged."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(__file__).parents[2]), env.get("PYTHONPATH", "")]
    )
    env["JAX_PLATFORMS"] = "cpu"
    process = subprocess.Popen(
        [sys.executable, str(WORKER), str(folder), *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    watchdog = threading.Timer(300, process.kill)  # never hang the suite
    watchdog.start()
    try:
        line = process.stdout.readline().split()
    finally:
        watchdog.cancel()
    process.send_signal(signal.SIGKILL)
    _, err = process.communicate()
    assert line[:1] == ["READY"], err[-3000:]
    assert process.returncode == -signal.SIGKILL
    return int(line[1]), int(line[2])


@pytest.fixture(scope="module")
def killed(tmp_path_factory):
    """A folder whose writer was killed with 40 memories and 6 queries
    committed to the ``-wal`` file only (5 memories in the journal file)."""
    folder = tmp_path_factory.mktemp("killed") / "agent"
    acknowledged = _killed_writer(folder)
    assert acknowledged == (45, 6)
    wal = folder / "journal.sqlite-wal"
    assert wal.stat().st_size > 0, "the commits must still be in the -wal file"
    return folder


def _copy(folder, tmp_path):
    copy = tmp_path / "agent"
    shutil.copytree(folder, copy)
    return copy


def _counts(folder) -> tuple[int, int]:
    with _open(folder) as retriever:
        return retriever.num_memories, retriever.num_queries


def _refused(folder) -> str:
    """Asserts that opening, ``check`` and ``repair`` refuse ``folder``;
    returns ``check``'s finding."""
    with pytest.raises(CorruptFolderError, match=MISSING):
        _open(folder)
    report = check(folder, deep=True)
    assert not report.ok
    finding = " | ".join(report.problems)
    assert "Traceback" not in finding
    assert "high_water" in finding and "journal.sqlite" in finding
    with pytest.raises(CorruptFolderError, match="cannot restore: .*" + MISSING):
        repair(folder)
    return finding


def test_the_killed_folder_reopens_with_every_acknowledged_write(killed, tmp_path):
    assert _counts(_copy(killed, tmp_path)) == (45, 6)


def test_a_removed_wal_is_refused_and_putting_it_back_opens_everything(
    killed, tmp_path
):
    folder = _copy(killed, tmp_path)
    wal = folder / "journal.sqlite-wal"
    aside = tmp_path / "wal-aside"
    wal.rename(aside)
    finding = _refused(folder)
    assert "holds operations up to 1," in finding, finding  # the first add only
    # Refusing wrote nothing: the -wal file put back is still the journal's.
    aside.rename(wal)
    assert _counts(folder) == (45, 6)
    assert check(folder, deep=True).ok


@pytest.mark.parametrize("keep", [0, 32, 0.5])
def test_an_emptied_or_cut_wal_is_refused(killed, tmp_path, keep):
    """Emptied (0 bytes), only its header (32 bytes), or cut in half: SQLite
    reads the frames that are whole and silently drops the rest."""
    folder = _copy(killed, tmp_path)
    wal = folder / "journal.sqlite-wal"
    data = wal.read_bytes()
    wal.write_bytes(data[: int(len(data) * keep) if isinstance(keep, float) else keep])
    _refused(folder)


def test_an_older_copy_of_the_journal_is_refused(tmp_path):
    folder = tmp_path / "agent"
    with _open(folder) as retriever:
        retriever.add(memories(5))
    older = (folder / "journal.sqlite").read_bytes()
    with _open(folder) as retriever:
        retriever.add(memories(3, seed=2))
        retriever.query("What did Sam say about chess?")
    (folder / "journal.sqlite").write_bytes(older)
    _refused(folder)


def test_removing_the_mark_opens_the_journal_as_it_is(killed, tmp_path):
    """The documented way to accept an older journal on purpose."""
    folder = _copy(killed, tmp_path)
    (folder / "journal.sqlite-wal").unlink()
    with pytest.raises(CorruptFolderError, match=MISSING):
        _open(folder)
    (folder / "high_water").unlink()
    assert _counts(folder) == (5, 0)
    assert check(folder, deep=True).ok


def test_a_damaged_mark_is_refused_naming_it(killed, tmp_path):
    folder = _copy(killed, tmp_path)
    mark = folder / "high_water"
    data = bytearray(mark.read_bytes())
    data[10] ^= 0x01
    mark.write_bytes(bytes(data))
    with pytest.raises(CorruptFolderError, match="high_water.*damaged"):
        _open(folder)
    assert "damaged" in " | ".join(check(folder).problems)


def test_a_wal_that_held_nothing_new_is_no_loss(tmp_path):
    """The writer's last call (a delete) checkpointed every commit into the
    journal file and emptied the ``-wal`` file: removing it loses nothing, so
    the folder opens with every acknowledged write."""
    folder = tmp_path / "agent"
    assert _killed_writer(folder, "--delete-last") == (44, 6)
    wal = folder / "journal.sqlite-wal"
    assert wal.stat().st_size == 0
    wal.unlink()
    assert _counts(folder) == (44, 6)
    assert check(folder, deep=True).ok
