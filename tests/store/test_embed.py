"""Sentence-transformers embeddings (the real bundled MiniLM) and their disk cache."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from earm_jax.store import embeddings as embed
from earm_jax.store.embeddings import Embedder, EmbeddingCache, model_identity
from earm_jax.store.hashing import text_sha256

TEXTS = [
    "Caroline: I went to a LGBTQ support group yesterday and it was so powerful.",
    "Melanie: I painted a lake sunrise last year.",
    "When did Melanie paint a sunrise?",
    "Melanie: I painted a lake sunrise last year.",  # a repeat
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("embedding-cache")


@pytest.fixture(scope="module")
def embedder(cache_dir: Path) -> Embedder:
    return Embedder(cache_dir=cache_dir)


def test_embeddings_are_unit_norm_float32_and_meaningful(embedder: Embedder) -> None:
    vectors = embedder.embed(TEXTS)
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    np.testing.assert_array_equal(vectors[1], vectors[3])
    # The question is closer to the turn that answers it.
    assert vectors[2] @ vectors[1] > vectors[2] @ vectors[0] + 0.2
    assert embedder.identity.startswith("all-MiniLM-L6-v2-")
    assert embedder.embed([]).shape == (0, 384)


def test_second_embedder_reads_the_cache_without_loading_the_model(
    embedder: Embedder, cache_dir: Path
) -> None:
    first = embedder.embed(TEXTS)
    again = Embedder(cache_dir=cache_dir)
    second = again.embed(list(reversed(TEXTS)))
    np.testing.assert_array_equal(second, first[::-1])
    assert again.num_encoded == 0 and again.num_cached == len(TEXTS)
    assert not again.is_loaded  # never loaded
    cache_files = list(cache_dir.glob("embeddings-*.sqlite"))
    assert [f.name for f in cache_files] == [f"embeddings-{embedder.identity}.sqlite"]
    assert len(EmbeddingCache(cache_files[0])) == 3  # unique texts


def test_only_new_texts_are_encoded(embedder: Embedder) -> None:
    embedder.embed(TEXTS)
    before = embedder.num_encoded
    vectors = embedder.embed(TEXTS[:2] + ["Something never seen before."])
    assert embedder.num_encoded == before + 1
    assert vectors.shape == (3, 384)


def test_cache_can_be_disabled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(embed.CACHE_DIR_ENV, str(tmp_path / "env-cache"))
    assert embed.default_cache_dir() == tmp_path / "env-cache"
    uncached = Embedder(cache_dir=False)
    assert uncached.cache is None
    assert uncached.embed(TEXTS[:1]).shape == (1, 384)
    assert not (tmp_path / "env-cache").exists()
    Embedder()  # default cache folder comes from the environment
    assert (tmp_path / "env-cache").is_dir()


def test_model_identity_follows_the_files(tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text("{}", encoding="utf-8")
    (folder / "model.safetensors").write_bytes(b"\x00" * 64)
    first = model_identity(folder)
    assert first.startswith("my-model-") and first == model_identity(folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(b"\x01" * 64)  # same size, new weights
    mtime = weights.stat().st_mtime_ns + 1_000_000_000  # past coarse clock ticks
    os.utime(weights, ns=(mtime, mtime))
    assert model_identity(folder) != first
    copy = tmp_path / "elsewhere" / "my-model"
    copy.mkdir(parents=True)
    for file in folder.iterdir():
        (copy / file.name).write_bytes(file.read_bytes())
    assert model_identity(copy) == model_identity(folder)


def test_bad_inputs_raise_clear_errors(embedder: Embedder, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="model must be a local"):
        Embedder(tmp_path / "no-such-model", cache_dir=False)
    with pytest.raises(ValueError, match="batch_size"):
        Embedder(cache_dir=False, batch_size=0)
    with pytest.raises(ValueError, match=r"texts\[1\] must be a string"):
        embedder.embed(["fine", 3])  # type: ignore[list-item]


def test_text_key_is_sha256() -> None:
    assert text_sha256("abc") == (
        "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
    )


class _Fixed:
    """A stand-in embedder whose vectors are ``base`` plus this writer's
    ``offset`` (two batches of one model differ in their last bits)."""

    identity = "fixed"

    def __init__(self, offset: float, during=None) -> None:
        self.offset = offset
        self.during = during

    def embed(self, texts):
        if self.during is not None:
            self.during()  # another writer stores first, while this one encodes
        return np.array([[len(t), 1.0 + self.offset] for t in texts], np.float32)


def test_the_first_writer_of_a_text_is_what_every_reader_gets(tmp_path: Path):
    """Two writers of one cache race on the same texts: the one that stores
    second keeps nothing of its own and returns what the cache holds, so
    both build their pools from the same vectors."""
    path = tmp_path / "shared.sqlite"
    first = embed.CachedEmbedder(_Fixed(0.0), path)
    second = embed.CachedEmbedder(_Fixed(1e-6, during=lambda: first.embed(TEXTS)), path)
    got = second.embed(TEXTS)
    np.testing.assert_array_equal(got, first.embed(TEXTS))
    np.testing.assert_array_equal(got[:, 1], np.float32(1.0))
    # The real model's path does the same.
    cached = Embedder(cache_dir=tmp_path / "real")
    assert cached.cache is not None
    planted = np.full(384, 0.05, np.float32)
    original = cached._encode

    def racing(texts):
        cached.cache.put({text_sha256(TEXTS[0]): planted})
        return original(texts)

    cached._encode = racing
    np.testing.assert_array_equal(cached.embed(TEXTS[:1])[0], planted)


def test_a_damaged_row_is_replaced(tmp_path: Path):
    import sqlite3

    path = tmp_path / "damaged.sqlite"
    writer = embed.CachedEmbedder(_Fixed(0.0), path)
    writer.embed(TEXTS[:1])
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE embeddings SET vector = x'00'")
    assert writer.cache.get([text_sha256(TEXTS[0])]) == {}  # read as missing
    again = embed.CachedEmbedder(_Fixed(0.5), path)
    np.testing.assert_array_equal(again.embed(TEXTS[:1])[0], [len(TEXTS[0]), 1.5])
    stored = again.cache.get([text_sha256(TEXTS[0])])[text_sha256(TEXTS[0])]
    np.testing.assert_array_equal(stored, [len(TEXTS[0]), 1.5])
