"""Checking and repairing a retriever folder (``earm retriever check|repair``).

``check`` opens the folder the way a retriever does (lock, SQLite integrity,
settings, every memory row, every operation, the snapshot) and, with
``deep=True``, also replays the whole journal from the start and compares the
result with the snapshot-based state leaf by leaf: they must be equal bit for
bit. Every row's checksum is verified too, and each damaged row is a finding
naming it, as is a gap in the operations' numbers and anything wrong with the
delete log (a deleted row put back, a record removed or edited). A keyed
folder is checked with its key file (``key_file``). ``repair`` restores what
the journal can rebuild: a missing, corrupt or mismatching snapshot is
dropped and rewritten from a full replay,
damaged paid scores are dropped (paid again when needed). Damage to the
journal's own records (memories, operations, settings, SQLite pages) is
reported as what it cannot restore, never guessed away: restore the file from
a backup.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import jax
import numpy as np

from earm_jax.retriever.online import OnlineRetriever
from earm_jax.store.journal import (
    JOURNAL_NAME,
    CorruptFolderError,
    DiskFullError,
    Journal,
    lost_journal,
)
from earm_jax.store.lock import FolderLock, FolderLockedError


class _StoredIdentity:
    def __init__(self, key: str) -> None:
        self._key = key

    def key(self) -> str:
        return self._key


class _NoScorer:
    """Stands in for the folder's scorer: never called by check/repair."""

    def __init__(self, key: str) -> None:
        self.identity = _StoredIdentity(key)

    def score(self, query, memories):  # pragma: no cover - never called
        raise RuntimeError("check/repair never scores")

    def score_many(self, requests):  # pragma: no cover - never called
        raise RuntimeError("check/repair never scores")


class _NoEmbedder:
    def embed(self, texts):  # pragma: no cover - never called
        raise RuntimeError("check/repair never embeds")


class _Inspector(OnlineRetriever):
    """Opens a folder without its scorer and embedder (never called)."""

    _verify_embedder = False
    _redact_on_open = False


class _FromScratch(_Inspector):
    _use_snapshot = False


@dataclasses.dataclass
class CheckReport:
    """What ``check`` found."""

    path: Path
    problems: list[str]
    num_memories: int = 0
    num_queries: int = 0
    num_scores: int = 0
    snapshot_seq: int | None = None
    last_seq: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems


def _stored_scorer(folder: Path, key_file: Path | None) -> str:
    lost = lost_journal(folder)
    if lost is not None:
        raise CorruptFolderError(lost)
    path = folder / JOURNAL_NAME
    if not path.exists():
        raise CorruptFolderError(f"{path}: missing (not a retriever folder?)")
    journal = Journal(folder, key_file=key_file)
    try:
        key = journal.get_meta("scorer")
    finally:
        journal.close()
    if key is None:
        raise CorruptFolderError(f"{path}: no scorer recorded (meta is empty)")
    return key


def _open(
    folder: Path, cls=_Inspector, key_file: Path | None = None
) -> OnlineRetriever:
    key = _stored_scorer(folder, key_file)
    return cls(folder, _NoScorer(key), _NoEmbedder(), None, key_file=key_file)


def _compare(a: OnlineRetriever, b: OnlineRetriever) -> list[str]:
    problems = []
    if a.solver_config != b.solver_config:
        return [f"snapshot shapes {a.solver_config} differ from a full replay's"]
    paths_a = jax.tree_util.tree_leaves_with_path(a.state)
    leaves_b = jax.tree.leaves(b.state)
    for (path, x), y in zip(paths_a, leaves_b, strict=True):
        if not np.array_equal(np.asarray(x), np.asarray(y)):
            problems.append(
                f"solver state leaf {jax.tree_util.keystr(path)} differs between "
                "the snapshot + replay and a full replay of the journal"
            )
    return problems


def _scan(folder: Path, key_file: Path | None) -> list[tuple[str, str]]:
    """Every damaged row of the folder's journal (under the folder's lock)."""
    with FolderLock(folder, guarded=(JOURNAL_NAME,)):
        journal = Journal(folder, key_file=key_file)
        try:
            return journal.findings()
        finally:
            journal.close()


