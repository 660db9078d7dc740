"""Digests bound to their place, an optional folder key, and the delete log,
tried on real folders with real SQLite edits: a value moved to another row
with its digest is named; digests recomputed without the key pass an unkeyed
folder (as they must: anyone can compute them) but not a keyed one; a deleted
row put back, and a delete-log record removed or edited, are named; the key
file is private, outside the folder and required; a folder of the previous
format is verified and upgraded."""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import stat
import struct
import sys
from pathlib import Path

import pytest

from earm_jax.retriever import FolderKeyError, OnlineRetriever
from earm_jax.retriever.maintenance import check
from earm_jax.store.integrity import CHECKED_FIELDS, DIGEST_BYTES, raw_column
from earm_jax.store.journal import CorruptFolderError, Journal, RowDigests

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories, queries  # noqa: E402

# Run by the fast tier too: these are the retriever's checksum basics.
pytestmark = pytest.mark.basics

UNIQUE = {
    "x": "Xylophone-unique-1101: Sam tunes a xylophone.",
    "y": "Yodel-unique-2202: Sam yodels at chess club.",
    "z": "Zebra-unique-3303: Sam keeps a chess diary.",
}
ROW_OF = {"x": 12, "y": 13, "z": 14}
# The tables whose rows carry digests, and the columns that find a row again.
TABLE_KEYS = {
    "meta": ("key",),
    "memories": ("row",),
    "ops": ("seq",),
    "scores": ("scorer", "query_hash", "memory_hash"),
    "deletions": ("number",),
}


def _open(folder, key_file=None):
    return OnlineRetriever(
        folder, KeywordScorer(), HashEmbedder(), CONFIG, key_file=key_file
    )


def _build(folder: Path, key_file: Path | None) -> list[tuple[str, str]]:
    """12 memories, then x, y, z, then 4 queries (a snapshot after the 4th);
    returns the pairs it paid for."""
    scorer = KeywordScorer()
    with OnlineRetriever(
        folder, scorer, HashEmbedder(), CONFIG, key_file=key_file
    ) as retriever:
        retriever.add(memories(12))
        retriever.add(list(UNIQUE.values()), ids=list(UNIQUE))
        for question in queries(4):
            retriever.query(question)
    return sorted(set(scorer.paid))


@pytest.fixture(scope="module")
def unkeyed(tmp_path_factory):
    folder = tmp_path_factory.mktemp("unkeyed") / "agent"
    return folder, _build(folder, None)


@pytest.fixture(scope="module")
def keyed(tmp_path_factory):
    root = tmp_path_factory.mktemp("keyed")
    (root / "keys").mkdir()
    key_file = root / "keys" / "agent.key"
    folder = root / "agent"
    return folder, _build(folder, key_file), key_file


def _copy(folder: Path, tmp_path: Path, name: str = "agent") -> Path:
    target = tmp_path / name
    shutil.copytree(folder, target)
    return target


def _forget(folder: Path, ids, key_file=None, then: int = 2) -> None:
    """Deletes ``ids`` one call each, then answers ``then`` queries."""
    with _open(folder, key_file) as retriever:
        for mid in ids:
            retriever.delete([mid])
        for question in queries(then):
            retriever.query(question)


def _db(folder: Path) -> sqlite3.Connection:
    return sqlite3.connect(folder / "journal.sqlite", isolation_level=None)


def _recompute(db: sqlite3.Connection, table: str, digests: RowDigests) -> None:
    """Rewrites every checksum of ``table`` with ``digests``, the way someone
    editing the folder with this package's own code would."""
    keys = TABLE_KEYS[table]
    names = CHECKED_FIELDS[table]
    selected = ", ".join([*keys, *(raw_column(table, n) for n in names)])
    marks = " AND ".join(f"{k}=?" for k in keys)
    for stored in db.execute(f"SELECT {selected} FROM {table}").fetchall():
        fields = stored[len(keys) :]
        db.execute(
            f"UPDATE {table} SET checksum=? WHERE {marks}",
            (digests.row(table, fields), *stored[: len(keys)]),
        )


def _problems(folder, key_file=None, deep=True) -> str:
    report = check(folder, deep=deep, key_file=key_file)
    assert not report.ok
    return " | ".join(report.problems)


# ------------------------------------------------------------- moved values


