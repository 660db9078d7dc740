"""Snapshots of the solver state in the journal: each leaf of a pytree stored
as content-addressed chunks (``chunks(hash, data)``, the hash a BLAKE2b digest
of the data), so unchanged chunks are not written again and a damaged chunk
never matches its key; ``snapshots`` holds the one current manifest."""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from earm_jax.store.integrity import CorruptFolderError

CHUNK_BYTES = 32 * 1024


def chunk_hash(data: bytes) -> bytes:
    """The key of a snapshot chunk."""
    return hashlib.blake2b(data, digest_size=16).digest()


class SnapshotStore:
    """The snapshot half of :class:`~earm_jax.store.journal.Journal`."""

    path: Path
    _db: sqlite3.Connection

    def write_snapshot(
        self,
        seq: int,
        num_queries: int,
        solver_config: dict,
        leaves: Sequence[np.ndarray],
        names: Sequence[str] | None = None,
    ) -> int:
        """Stores a pytree's leaves as of operation ``seq``; returns bytes written.

        One transaction: the new snapshot replaces the old one atomically, and
        only chunks not already stored are written.
        """
        manifest = []
        new_chunks: dict[bytes, bytes] = {}
        for leaf in leaves:
            array = np.array(leaf, order="C", copy=True)
            hashes = []
            if array.ndim == 0 or array.nbytes <= CHUNK_BYTES:
                pieces = [array.tobytes()]
            else:
                row_bytes = max(1, array.nbytes // array.shape[0])
                rows = max(1, CHUNK_BYTES // row_bytes)
                pieces = [
                    array[start : start + rows].tobytes()
                    for start in range(0, array.shape[0], rows)
                ]
            for piece in pieces:
                digest = chunk_hash(piece)
                hashes.append(digest.hex())
                new_chunks[digest] = piece
            manifest.append(
                {"shape": list(array.shape), "dtype": array.dtype.str, "chunks": hashes}
            )
            if names is not None:
                manifest[-1]["name"] = names[len(manifest) - 1]
        stored = {
            bytes(h) for (h,) in self._db.execute("SELECT hash FROM chunks").fetchall()
        }
        written = 0
        with self.transaction() as db:
            for digest, piece in new_chunks.items():
                if digest not in stored:
                    db.execute("INSERT INTO chunks VALUES (?, ?)", (digest, piece))
                    written += len(piece)
            db.execute("DELETE FROM snapshots")
            db.execute(
                "INSERT INTO snapshots (seq, num_queries, solver_config, manifest, "
                "created_at) VALUES (?, ?, ?, ?, ?)",
                (
                    seq,
                    num_queries,
                    json.dumps(solver_config),
                    json.dumps(manifest),
                    time.time(),
                ),
            )
            stale = stored - set(new_chunks)
            db.executemany(
                "DELETE FROM chunks WHERE hash=?", [(digest,) for digest in stale]
            )
        return written

    def latest_snapshot(self) -> tuple[int, int, dict, list, list | None] | None:
        """``(seq, num_queries, solver_config, leaves, leaf names)`` of the
        snapshot, verified (names ``None`` if it stored none).

        Raises:
          CorruptFolderError: a chunk is missing or does not match its hash.
        """
        row = self._db.execute(
            "SELECT seq, num_queries, solver_config, manifest FROM snapshots "
            "ORDER BY id DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        seq, num_queries, config_text, manifest_text = row
        try:
            config, manifest = json.loads(config_text), json.loads(manifest_text)
        except ValueError as error:
            raise CorruptFolderError(
                f"{self.path}: the snapshot's manifest is not JSON ({error})"
            ) from error
        leaves = []
        for number, entry in enumerate(manifest):
            pieces = []
            for digest_hex in entry["chunks"]:
                digest = bytes.fromhex(digest_hex)
                found = self._db.execute(
                    "SELECT data FROM chunks WHERE hash=?", (digest,)
                ).fetchone()
                if found is None:
                    raise CorruptFolderError(
                        f"{self.path}: snapshot leaf {number} misses chunk "
                        f"{digest_hex} (run `earm retriever repair`)"
                    )
                if chunk_hash(found[0]) != digest:
                    raise CorruptFolderError(
                        f"{self.path}: snapshot leaf {number} chunk {digest_hex} "
                        "does not match its hash (run `earm retriever repair`)"
                    )
                pieces.append(found[0])
            data = b"".join(pieces)
            dtype, shape = np.dtype(entry["dtype"]), tuple(entry["shape"])
            if len(data) != dtype.itemsize * int(np.prod(shape, dtype=np.int64)):
                raise CorruptFolderError(
                    f"{self.path}: snapshot leaf {number} holds {len(data)} bytes, "
                    f"not a {dtype} array of shape {shape}"
                )
            leaves.append(np.frombuffer(data, dtype).reshape(shape).copy())
        names = [entry.get("name") for entry in manifest]
        return (
            int(seq),
            int(num_queries),
            config,
            leaves,
            None if None in names else names,
        )

    def drop_snapshots(self) -> None:
        with self.transaction() as db:
            db.execute("DELETE FROM snapshots")
            db.execute("DELETE FROM chunks")


__all__ = ["CHUNK_BYTES", "SnapshotStore", "chunk_hash"]
