"""``delete`` forgets: once it returns, the deleted memory's text, metadata and
embedding (every version of it) and its paid scores are in no file of the
folder; what is kept (the id as a tombstone, numbers in the solver's history)
names no text."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from earm_jax.retriever import OnlineRetriever
from earm_jax.retriever.maintenance import check
from earm_jax.store.journal import text_hash

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories  # noqa: E402

SECRET = "Secret-unique-string-9931"
FIRST = f"{SECRET} v1: Sam's chess password is rook takes pawn."
SECOND = f"{SECRET} v2: Sam's chess password is knight to e5."
META = "meta-secret-7717"


def _folder_bytes(folder):
    return {path.name: path.read_bytes() for path in folder.iterdir() if path.is_file()}


def _traces(folder):
    """Which of the secret's traces some file of the folder still holds."""
    embedder = HashEmbedder()
    patterns = {
        "text": SECRET.encode(),
        "metadata": META.encode(),
        "first embedding": embedder.embed([FIRST])[0].tobytes(),
        "second embedding": embedder.embed([SECOND])[0].tobytes(),
        "first text's score key": text_hash(FIRST),
        "second text's score key": text_hash(SECOND),
    }
    files = _folder_bytes(folder)
    return {
        name: [file for file, data in files.items() if pattern in data]
        for name, pattern in patterns.items()
        if any(pattern in data for data in files.values())
    }


# Every query scores its whole pool, so both versions of the secret are paid.
FULL = dataclasses.replace(CONFIG, stage_ratios=(1.0,))


def _open(folder, config=FULL):
    return OnlineRetriever(folder, KeywordScorer(), HashEmbedder(), config)


@pytest.mark.parametrize("closed_before_delete", [True, False])
def test_delete_leaves_no_trace_in_any_file(tmp_path, closed_before_delete):
    agent = _open(tmp_path)
    agent.add(memories(20))
    agent.add([FIRST], metadata=[{"note": META}], ids=["secret"])
    for number in range(3):
        agent.query(f"What is Sam's chess password {number}?")
    agent.update("secret", SECOND)  # two versions of the secret now
    for number in range(3):
        agent.query(f"What about the chess password {number}?")
    if closed_before_delete:  # every page in the main file, none in the WAL
        agent.close()
        agent = _open(tmp_path, None)
    # Before: every trace is there (so the search below can fail).
    assert set(_traces(tmp_path)) == {
        "text",
        "metadata",
        "first embedding",
        "second embedding",
        "first text's score key",
        "second text's score key",
    }
    agent.delete(["secret"])
    assert _traces(tmp_path) == {}  # right after the call, the process alive
    # The folder still works, the id is a tombstone, nothing else changed.
    with pytest.raises(KeyError):
        agent.get(["secret"])
    with pytest.raises(ValueError, match="never reused"):
        agent.add(["x"], ids=["secret"])
    answer = agent.query("What is Sam's chess password?")
    assert "secret" not in answer.memory_ids
    kept = [(m.id, m.text) for m in agent.memories()]
    agent._release()  # what kill -9 leaves
    assert _traces(tmp_path) == {}
    with _open(tmp_path, None) as again:
        assert [(m.id, m.text) for m in again.memories()] == kept
        assert again.num_memories == 20
    assert check(tmp_path, deep=True).ok
    assert _traces(tmp_path) == {}