def test_a_text_moved_to_another_row_with_its_digest_is_named(unkeyed, tmp_path):
    folder = _copy(unkeyed[0], tmp_path)
    index = CHECKED_FIELDS["memories"].index("text")
    part = slice(DIGEST_BYTES * index, DIGEST_BYTES * (index + 1))
    db = _db(folder)
    stored = {
        row: db.execute(
            "SELECT text, checksum FROM memories WHERE row=?", (row,)
        ).fetchone()
        for row in (2, 3)
    }
    for row, other in ((2, 3), (3, 2)):
        text, theirs = stored[other]
        ours = bytearray(stored[row][1])
        ours[part] = theirs[part]
        db.execute(
            "UPDATE memories SET text=?, checksum=? WHERE row=?",
            (text, bytes(ours), row),
        )
    db.close()
    with pytest.raises(
        CorruptFolderError, match=r"memory row 2 \(id 2\): its text does not match"
    ):
        _open(folder)
    problems = _problems(folder)
    for row in (2, 3):
        assert f"memory row {row} (id {row}): its text does not match" in problems


def test_a_score_moved_to_another_pair_with_its_digest_is_named(unkeyed, tmp_path):
    folder = _copy(unkeyed[0], tmp_path)
    index = CHECKED_FIELDS["scores"].index("value")
    part = slice(DIGEST_BYTES * index, DIGEST_BYTES * (index + 1))
    db = _db(folder)
    rows = db.execute(
        "SELECT scorer, query_hash, memory_hash, value, checksum FROM scores"
    ).fetchall()
    first = rows[0]
    second = next(r for r in rows if r[3] != first[3])
    for ours, theirs in ((first, second), (second, first)):
        checksum = bytearray(ours[4])
        checksum[part] = theirs[4][part]
        db.execute(
            "UPDATE scores SET value=?, checksum=? WHERE scorer=? AND "
            "query_hash=? AND memory_hash=?",
            (theirs[3], bytes(checksum), *ours[:3]),
        )
    db.close()
    problems = _problems(folder, deep=False)
    assert (
        len(re.findall(r"paid score \(query \w+, memory \w+\): its value", problems))
        == 2
    )


# ----------------------------------------------------------- forged digests


def _invert_scores(db: sqlite3.Connection, digests: RowDigests) -> int:
    """Every paid score ``v`` becomes ``1 - v``, its checksum recomputed with
    ``digests``; returns how many."""
    rows = db.execute(
        "SELECT scorer, query_hash, memory_hash, value, query_index FROM scores"
    ).fetchall()
    for scorer, query_hash, memory_hash, value, index in rows:
        fields = (scorer, query_hash, memory_hash, 1.0 - value, index)
        db.execute(
            "UPDATE scores SET value=?, checksum=? WHERE scorer=? AND "
            "query_hash=? AND memory_hash=?",
            (1.0 - value, digests.row("scores", fields), *fields[:3]),
        )
    return len(rows)


def _served(folder, pairs, key_file=None) -> list[float | None]:
    key = KeywordScorer().identity.key()
    journal = Journal(folder, key_file=key_file)
    try:
        return [journal.get_scores(key, q, [m])[0] for q, m in pairs]
    finally:
        journal.close()


def test_an_unkeyed_folder_cannot_tell_digests_recomputed_on_purpose(unkeyed, tmp_path):
    """What an unkeyed folder does not catch, stated as a test: every score
    inverted and its digests recomputed passes open and ``check --deep``."""
    folder, pairs = _copy(unkeyed[0], tmp_path), unkeyed[1]
    before = _served(folder, pairs)
    db = _db(folder)
    assert _invert_scores(db, RowDigests()) == len(pairs)
    db.close()
    assert check(folder, deep=True).ok
    after = _served(folder, pairs)
    assert after == pytest.approx([1.0 - v for v in before])


def test_a_keyed_folder_refuses_digests_recomputed_without_its_key(keyed, tmp_path):
    source, pairs, key_file = keyed
    folder = _copy(source, tmp_path)
    db = _db(folder)
    assert _invert_scores(db, RowDigests()) == len(pairs)
    db.close()
    problems = check(folder, deep=True, key_file=key_file).problems
    forged = [p for p in problems if "paid score" in p and "does not match" in p]
    assert len(forged) == len(pairs) == len(problems)
    assert _served(folder, pairs, key_file) == [None] * len(pairs)

    # Every row rewritten as an unkeyed folder (the record of the scheme
    # too): refused with the key, which is the one thing the rewriter lacks.
    db = _db(folder)
    text = json.dumps(RowDigests().record())
    db.execute("UPDATE meta SET value=? WHERE key='digests'", (text,))
    for table in TABLE_KEYS:
        _recompute(db, table, RowDigests())
    db.close()
    with pytest.raises(FolderKeyError, match="has unkeyed digests, but a key file"):
        _open(folder, key_file)
    assert "FolderKeyError: " in _problems(folder, key_file)
    # Opened without its key it passes: the key guards only those who pass it.
    assert check(folder, deep=True).ok