def check(
    path: str | os.PathLike[str],
    deep: bool = False,
    key_file: str | os.PathLike[str] | None = None,
) -> CheckReport:
    """Checks a retriever folder; ``deep`` also replays it from the start.

    A keyed folder needs its ``key_file`` (without it, or with another key,
    that is the finding). Every kind of damage is a finding in
    :attr:`CheckReport.problems` naming the row and what is wrong (a checksum
    that does not match, text that is not UTF-8, a missing or empty journal,
    a missing operation, a deleted row put back or a broken delete log, a
    snapshot that disagrees with a full replay); only
    :class:`FolderLockedError` and
    :class:`~earm_jax.store.journal.DiskFullError` (naming the folder and its
    free bytes; the same process checks again once space is back) are
    raised.
    """
    folder = Path(path)
    key = None if key_file is None else Path(key_file)
    report = CheckReport(folder, [])
    try:
        _check(folder, deep, key, report)
    except (FolderLockedError, DiskFullError):
        # Not damage: the folder is busy, or the disk is full (free some
        # space and check again).
        raise
    except Exception as error:  # noqa: BLE001 - a finding, never a traceback
        if str(error) not in report.problems:
            report.problems.append(f"{type(error).__name__}: {error}")
    return report


def _check(
    folder: Path, deep: bool, key_file: Path | None, report: CheckReport
) -> None:
    try:
        _stored_scorer(folder, key_file)
    except CorruptFolderError as error:
        report.problems.append(str(error))
        return
    report.problems += [message for _, message in _scan(folder, key_file)]
    try:
        retriever = _open(folder, key_file=key_file)
    except CorruptFolderError as error:
        if not any(str(error) in problem for problem in report.problems):
            report.problems.append(str(error))
        return
    try:
        report.num_memories = retriever.num_memories
        report.num_queries = retriever.num_queries
        report.num_scores = retriever._journal.num_scores()
        report.snapshot_seq = retriever._snapshot_seq
        report.last_seq = retriever._last_seq
        if deep:
            retriever._release()
            try:
                scratch = _open(folder, _FromScratch, key_file)
            except CorruptFolderError as error:
                if not any(str(error) in problem for problem in report.problems):
                    report.problems.append(str(error))
                return
            try:
                report.problems += _compare(retriever, scratch)
            finally:
                scratch._release()
    finally:
        retriever._release()


# What repair can rebuild from the rest of the journal; every other kind of
# damage (memories, operations, settings, the delete log, SQLite pages) holds
# information stored nowhere else.
_REPAIRABLE = ("score", "chunk")


def repair(
    path: str | os.PathLike[str], key_file: str | os.PathLike[str] | None = None
) -> list[str]:
    """Restores what the journal can rebuild; returns what it did.

    It can restore: a missing, damaged or mismatching snapshot (rebuilt by a
    full replay) and damaged paid scores (dropped: those pairs are paid again
    when a query needs them). It cannot restore a damaged memory, operation
    or setting, the delete log, or SQLite pages: those hold what is stored
    nowhere else. A keyed folder needs its ``key_file``.

    Raises:
      CorruptFolderError: naming what it could not restore (after restoring
        what it could).
      FolderKeyError: the folder's key is missing or wrong.
    """
    folder = Path(path)
    key = None if key_file is None else Path(key_file)
    actions: list[str] = []
    first = check(folder, deep=True, key_file=key)
    if first.ok:
        return ["nothing to repair"]
    lost = lost_journal(folder)
    if lost is not None:
        raise CorruptFolderError(f"cannot restore: {lost}")
    with FolderLock(folder, guarded=(JOURNAL_NAME,)):
        try:
            journal = Journal(folder, key_file=key)
        except CorruptFolderError as error:
            raise CorruptFolderError(f"cannot restore: {error}") from error
        try:
            findings = journal.findings()
            dropped = journal.drop_damaged_scores()
            if dropped:
                actions.append(
                    f"restored: dropped {dropped} damaged paid score(s); those "
                    "pairs are paid again when a query needs them"
                )
            cannot = [m for kind, m in findings if kind not in _REPAIRABLE]
            if not cannot:
                journal.drop_snapshots()
                actions.append("dropped the snapshot: " + "; ".join(first.problems))
        finally:
            journal.close()
    if cannot:
        done = f" (restored: {'; '.join(actions)})" if actions else ""
        raise CorruptFolderError(
            f"cannot restore (restore {JOURNAL_NAME} from a backup): "
            + "; ".join(cannot)
            + done
        )
    scratch = _open(folder, _FromScratch, key)  # raises if the journal is damaged
    try:
        scratch.snapshot()
        actions.append(
            f"rebuilt the solver state from {scratch.num_queries} queries and wrote "
            "a new snapshot"
        )
    finally:
        scratch._release()
    after = check(folder, deep=True, key_file=key)
    if not after.ok:
        raise CorruptFolderError("cannot restore: " + "; ".join(after.problems))
    return actions


__all__ = ["CheckReport", "check", "repair"]
