"""Bad input raises ValueError or TypeError naming the field, with nothing
changed; ``where=`` is type-strict; a full disk is one clear error that says
nothing acknowledged was lost."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from earm_jax.retriever import OnlineRetriever
from earm_jax.retriever.validation import MAX_METADATA_BYTES, MAX_METADATA_DEPTH
from earm_jax.store.journal import DiskFullError

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories  # noqa: E402


def _nested(depth):
    value: dict = {}
    for _ in range(depth - 1):
        value = {"a": value}
    return value


def _fingerprint(retriever):
    journal = retriever._journal
    return (
        journal.last_seq(),
        retriever.num_memories,
        retriever.num_queries,
        journal.num_scores(),
        [(m.id, m.text, m.metadata) for m in retriever.memories()],
    )


@pytest.fixture
def retriever(tmp_path):
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), CONFIG) as agent:
        agent.add(memories(6), metadata=[{"session": i} for i in range(6)])
        yield agent


def test_bad_input_names_the_field_and_changes_nothing(retriever):
    before = _fingerprint(retriever)
    cases = [
        (lambda: retriever.add(["a"], ids=[2**70]), ValueError, r"ids\[0\] must fit"),
        (lambda: retriever.add(["a"], ids=[-(2**63) - 1]), ValueError, r"ids\[0\]"),
        (lambda: retriever.add(["ok", "bad \ud800"]), ValueError, r"texts\[1\] is not"),
        (lambda: retriever.add(["a"], ids=["x\udfff"]), ValueError, r"ids\[0\] is not"),
        (
            lambda: retriever.add(["a"], metadata=[{"k": "v\ud800"}]),
            ValueError,
            r"metadata\[0\]\['k'\] is not valid Unicode",
        ),
        (
            lambda: retriever.add(["a"], metadata=[_nested(1000)]),
            ValueError,
            rf"metadata\[0\] is nested deeper than {MAX_METADATA_DEPTH}",
        ),
        (
            lambda: retriever.add(["a"], metadata=[_nested(MAX_METADATA_DEPTH + 1)]),
            ValueError,
            "nested deeper",
        ),
        (
            lambda: retriever.add(["a"], metadata=[{"k": "x" * MAX_METADATA_BYTES}]),
            ValueError,
            rf"more than the {MAX_METADATA_BYTES} allowed",
        ),
        (
            lambda: retriever.add(["a"], metadata=[{1: "v"}]),
            ValueError,
            r"metadata\[0\].*keys must be strings",
        ),
        (
            lambda: retriever.add(["a"], metadata=[{"k": np.int64(3)}]),
            ValueError,
            r"metadata\[0\]\['k'\] must be a JSON value",
        ),
        (lambda: retriever.update(0, "new \ud800 text"), ValueError, "text is not"),
        (lambda: retriever.delete([2**64]), ValueError, r"ids\[0\] must fit"),
        (lambda: retriever.get(["\ud800"]), ValueError, r"ids\[0\] is not"),
        (lambda: retriever.query("chess \udc00?"), ValueError, "text is not"),
        (
            lambda: retriever.query("chess?", where={"session": np.array([1, 2])}),
            TypeError,
            r"where\['session'\] must be a JSON value .* got ndarray",
        ),
        (
            lambda: retriever.query("chess?", where={3: 1}),
            TypeError,
            "where has a key 3",
        ),
        (
            lambda: retriever.rerank("q?", [{"id": 2**70, "text": "a"}]),
            ValueError,
            r"candidates\[0\].id must fit",
        ),
        (
            lambda: retriever.rerank(
                "q?", [{"id": "m", "text": "a", "metadata": {"k": {1}}}]
            ),
            ValueError,
            r"candidates\[0\].metadata",
        ),
    ]
    # The depth limit is checked without recursion, far past Python's stack.
    assert MAX_METADATA_DEPTH < 1000 < sys.getrecursionlimit() * 10
    for call, kind, message in cases:
        with pytest.raises(kind, match=message):
            call()
        assert _fingerprint(retriever) == before, message
    # At the limits exactly: accepted.
    retriever.add(["deep"], metadata=[_nested(MAX_METADATA_DEPTH)], ids=[2**63 - 1])
    assert retriever.get([2**63 - 1])[0].metadata == _nested(MAX_METADATA_DEPTH)


def test_where_is_type_strict_and_a_missing_key_is_not_null(tmp_path):
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), CONFIG) as agent:
        agent.add(
            ["chess one", "chess two", "chess three", "chess four", "chess five"],
            metadata=[
                {"session": True, "k": None},
                {"session": 1},
                {"session": 1.0},
                {"session": "1", "tags": ["a", 1]},
                {"session": [True], "tags": ["a", True]},
            ],
            ids=["bool", "int", "float", "str", "list"],
        )

        def found(where):
            return set(agent.query("chess?", k=5, where=where).memory_ids)

        assert found({"session": True}) == {"bool"}
        assert found({"session": 1}) == {"int"}
        assert found({"session": 1.0}) == {"float"}
        assert found({"session": "1"}) == {"str"}
        assert found({"session": [True]}) == {"list"}
        assert found({"k": None}) == {"bool"}  # a stored null, not a missing key
        assert found({"tags": ["a", 1]}) == {"str"}
        with pytest.raises(ValueError, match="no memory matches"):
            agent.query("chess?", where={"session": 2})


def test_a_full_disk_is_one_clear_error_and_loses_nothing(tmp_path):
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), CONFIG) as agent:
        agent.add(memories(10))
        agent.query("What did Sam say about chess?")
        before = _fingerprint(agent)
        db = agent._journal._db
        (pages,) = db.execute("PRAGMA page_count").fetchone()
        db.execute(f"PRAGMA max_page_count={pages}")  # the disk is full now
        with pytest.raises(DiskFullError, match="stored nothing and changed nothing"):
            agent.add([f"a long memory {i} " * 40 for i in range(30)])
        with pytest.raises(DiskFullError, match="every call acknowledged before"):
            for number in range(40):  # until the query's own record needs a page
                agent.query(f"What did Sam say about hiking {number}?")
        assert _fingerprint(agent)[1] == before[1]  # no memory half-added
        acknowledged = agent.num_queries
        db.execute("PRAGMA max_page_count=1073741823")  # space again
        agent.add(["Sam bought a chess clock."])
        agent.query("What about the chess clock?")
        acknowledged += 1
    with OnlineRetriever(tmp_path, KeywordScorer(), HashEmbedder(), None) as again:
        assert again.num_queries == acknowledged
        assert again.num_memories == 11