# ------------------------------------------------------ deleted rows put back


@pytest.mark.parametrize("served", [True, False], ids=["served", "kept retired"])
def test_a_deleted_row_put_back_is_named(unkeyed, tmp_path, served):
    """Row z put back from a backup (the snapshot dropped); ``served``: its
    retire operation rewritten, digests recomputed, so it would be live."""
    folder = _copy(unkeyed[0], tmp_path)
    backup = folder.with_name("backup.sqlite")
    shutil.copy(folder / "journal.sqlite", backup)
    _forget(folder, ["z"])
    old = sqlite3.connect(backup)
    saved = old.execute(
        "SELECT text, metadata, embedding, checksum FROM memories WHERE id='z'"
    ).fetchone()
    old.close()
    db = _db(folder)
    db.execute(
        "UPDATE memories SET text=?, metadata=?, embedding=?, checksum=? WHERE id='z'",
        saved,
    )
    if served:
        seq, kind, data = db.execute(
            "SELECT seq, kind, data FROM ops WHERE kind='retire'"
        ).fetchone()
        payload = json.dumps({"rows": [], "reason": "delete"})
        db.execute(
            "UPDATE ops SET payload=?, checksum=? WHERE seq=?",
            (payload, RowDigests().row("ops", (seq, kind, payload, data)), seq),
        )
        db.execute("UPDATE memories SET retired_op=NULL WHERE id='z'")
    db.execute("DELETE FROM snapshots")
    db.execute("DELETE FROM chunks")
    db.close()
    named = (
        r"memory row 14 \(id 'z'\) was deleted \(operation \d+, delete log record 1\)"
    )
    with pytest.raises(CorruptFolderError, match=named):
        _open(folder)
    assert re.search(named, _problems(folder)), _problems(folder)
    if served:
        # What an unkeyed folder does not catch: the log's record removed too
        # (its last one: no chain follows it) and the folder passes, z served.
        db = _db(folder)
        db.execute("DELETE FROM deletions")
        db.close()
        assert check(folder, deep=True).ok
        with _open(folder) as retriever:
            assert retriever.get(["z"])[0].text == UNIQUE["z"]


@pytest.mark.parametrize("snapshot", ["dropped", "kept"])
def test_a_keyed_folder_names_a_row_put_back_with_its_traces_removed(
    keyed, tmp_path, snapshot
):
    """Without the key nothing can be rewritten, only removed: row z put back
    (its digests valid: the same place), its delete-log record and its retire
    operation removed (the snapshot, taken after them, dropped or kept); the
    gap is named."""
    source, _, key_file = keyed
    folder = _copy(source, tmp_path)
    backup = folder.with_name("backup.sqlite")
    shutil.copy(folder / "journal.sqlite", backup)
    _forget(folder, ["z"], key_file)
    old = sqlite3.connect(backup)
    saved = old.execute(
        "SELECT text, metadata, embedding, checksum FROM memories WHERE id='z'"
    ).fetchone()
    old.close()
    db = _db(folder)
    (seq,) = db.execute("SELECT seq FROM ops WHERE kind='retire'").fetchone()
    db.execute(
        "UPDATE memories SET text=?, metadata=?, embedding=?, checksum=?, "
        "retired_op=NULL WHERE id='z'",
        saved,
    )
    db.execute("DELETE FROM deletions WHERE op=?", (seq,))
    db.execute("DELETE FROM ops WHERE seq=?", (seq,))
    assert db.execute("SELECT MAX(seq) FROM snapshots").fetchone()[0] > seq
    if snapshot == "dropped":
        db.execute("DELETE FROM snapshots")
        db.execute("DELETE FROM chunks")
    db.close()
    named = rf"operation {seq} is missing \(the next one stored is {seq + 1}\)"
    with pytest.raises(CorruptFolderError, match=named):
        _open(folder, key_file)
    assert re.search(named, _problems(folder, key_file))


# --------------------------------------------------------------- delete log


