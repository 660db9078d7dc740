"""Opening a folder: the stored settings checked against the caller's, the
memory rows loaded, the latest snapshot restored and the operations after it
replayed through the code that ran them; and writing snapshots."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.base import NOT_INSERTED, Observation, Query
from earm_jax.core.config import SolverConfig, SolverState
from earm_jax.core.online import online_solver
from earm_jax.policies.adaptive import Ledger
from earm_jax.retriever.compiled import adaptive_for, build_policy, solver_config_of
from earm_jax.retriever.config import RUNTIME_FIELDS, RetrieverConfig, runtime_of
from earm_jax.retriever.serial import serialized
from earm_jax.store.journal import FORMAT, CorruptFolderError, Journal


class Recovery:
    """The opening, replay and snapshot half of :class:`OnlineRetriever`."""

    _use_snapshot = True

    def _open(self, scorer, embedder, config) -> None:
        runtime = config or RetrieverConfig()
        self.scorer = scorer
        self.embedder = embedder
        self._journal = journal = Journal(self.directory, runtime.synchronous)
        scorer_key = scorer.identity.key()
        stored_format = journal.get_meta("format")
        if stored_format is None:
            if journal.last_seq() > 0:
                raise CorruptFolderError(
                    f"{journal.path}: operations without settings (meta is empty)"
                )
            self.config = runtime
            with journal.transaction() as db:
                Journal.set_meta(db, "format", FORMAT)
                Journal.set_meta(db, "config", runtime.experience())
                Journal.set_meta(db, "runtime", runtime_of(runtime))
                Journal.set_meta(db, "scorer", scorer_key)
                Journal.set_meta(db, "width", None)
        else:
            if stored_format != FORMAT:
                raise CorruptFolderError(
                    f"{journal.path}: format {stored_format!r}, expected {FORMAT!r}"
                )
            stored = journal.get_meta("config")
            try:
                base = RetrieverConfig(**stored)
            except (TypeError, ValueError) as error:
                raise CorruptFolderError(
                    f"{journal.path}: stored config is invalid ({error})"
                ) from error
            if config is not None:
                theirs = config.experience()
                differ = sorted(k for k in theirs if theirs[k] != stored.get(k))
                if differ:
                    detail = ", ".join(
                        f"{k}: stored {stored.get(k)!r}, given {theirs[k]!r}"
                        for k in differ
                    )
                    raise ValueError(
                        f"{self.directory} was created with other settings "
                        f"({detail}); pass config=None to use the stored ones, "
                        "or use a new folder"
                    )
            if config is None:
                stored_runtime = journal.get_meta("runtime") or {}
                runtime = dataclasses.replace(
                    runtime,
                    **{k: v for k, v in stored_runtime.items() if k in RUNTIME_FIELDS},
                )
            else:
                with journal.transaction() as db:
                    Journal.set_meta(db, "runtime", runtime_of(config))
            self.config = dataclasses.replace(
                base, **{n: getattr(runtime, n) for n in RUNTIME_FIELDS}
            )
            stored_scorer = journal.get_meta("scorer")
            if stored_scorer != scorer_key:
                raise ValueError(
                    f"{self.directory} holds the experience of scorer "
                    f"{stored_scorer!r}, not {scorer_key!r}: scores of two scorers "
                    "are never mixed in one matrix; use a new folder for this scorer"
                )
        self._scorer_key = scorer_key
        self.failure_counts: Counter[str] = Counter()
        self._rebuild()

    def _rebuild(self) -> None:
        """Loads memories, then the snapshot, then replays the journal after it."""
        journal = self._journal
        assert journal is not None
        self.width = journal.get_meta("width")
        rows = journal.memory_rows()
        self._reset_memory_tables()
        embeddings = []
        for position, (row, mid, text, meta, blob, origin, _op, retired) in enumerate(
            rows
        ):
            where = f"{journal.path}: memory row {row}"
            if row != position:
                raise CorruptFolderError(f"{where}: rows are not contiguous")
            if not isinstance(text, str):
                raise CorruptFolderError(f"{where}: text is not a string")
            try:
                metadata = json.loads(meta)
            except ValueError as error:
                raise CorruptFolderError(f"{where}: metadata is not JSON") from error
            if self.width is None or len(blob) != 4 * self.width:
                raise CorruptFolderError(
                    f"{where}: embedding has {len(blob)} bytes, expected "
                    f"{4 * (self.width or 0)} (width {self.width})"
                )
            vector = np.frombuffer(blob, np.float32)
            if not np.all(np.isfinite(vector)):
                raise CorruptFolderError(f"{where}: embedding is not finite")
            if not 0 <= origin <= row:
                raise CorruptFolderError(
                    f"{where}: origin {origin} is not an earlier row"
                )
            embeddings.append(vector)
            self._ids.append(mid)
            self._texts.append(text)
            self._metadata.append(metadata)
            self._origin.append(int(origin))
            self._live.append(retired is None)
            if retired is None:
                self._row_of[mid] = row
        self._retired_ids = {mid for mid in self._ids if mid not in self._row_of}
        if embeddings:
            self._embeddings = np.stack(embeddings).astype(np.float32)
        # The experience: snapshot + replay.
        config = self.config
        self.solver_config = solver_config_of(
            config, config.initial_memories, config.initial_queries
        )
        self.state = self._initial_state(self.solver_config)
        adaptive = adaptive_for(self.config)
        self.ledger: Ledger | None = None if adaptive is None else adaptive[0].init()
        self._count = 0
        self._rows_applied = 0
        self._last_seq = 0
        after = 0
        problems = journal.integrity_problems()
        if problems:
            raise CorruptFolderError(
                f"{journal.path}: SQLite integrity check failed: {'; '.join(problems)}"
            )
        snapshot = journal.latest_snapshot() if self._use_snapshot else None
        if snapshot is not None:
            loaded = self._load_snapshot(snapshot)
            if loaded is None:
                # A snapshot of an older layout (the best preset's call ledger
                # before the learned order, the incremental statistics before
                # they were packed): the journal keeps every operation, so
                # replay them all instead; the next snapshot has the current
                # layout.
                snapshot = None
            else:
                after = loaded
        # Rows stay visible to queries only once their op is applied: the
        # replay below applies them in order.
        self._visible_rows = self._rows_applied
        self._replaying = True
        expected_query = self._count
        for seq, kind, payload, data in journal.ops_after(after):
            where = f"{journal.path}: operation {seq} ({kind})"
            if kind == "add":
                first, count = payload["first"], payload["count"]
                if first != self._rows_applied or first + count > len(self._ids):
                    raise CorruptFolderError(
                        f"{where}: adds rows {first}..{first + count - 1} but "
                        f"{self._rows_applied} rows were applied and "
                        f"{len(self._ids)} are stored"
                    )
                self._apply_add(first, count)
            elif kind == "retire":
                bad = [r for r in payload["rows"] if not 0 <= r < self._rows_applied]
                if bad:
                    raise CorruptFolderError(f"{where}: retires unknown rows {bad}")
                self._apply_retire(payload["rows"])
            elif kind == "query":
                if payload.get("index") != expected_query:
                    raise CorruptFolderError(
                        f"{where}: query index {payload.get('index')}, expected "
                        f"{expected_query}"
                    )
                query, observation = self._decode_query(data, where)
                self._apply_query(query, observation)
                expected_query += 1
            else:
                raise CorruptFolderError(f"{where}: unknown operation kind")
            self._last_seq = seq
        self._replaying = False
        if self._rows_applied != len(self._ids):
            raise CorruptFolderError(
                f"{journal.path}: {len(self._ids)} memory rows stored but only "
                f"{self._rows_applied} added by the operations"
            )
        self._snapshot_seq = after
        self._queries_since_snapshot = self._count - (
            snapshot[1] if snapshot is not None else 0
        )
        if (
            self._queries_since_snapshot >= self.config.snapshot_every
            and self._use_snapshot
        ):
            self.snapshot()

    def _experience(self, state: SolverState | None = None, ledger: Any = None):
        """What a snapshot holds: the solver state, and the ``best`` preset's
        call ledger beside it."""
        state = self.state if state is None else state
        ledger = self.ledger if ledger is None else ledger
        return state if ledger is None else (state, ledger)

    def _initial_state(self, solver_config: SolverConfig) -> SolverState:
        solver = online_solver(solver_config, build_policy(self.config))
        return solver.init(
            self._key("init"),
            jnp.full((solver_config.num_memories,), NOT_INSERTED, jnp.int32),
        )

    def _load_snapshot(self, snapshot) -> int | None:
        """Loads ``snapshot``; returns its operation seq, or ``None`` when its
        leaves are named otherwise than the current experience's (an older
        layout of the solver state or ledger: a leaf renamed, added or
        removed), so the caller replays the journal instead."""
        seq, num_queries, stored_config, leaves, names = snapshot
        where = f"{self._journal.path}: snapshot at operation {seq}"
        try:
            solver_config = SolverConfig(**stored_config)
        except TypeError as error:
            raise CorruptFolderError(f"{where}: bad solver config ({error})") from error
        template = jax.eval_shape(
            lambda: self._experience(self._initial_state(solver_config), self.ledger)
        )
        named, treedef = jax.tree_util.tree_flatten_with_path(template)
        expected = [jax.tree_util.keystr(path) for path, _ in named]
        if names is not None and list(names) != expected:
            return None
        for name, (_, want), got in zip(expected, named, leaves, strict=True):
            if tuple(want.shape) != got.shape or np.dtype(want.dtype) != got.dtype:
                raise CorruptFolderError(
                    f"{where}: leaf {name} is {got.dtype}{list(got.shape)}, the "
                    f"solver expects {np.dtype(want.dtype)}{list(want.shape)}"
                )
        experience = jax.tree.unflatten(treedef, [jnp.asarray(leaf) for leaf in leaves])
        state = experience if self.ledger is None else experience[0]
        if self.ledger is not None:
            self.ledger = experience[1]
        if int(state.count) != num_queries:
            raise CorruptFolderError(f"{where}: count disagrees with num_queries")
        rows = self._rows_in_snapshot(seq)
        if rows > len(self._ids):
            raise CorruptFolderError(
                f"{where}: covers {rows} memory rows, {len(self._ids)} are stored"
            )
        self.state, self.solver_config = state, solver_config
        self._count = num_queries
        self._rows_applied = rows
        self._last_seq = seq
        return seq

    def _rows_in_snapshot(self, seq: int) -> int:
        (count,) = self._journal._db.execute(
            "SELECT COUNT(*) FROM memories WHERE op <= ?", (seq,)
        ).fetchone()
        return int(count)

    # ------------------------------------------------------------- encoding

    def _encode_query(self, query: Query, observation: Observation) -> bytes:
        return b"".join(
            [
                np.asarray(query.candidates, np.int32).tobytes(),
                np.asarray(query.similarity, np.float32).tobytes(),
                np.asarray(query.valid, np.bool_).tobytes(),
                np.asarray(observation.values, np.float32).tobytes(),
                np.asarray(observation.mask, np.bool_).tobytes(),
            ]
        )

    def _decode_query(self, data: bytes | None, where: str):
        size = self.config.pool_size
        if data is None or len(data) != 14 * size:
            raise CorruptFolderError(
                f"{where}: pool record has {0 if data is None else len(data)} bytes, "
                f"expected {14 * size}"
            )
        parts, offset = [], 0
        for dtype, width in (
            (np.int32, 4),
            (np.float32, 4),
            (np.bool_, 1),
            (np.float32, 4),
            (np.bool_, 1),
        ):
            parts.append(np.frombuffer(data[offset : offset + width * size], dtype))
            offset += width * size
        candidates, similarity, valid, values, mask = parts
        if np.any(valid & ((candidates < 0) | (candidates >= self._rows_applied))):
            raise CorruptFolderError(f"{where}: a candidate row was not added yet")
        if np.any(mask & ~valid) or np.any(mask & ~((values >= 0) & (values <= 1))):
            raise CorruptFolderError(f"{where}: an observed score is invalid")
        return (
            Query(jnp.asarray(candidates), jnp.asarray(similarity), jnp.asarray(valid)),
            Observation(jnp.asarray(values), jnp.asarray(mask)),
        )

    # ------------------------------------------------------------- snapshots

    @serialized
    def snapshot(self) -> int:
        """Writes the solver state now (atomically); returns the bytes written."""
        self._check_open()
        named = jax.tree_util.tree_flatten_with_path(self._experience())[0]
        written = self._journal.write_snapshot(
            self._last_seq,
            self._count,
            self.solver_config._asdict(),
            [np.asarray(leaf) for _, leaf in named],
            [jax.tree_util.keystr(path) for path, _ in named],
        )
        self._queries_since_snapshot = 0
        self._snapshot_seq = self._last_seq
        return written
