"""Checking and repairing a retriever folder (``earm retriever check|repair``).

``check`` opens the folder the way a retriever does (lock, SQLite integrity,
settings, every memory row, every operation, the snapshot) and, with
``deep=True``, also replays the whole journal from the start and compares the
result with the snapshot-based state leaf by leaf: they must be equal bit for
bit. ``repair`` fixes what the journal can rebuild: a missing, corrupt or
mismatching snapshot is dropped and rewritten from a full replay. Damage to the
journal itself (memories, operations, SQLite pages) is reported, never guessed
away: restore the file from a backup.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import jax
import numpy as np

from earm_jax.retriever.online import OnlineRetriever
from earm_jax.store.journal import JOURNAL_NAME, CorruptFolderError, Journal
from earm_jax.store.lock import FolderLock


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


class _FromScratch(OnlineRetriever):
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


def _stored_scorer(folder: Path) -> str:
    path = folder / JOURNAL_NAME
    if not path.exists():
        raise CorruptFolderError(f"{path}: missing (not a retriever folder?)")
    journal = Journal(folder)
    try:
        key = journal.get_meta("scorer")
    finally:
        journal.close()
    if key is None:
        raise CorruptFolderError(f"{path}: no scorer recorded (meta is empty)")
    return key


def _open(folder: Path, cls=OnlineRetriever) -> OnlineRetriever:
    key = _stored_scorer(folder)
    return cls(folder, _NoScorer(key), _NoEmbedder(), None)


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


def check(path: str | os.PathLike[str], deep: bool = False) -> CheckReport:
    """Checks a retriever folder; ``deep`` also replays it from the start."""
    folder = Path(path)
    report = CheckReport(folder, [])
    try:
        retriever = _open(folder)
    except CorruptFolderError as error:
        report.problems.append(str(error))
        return report
    try:
        report.num_memories = retriever.num_memories
        report.num_queries = retriever.num_queries
        report.num_scores = retriever._journal.num_scores()
        report.snapshot_seq = retriever._snapshot_seq
        report.last_seq = retriever._last_seq
        if deep:
            retriever._release()
            scratch = _open(folder, _FromScratch)
            try:
                report.problems += _compare(retriever, scratch)
            finally:
                scratch._release()
    finally:
        retriever._release()
    return report


def repair(path: str | os.PathLike[str]) -> list[str]:
    """Rebuilds the snapshot from the journal where needed; returns what it did.

    Raises:
      CorruptFolderError: the journal itself is damaged (not repairable here).
    """
    folder = Path(path)
    actions = []
    first = check(folder, deep=True)
    if first.ok:
        return ["nothing to repair"]
    with FolderLock(folder):
        journal = Journal(folder)
        try:
            problems = journal.integrity_problems()
            if problems:
                raise CorruptFolderError(
                    f"{journal.path}: SQLite integrity check failed "
                    f"({'; '.join(problems)}); restore it from a backup"
                )
            journal.drop_snapshots()
            actions.append("dropped the snapshot: " + "; ".join(first.problems))
        finally:
            journal.close()
    scratch = _open(folder, _FromScratch)  # raises if the journal is damaged
    try:
        scratch.snapshot()
        actions.append(
            f"rebuilt the solver state from {scratch.num_queries} queries and wrote "
            "a new snapshot"
        )
    finally:
        scratch._release()
    after = check(folder, deep=True)
    if not after.ok:
        raise CorruptFolderError("; ".join(after.problems))
    return actions


__all__ = ["CheckReport", "check", "repair"]