def _edit_record(db, number: int, digests: RowDigests | None) -> None:
    """Points record ``number`` at another row (x's); re-digested when
    ``digests`` is given."""
    fields = list(
        db.execute(
            "SELECT number, row, op, tombstone, previous FROM deletions WHERE number=?",
            (number,),
        ).fetchone()
    )
    fields[1] = ROW_OF["x"]
    checksum = (
        db.execute(
            "SELECT checksum FROM deletions WHERE number=?", (number,)
        ).fetchone()[0]
        if digests is None
        else digests.row("deletions", fields)
    )
    db.execute(
        "UPDATE deletions SET row=?, checksum=? WHERE number=?",
        (fields[1], checksum, number),
    )


LOG_DAMAGE = {
    "middle record removed": (
        lambda db: db.execute("DELETE FROM deletions WHERE number=2"),
        r"delete log record 3: record 2 before it is missing",
    ),
    "record edited": (
        lambda db: _edit_record(db, 2, None),
        r"delete log record 2: its row does not match its checksum",
    ),
    "record edited and re-digested": (
        lambda db: _edit_record(db, 2, RowDigests()),
        r"delete log record 3: does not carry the checksum of record 2",
    ),
    "last record removed": (
        lambda db: db.execute("DELETE FROM deletions WHERE number=3"),
        rf"operation \d+ deleted memory row {ROW_OF['z']}, but the delete log "
        "holds no record of it",
    ),
}


@pytest.mark.parametrize("damage", list(LOG_DAMAGE))
def test_a_removed_or_edited_delete_log_record_is_named(unkeyed, tmp_path, damage):
    folder = _copy(unkeyed[0], tmp_path)
    _forget(folder, ["x", "y", "z"])
    assert check(folder, deep=True).ok
    edit, named = LOG_DAMAGE[damage]
    db = _db(folder)
    assert db.execute("SELECT COUNT(*) FROM deletions").fetchone() == (3,)
    edit(db)
    db.close()
    # Open names the first problem; check names each.
    with pytest.raises(CorruptFolderError, match="delete log"):
        _open(folder)
    problems = _problems(folder)
    assert re.search(named, problems), problems
    assert "Traceback" not in problems


def test_the_delete_log_holds_no_trace_of_the_text(unkeyed, tmp_path):
    """A record keeps the row, the operation and the emptied row's digest:
    nothing computed from the deleted text (its digest in the row is gone)."""
    folder = _copy(unkeyed[0], tmp_path)
    db = _db(folder)
    (before,) = db.execute("SELECT checksum FROM memories WHERE id='z'").fetchone()
    db.close()
    _forget(folder, ["z"])
    db = _db(folder)
    ((row, tombstone),) = db.execute("SELECT row, tombstone FROM deletions").fetchall()
    (after,) = db.execute("SELECT checksum FROM memories WHERE id='z'").fetchone()
    db.close()
    assert row == ROW_OF["z"] and tombstone == after
    index = CHECKED_FIELDS["memories"].index("text")
    text_digest = before[DIGEST_BYTES * index : DIGEST_BYTES * (index + 1)]
    data = b"".join(p.read_bytes() for p in folder.iterdir() if p.is_file())
    assert UNIQUE["z"].split(":")[0].encode() not in data
    assert text_digest not in data


# ---------------------------------------------------------------- the key


def test_the_key_file_is_private_outside_the_folder_and_required(keyed, tmp_path):
    source, _, key_file = keyed
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert re.fullmatch(r"[0-9a-f]{64}\n", key_file.read_text())
    assert not any(p.name == key_file.name for p in source.iterdir())
    folder = _copy(source, tmp_path)
    with pytest.raises(FolderKeyError) as raised:
        _open(folder)
    message = str(raised.value)
    assert "\n" not in message and str(folder) in message and "key_file" in message
    assert check(folder, deep=True, key_file=key_file).ok
    assert "FolderKeyError: " in _problems(folder)

    other = tmp_path / "other.key"
    with _open(tmp_path / "unkeyed", other):  # a new keyed folder makes a key
        pass
    with pytest.raises(FolderKeyError, match=r"is not the key of .*meta\['digests'\]"):
        _open(folder, other)
    missing = tmp_path / "missing.key"
    with pytest.raises(FolderKeyError, match="missing.key does not exist"):
        _open(folder, missing)
    assert not missing.exists()  # an existing folder never gets a new key

    shutil.copy(key_file, tmp_path / "open.key")
    os.chmod(tmp_path / "open.key", 0o644)
    with pytest.raises(FolderKeyError, match="chmod 600"):
        _open(folder, tmp_path / "open.key")
    with pytest.raises(FolderKeyError, match="is inside the folder"):
        _open(tmp_path / "new", tmp_path / "new" / "agent.key")
    assert not (tmp_path / "new" / "agent.key").exists()
    with pytest.raises(FolderKeyError, match="has unkeyed digests, but a key file"):
        _open(_plain(tmp_path), key_file)

    with _open(folder, key_file) as retriever:
        assert retriever.num_memories == 15


