"""Damage, named: real bytes flipped in a real folder's journal file are
refused at open or served as unpaid, and each is a finding of ``check`` that
names the row and what is wrong, never a traceback; ``repair`` restores what
the journal can rebuild and names what it cannot; a lost journal is refused."""

from __future__ import annotations

import dataclasses
import json
import random
import re
import shutil
import sqlite3
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

from earm_jax.retriever import OnlineRetriever
from earm_jax.retriever.maintenance import check, repair
from earm_jax.store.journal import CorruptFolderError, Journal

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories  # noqa: E402

# Run by the fast tier too: these are the retriever's lock / checksum basics.
pytestmark = pytest.mark.basics

TEXT = "Zebra-unique-text-7781: Sam keeps a chess diary."
META = "meta-unique-4242"
QUERY = "Query-unique-5151 about chess?"
# Query texts kept, so a flipped byte of one is in a payload to be found.
KEEP = dataclasses.replace(CONFIG, query_retention="keep")


def _open(folder):
    return OnlineRetriever(folder, KeywordScorer(), HashEmbedder(), KEEP)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """A closed folder: 13 memories (one with a unique text and metadata),
    6 queries (a snapshot after the 4th), every page in the main file."""
    folder = tmp_path_factory.mktemp("pristine") / "agent"
    scorer = KeywordScorer()
    with OnlineRetriever(folder, scorer, HashEmbedder(), KEEP) as retriever:
        retriever.add(memories(12))
        retriever.add([TEXT], metadata=[{"note": META}], ids=["z"])
        retriever.query(QUERY)
        for number in range(5):
            retriever.query(f"What did Sam say about chess {number}?")
    assert not Path(str(folder / "journal.sqlite") + "-wal").exists()
    # Beside the folder (copies take the folder only): the pairs it paid.
    folder.with_name("paid.json").write_text(
        "\n".join(json.dumps(pair) for pair in scorer.paid)
    )
    return folder


def _copy(pristine, tmp_path):
    folder = tmp_path / "agent"
    shutil.copytree(pristine, folder)
    return folder


def _flip(folder, pattern, offset=0, xor=0x01, occurrence=0):
    path = folder / "journal.sqlite"
    data = bytearray(path.read_bytes())
    position = -1
    for _ in range(occurrence + 1):
        position = data.find(pattern, position + 1)
        assert position >= 0, f"{pattern!r} is not in the journal"
    data[position + offset] ^= xor
    path.write_bytes(bytes(data))


def _problems(folder, deep=True):
    report = check(folder, deep=deep)
    assert not report.ok
    return " | ".join(report.problems)


@pytest.mark.parametrize(
    "pattern, offset, named",
    [
        (TEXT.encode(), 3, r"memory row 12 \(id 'z'\): its text does not match"),
        (META.encode(), 2, r"memory row 12 \(id 'z'\): its metadata does not match"),
        (None, 5, r"memory row 12 \(id 'z'\): its embedding does not match"),
        (b"Query-unique-5151", 4, r"operation \d+: its payload does not match"),
    ],
)
def test_a_flipped_byte_is_refused_at_open_and_named_by_check(
    pristine, tmp_path, pattern, offset, named
):
    folder = _copy(pristine, tmp_path)
    if pattern is None:  # the unique memory's embedding, as stored
        pattern = HashEmbedder().embed([TEXT])[0].tobytes()
        offset = int(np.flatnonzero(np.frombuffer(pattern, np.uint8))[0])
    _flip(folder, pattern, offset)
    if b"Query" in pattern:
        # A query before the snapshot is not replayed at open: the deep check
        # (a full replay) and the row scan find it.
        assert _open(folder).close() is None
    else:
        with pytest.raises(CorruptFolderError, match=named):
            _open(folder)
    problems = _problems(folder)
    assert re.search(named, problems), problems
    with pytest.raises(CorruptFolderError, match="cannot restore"):
        repair(folder)


def test_invalid_utf8_is_a_finding_not_a_sqlite_error(pristine, tmp_path):
    folder = _copy(pristine, tmp_path)
    _flip(folder, TEXT.encode(), 0, xor=ord("Z") ^ 0xFF)  # 'Z' becomes 0xFF
    with pytest.raises(CorruptFolderError, match=r"memory row 12 \(id 'z'\)"):
        _open(folder)
    assert "memory row 12" in _problems(folder, deep=False)