def _plain(tmp_path: Path) -> Path:
    folder = tmp_path / "plain"
    with _open(folder) as retriever:
        retriever.add(memories(3))
    return folder


# ------------------------------------------------------- the previous format


def _legacy_canonical(value) -> bytes:
    if value is None:
        return b"n"
    if isinstance(value, int):
        return b"i" + str(value).encode()
    if isinstance(value, float):
        return b"f" + struct.pack("<d", value)
    if isinstance(value, str):
        return b"s" + value.encode("utf-8")
    return b"s" + bytes(value)


def _legacy_checksum(fields) -> bytes:
    """A row's checksum as format 3 wrote it: each field alone, 4 bytes."""
    return b"".join(
        hashlib.blake2b(_legacy_canonical(f), digest_size=4).digest() for f in fields
    )


def _as_format_3(folder: Path) -> None:
    """Rewrites ``folder`` in the layout format 3 wrote: no delete log, no
    record of a scheme, retire operations naming only the rows they retire,
    and each row digested field by field."""
    db = _db(folder)
    for seq, payload in db.execute(
        "SELECT seq, payload FROM ops WHERE kind='retire'"
    ).fetchall():
        stored = json.loads(payload)
        stored.pop("scrubbed", None)
        db.execute("UPDATE ops SET payload=? WHERE seq=?", (json.dumps(stored), seq))
    db.execute("DROP TABLE deletions")
    db.execute("DELETE FROM meta WHERE key='digests'")
    db.execute("UPDATE meta SET value='\"earm-retriever/3\"' WHERE key='format'")
    for table in ("meta", "memories", "ops", "scores"):
        keys = TABLE_KEYS[table]
        columns = ", ".join([*keys, *CHECKED_FIELDS[table]])
        marks = " AND ".join(f"{k}=?" for k in keys)
        for stored in db.execute(f"SELECT {columns} FROM {table}").fetchall():
            db.execute(
                f"UPDATE {table} SET checksum=? WHERE {marks}",
                (_legacy_checksum(stored[len(keys) :]), *stored[: len(keys)]),
            )
    db.close()


def test_a_folder_of_format_3_is_verified_and_upgraded(unkeyed, tmp_path):
    folder = _copy(unkeyed[0], tmp_path)
    _forget(folder, ["z"])
    with _open(folder) as reference:
        expected = (
            [(m.id, m.text) for m in reference.memories()],
            [reference.answer(i) for i in range(reference.num_queries)],
        )
    _as_format_3(folder)
    damaged = _copy(folder, tmp_path, "damaged")
    old_key = tmp_path / "old.key"
    with pytest.raises(FolderKeyError, match="a key is never added"):
        _open(folder, old_key)
    assert not old_key.exists()

    with _open(folder) as upgraded:
        held = (
            [(m.id, m.text) for m in upgraded.memories()],
            [upgraded.answer(i) for i in range(upgraded.num_queries)],
        )
        journal = upgraded._journal
        assert journal.get_meta("format") == "earm-retriever/4"
        assert journal.get_meta("digests") == {"scheme": "blake2b"}
        assert journal.findings() == []
        records = journal._db.execute("SELECT row, op FROM deletions").fetchall()
    assert held == expected
    assert records == [(ROW_OF["z"], None)]  # the tombstone, by an unknown op
    assert check(folder, deep=True).ok

    # A damaged row of the old format is refused, never digested anew.
    db = _db(damaged)
    db.execute("UPDATE memories SET text='Xylophone-unique-1102' WHERE id='x'")
    db.close()
    with pytest.raises(
        CorruptFolderError,
        match=r"memory row 12 \(id 'x'\): its text does not match its checksum "
        r"\(format 'earm-retriever/3'; the folder was not upgraded",
    ):
        _open(damaged)
    db = _db(damaged)
    assert db.execute("SELECT value FROM meta WHERE key='format'").fetchone() == (
        '"earm-retriever/3"',
    )
    db.close()