def test_a_damaged_paid_score_is_never_served_and_a_fresh_one_replaces_it(
    pristine, tmp_path
):
    folder = _copy(pristine, tmp_path)
    lines = pristine.with_name("paid.json").read_text().splitlines()
    pairs = sorted({tuple(json.loads(line)) for line in lines})
    # Scores are 8-byte big-endian doubles (an integral 1.0 is stored as the
    # integer 1, in no bytes at all); 0.05 is a keyword miss.
    _flip(folder, struct.pack(">d", 0.05), 7, xor=0x10)
    assert "paid score" in _problems(folder, deep=False)
    key = KeywordScorer().identity.key()
    journal = Journal(folder)
    try:
        values = [journal.get_scores(key, q, [m])[0] for q, m in pairs]
        unpaid = [
            pair for pair, value in zip(pairs, values, strict=True) if value is None
        ]
        assert len(unpaid) == 1 and journal.damaged_scores == 1
        assert all(v in (1.0, 0.05) for v in values if v is not None)
        (query, memory), scorer = unpaid[0], KeywordScorer()
        value = scorer.value(query, memory)
        journal.put_scores(key, [(query, memory, value)], 6)
        assert journal.get_scores(key, query, [memory]) == [value]
        assert journal.findings() == []
    finally:
        journal.close()


def test_repair_drops_damaged_scores_and_rebuilds_the_snapshot(pristine, tmp_path):
    folder = _copy(pristine, tmp_path)
    _flip(folder, struct.pack(">d", 0.05), 7, xor=0x10)
    actions = repair(folder)
    assert any("dropped 1 damaged paid score" in action for action in actions)
    assert check(folder, deep=True).ok


def test_a_lost_or_emptied_journal_is_refused_not_opened_as_new(pristine, tmp_path):
    folder = _copy(pristine, tmp_path)
    journal = folder / "journal.sqlite"
    journal.write_bytes(b"")
    with pytest.raises(CorruptFolderError, match="is empty, but .* held a retriever"):
        _open(folder)
    assert "is empty" in _problems(folder)
    journal.unlink()
    with pytest.raises(CorruptFolderError, match="is missing, but .* held a retriever"):
        _open(folder)
    assert not journal.exists()  # refused before anything was created
    with pytest.raises(CorruptFolderError, match="cannot restore"):
        repair(folder)
    shutil.copy(pristine / "journal.sqlite", journal)
    data = journal.read_bytes()
    journal.write_bytes(data[: len(data) // 2])  # truncated
    with pytest.raises(CorruptFolderError):
        _open(folder)
    assert _problems(folder)


def test_random_flips_are_found_or_change_nothing(pristine, tmp_path):
    """Any single flipped byte: ``check --deep`` names damage, or the folder
    still holds exactly what it held (the byte was unused space)."""
    with _open(_copy(pristine, tmp_path / "reference")) as reference:
        expected = (
            [(m.id, m.text, m.metadata) for m in reference.memories()],
            [reference.answer(i) for i in range(reference.num_queries)],
        )
    size = (pristine / "journal.sqlite").stat().st_size
    rng = random.Random(7)
    found = 0
    for trial in range(20):
        folder = _copy(pristine, tmp_path / f"trial{trial}")
        path = folder / "journal.sqlite"
        data = bytearray(path.read_bytes())
        data[rng.randrange(100, size)] ^= 1 << rng.randrange(8)
        path.write_bytes(bytes(data))
        report = check(folder, deep=True)
        if report.ok:
            with _open(folder) as retriever:
                held = (
                    [(m.id, m.text, m.metadata) for m in retriever.memories()],
                    [retriever.answer(i) for i in range(retriever.num_queries)],
                )
            assert held == expected, trial
        else:
            found += 1
            assert all("Traceback" not in p for p in report.problems)
    assert found >= 1


def test_a_folder_of_the_previous_format_is_migrated(pristine, tmp_path):
    """A folder as the previous format wrote it (no checksums, no marker, no
    embedder record) opens with every row checksummed and the same answers."""
    folder = _copy(pristine, tmp_path)
    with _open(_copy(pristine, tmp_path / "reference")) as reference:
        expected = [reference.answer(i) for i in range(reference.num_queries)]
    db = sqlite3.connect(folder / "journal.sqlite")
    for table in ("meta", "memories", "ops", "scores"):
        db.execute(f"ALTER TABLE {table} DROP COLUMN checksum")
    db.execute("DELETE FROM meta WHERE key='embedder'")
    db.execute("UPDATE meta SET value='\"earm-retriever/2\"' WHERE key='format'")
    db.commit()
    db.close()
    (folder / "retriever.json").unlink()
    with _open(folder) as migrated:
        assert [migrated.answer(i) for i in range(migrated.num_queries)] == expected
        assert migrated._journal.get_meta("format") == "earm-retriever/4"
        assert migrated._journal.findings() == []
    assert (folder / "retriever.json").exists()
    assert check(folder, deep=True).ok
    _flip(folder, TEXT.encode(), 3)  # and its rows are guarded from now on
    with pytest.raises(CorruptFolderError, match="its text does not match"):
        _open(folder)
