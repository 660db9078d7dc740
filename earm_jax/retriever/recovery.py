"""Opening a folder: the stored settings checked against the caller's, the
memory rows loaded, the latest snapshot restored and the operations after it
replayed through the code that ran them; and writing snapshots (this part of
:class:`~earm_jax.retriever.online.OnlineRetriever` owns the snapshot
schedule: the last committed operation, the last snapshot's, the queries
since)."""

from __future__ import annotations

import dataclasses
import json
import logging

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.base import Observation, Query
from earm_jax.core.config import SolverConfig
from earm_jax.retriever.config import (
    NO_SCORER,
    RUNTIME_FIELDS,
    RetrieverConfig,
    runtime_of,
)
from earm_jax.retriever.experience import Experience
from earm_jax.retriever.memory_rows import MemoryRows
from earm_jax.retriever.paying import ScorerPath, failure_kind, other_scorer
from earm_jax.retriever.pool_order import check_free_order_encoder
from earm_jax.retriever.resident import trim_heap
from earm_jax.retriever.serial import serialized
from earm_jax.store.journal import (
    FORMAT,
    JOURNAL_NAME,
    MARKER_NAME,
    CorruptFolderError,
    Journal,
    write_marker,
)

_LOG = logging.getLogger("earm_jax.retriever")
BEST_ONLY_FIELDS = ("call_order", "stop_rule")
"""Experience fields that only the ``best`` preset reads."""

# Embedded at creation and at each open: the same model gives the same vector
# (up to float noise across machines); another model of the same width not.
PROBE_TEXT = "Embedder identity probe: a fixed sentence, never stored as a memory."
PROBE_AGREEMENT = 0.999
# What a new folder's query records hold nothing of: failure reasons beyond
# their kind, and (until a query is recorded with query_retention="keep")
# query texts.
_NOTHING_UNREDACTED = {"failures": True, "texts": True}


class Recovery:
    """The opening, replay and snapshot half of :class:`OnlineRetriever`."""

    _use_snapshot = True
    # check and repair open a folder without its embedder.
    _verify_embedder = True
    # check and repair read a folder as it is.
    _redact_on_open = True

    def _open(self, scorer, embedder, config) -> None:
        # Runtime options asked for over the stored ones (with a config, they
        # are in it already).
        overrides = self._runtime if config is None else {}
        # Until the folder's stored settings are known only the runtime fields
        # of this are read, held by a preset that reads no embeddings: an
        # option such as query_retention="none" is judged with the settings
        # the folder runs under.
        runtime = config or RetrieverConfig(preset="paper", **overrides)
        journal_file = self.directory / JOURNAL_NAME
        if config is None and not (
            journal_file.exists() and journal_file.stat().st_size > 0
        ):
            # A new folder takes the defaults: judged before any file is made.
            runtime = RetrieverConfig(**overrides)
        self.embedder = embedder
        self._journal = journal = Journal(
            self.directory,
            runtime.synchronous,
            guard=self._lock.verify,
            key_file=self._key_file,
            create_key=True,
        )
        scorer_key = (NO_SCORER if scorer is None else scorer.identity).key()
        stored_format = journal.get_meta("format")
        if stored_format is None:
            if journal.last_seq() > 0 or (self.directory / MARKER_NAME).exists():
                raise CorruptFolderError(
                    f"{journal.path}: holds no settings (its meta table is empty) "
                    "but the folder held a retriever: the journal was truncated "
                    "or replaced; restore it from a backup"
                )
            if config is None:  # a new folder takes the defaults
                runtime = RetrieverConfig(**overrides)
            self.config = runtime
            if self._verify_embedder:
                check_free_order_encoder(self.config.free_order, embedder)
            identity = self._embedder_identity(embedder)
            with journal.transaction() as db:
                journal.set_meta(db, "format", FORMAT)
                journal.set_meta(db, "digests", journal.digests.record())
                journal.set_meta(db, "config", runtime.experience())
                journal.set_meta(db, "runtime", runtime_of(runtime))
                journal.set_meta(db, "scorer", scorer_key)
                journal.set_meta(db, "embedder", identity)
                journal.set_meta(db, "width", identity and identity["width"])
                journal.set_meta(db, "redacted", _NOTHING_UNREDACTED)
            write_marker(self.directory)
        else:
            if stored_format != FORMAT:
                raise CorruptFolderError(
                    f"{journal.path}: format {stored_format!r}, expected {FORMAT!r}"
                )
            write_marker(self.directory)  # folders made before the marker
            stored = journal.get_meta("config")
            if isinstance(stored, dict) and "preset" not in stored:
                # Folders made before presets existed ran the paper's policy.
                stored = {**stored, "preset": "paper"}
            if isinstance(stored, dict) and "call_order" not in stored:
                # Folders made before the option paid by similarity.
                stored = {**stored, "call_order": "similarity"}
            if isinstance(stored, dict) and "stop_rule" not in stored:
                # Folders made before the option settled queries.
                stored = {**stored, "stop_rule": "settle_or_spill"}
            if isinstance(stored, dict) and "free_order" not in stored:
                # Folders made before the option went down the similarity order.
                stored = {**stored, "free_order": None}
            try:
                base = RetrieverConfig(**stored)
            except (TypeError, ValueError) as error:
                raise CorruptFolderError(
                    f"{journal.path}: stored config is invalid ({error})"
                ) from error
            if config is not None:
                theirs = config.experience()
                # Only best reads its call order and stop rule: a folder of
                # another preset opens with any (older folders stored others).
                unread = () if stored.get("preset") == "best" else BEST_ONLY_FIELDS
                differ = sorted(
                    k for k in theirs if theirs[k] != stored.get(k) and k not in unread
                )
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
                stored_runtime = {
                    k: v for k, v in stored_runtime.items() if k in RUNTIME_FIELDS
                }
                runtime = dataclasses.replace(runtime, **(stored_runtime | overrides))
            self.config = dataclasses.replace(
                base, **{n: getattr(runtime, n) for n in RUNTIME_FIELDS}
            )
            if config is not None or overrides:
                with journal.transaction() as db:
                    journal.set_meta(db, "runtime", runtime_of(self.config))
            stored_scorer = journal.get_meta("scorer")
            if scorer is None and stored_scorer != scorer_key:
                raise ValueError(
                    f"{self.directory} was created with scorer {stored_scorer!r}: "
                    "it cannot be opened without one (similarity mode keeps a "
                    "folder of its own); pass that scorer, or use a new folder"
                )
            if stored_scorer == NO_SCORER.key() != scorer_key:
                raise ValueError(
                    f"{self.directory} was created in similarity mode (no "
                    "scorer): open it without a scorer, or use a new folder for "
                    "this scorer"
                )
            if stored_scorer != scorer_key:
                raise other_scorer(self.directory, stored_scorer, scorer, scorer_key)
            self._check_embedder(embedder)
            if self._verify_embedder:
                check_free_order_encoder(self.config.free_order, embedder)
        self.payer = ScorerPath(scorer, scorer_key, journal, self.config.scorer_timeout)
        if self.config.query_retention == "none":
            journal.keep_scores_in_memory()
        self._redact_records()
        self.snapshot_failures = 0
        self.last_snapshot_error: str | None = None
        self._rebuild()
        # A folder made before the mark existed gets one now.
        journal.advance_high_water()

    def _redact_records(self) -> None:
        """Takes out of the query records what the settings say not to keep:
        a scorer's own failure reasons (folders written before only their
        kind was stored) and, unless ``query_retention="keep"``, the query
        texts. Done once; meta ``redacted`` says what is done."""
        journal = self._journal
        self._redacted = dict(journal.get_meta("redacted") or {})
        drop_texts = self.config.query_retention != "keep"
        todo = {
            "failures": not self._redacted.get("failures"),
            "texts": drop_texts and not self._redacted.get("texts"),
        }
        if not self._redact_on_open or not any(todo.values()):
            return

        def redact(payload: dict) -> dict:
            if todo["texts"]:
                payload.pop("text", None)
            if todo["failures"]:
                payload["failures"] = [
                    [row, failure_kind(str(reason))]
                    for row, reason in payload.get("failures", [])
                ]
            return payload

        done = {**self._redacted, "failures": True}
        if drop_texts:
            done["texts"] = True
        with journal.transaction() as db:
            journal.rewrite_query_payloads(db, redact)
            journal.set_meta(db, "redacted", done)
        self._redacted = done
        journal.flush_freed()

    def _embedder_identity(self, embedder) -> dict | None:
        """What identifies the embedding model: its ``identity`` (when it
        names one), its width, and its vector of a fixed probe text (which
        tells two models of the same width apart)."""
        if not self._verify_embedder:
            return None
        vectors = np.asarray(embedder.embed([PROBE_TEXT]), np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != 1 or vectors.shape[1] < 1:
            raise ValueError(
                f"the embedder returned shape {vectors.shape} for one text; "
                "expected (1, width)"
            )
        if not np.all(np.isfinite(vectors)):
            raise ValueError("the embedder returned a non-finite vector")
        name = getattr(embedder, "identity", None)
        return {
            "name": name if isinstance(name, str) else None,
            "width": int(vectors.shape[1]),
            "probe": [float(x) for x in vectors[0]],
        }

    def _check_embedder(self, embedder) -> None:
        """Refuses an embedder other than the folder's (recorded at creation;
        folders made before that record it now, if its width fits)."""
        current = self._embedder_identity(embedder)
        if current is None:
            return
        journal = self._journal
        stored = journal.get_meta("embedder")
        width = journal.get_meta("width")
        if stored is None:
            stored = {"name": None, "width": width, "probe": None}
        where = f"{self.directory} holds memories embedded"
        if stored["width"] is not None and stored["width"] != current["width"]:
            raise ValueError(
                f"{where} with width {stored['width']}; this embedder gives width "
                f"{current['width']}: use the folder's embedding model, or a new "
                "folder"
            )
        if stored["name"] and current["name"] and stored["name"] != current["name"]:
            raise ValueError(
                f"{where} by {stored['name']!r}, not {current['name']!r}: "
                "similarities of two models are never mixed; use a new folder"
            )
        if stored["probe"] is not None:
            recorded = np.asarray(stored["probe"], np.float32)
            cosine = float(
                recorded
                @ np.asarray(current["probe"], np.float32)
                / max(
                    np.linalg.norm(recorded) * np.linalg.norm(current["probe"]), 1e-12
                )
            )
            if cosine < PROBE_AGREEMENT:
                raise ValueError(
                    f"{where} by another model: this embedder's vector of the "
                    f"probe text differs from the recorded one (cosine "
                    f"{cosine:.4f} < {PROBE_AGREEMENT}); use the folder's "
                    "embedding model, or a new folder"
                )
        elif width is None or width == current["width"]:
            with journal.transaction() as db:
                journal.set_meta(db, "embedder", current)
                journal.set_meta(db, "width", current["width"])

    def _rebuild(self) -> None:
        """Loads memories, then the snapshot, then replays the journal after it."""
        journal = self._journal
        assert journal is not None
        self.rows = table = MemoryRows(journal.get_meta("width"))
        problems = journal.integrity_problems()
        if problems:
            raise CorruptFolderError(
                f"{journal.path}: SQLite integrity check failed: {'; '.join(problems)}"
            )
        rows = journal.memory_rows()
        retired_by_ops = journal.retired_rows()
        # A deleted row put back (from a backup, say) must not be served, nor
        # a row whose retire operation was taken out.
        deletions = journal.deletion_problems()
        if deletions:
            raise CorruptFolderError(deletions[0])
        missing = journal.missing_op()
        if missing is not None:
            raise CorruptFolderError(missing)
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
            if table.width is None or len(blob) != 4 * table.width:
                raise CorruptFolderError(
                    f"{where}: embedding has {len(blob)} bytes, expected "
                    f"{4 * (table.width or 0)} (width {table.width})"
                )
            vector = np.frombuffer(blob, np.float32)
            if not np.all(np.isfinite(vector)):
                raise CorruptFolderError(f"{where}: embedding is not finite")
            if not 0 <= origin <= row:
                raise CorruptFolderError(
                    f"{where}: origin {origin} is not an earlier row"
                )
            if retired != retired_by_ops.get(row):
                raise CorruptFolderError(
                    f"{where}: retired by operation {retired}, but the operations "
                    f"retire it at {retired_by_ops.get(row)}"
                )
            embeddings.append(vector)
            table.load(row, mid, text, metadata, origin, retired is None)
        table.finish_loading(embeddings)
        # The experience: snapshot + replay.
        self.experience = experience = Experience(self.config, self._policy_width())
        self._last_seq = 0
        after = 0
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
        experience.visible_rows = experience.rows_applied
        experience.replaying = True
        expected_query = experience.count
        for seq, kind, payload, data in journal.ops_after(after):
            where = f"{journal.path}: operation {seq} ({kind})"
            if kind == "add":
                first, count = payload["first"], payload["count"]
                applied = experience.rows_applied
                if first != applied or first + count > len(table):
                    raise CorruptFolderError(
                        f"{where}: adds rows {first}..{first + count - 1} but "
                        f"{applied} rows were applied and {len(table)} are stored"
                    )
                experience.apply_add(first, count)
            elif kind == "retire":
                applied = experience.rows_applied
                bad = [r for r in payload["rows"] if not 0 <= r < applied]
                if bad:
                    raise CorruptFolderError(f"{where}: retires unknown rows {bad}")
                experience.apply_retire(payload["rows"])
            elif kind == "metadata":
                # The rows hold the current metadata; the solver never reads it.
                if not 0 <= payload.get("row", -1) < experience.rows_applied:
                    raise CorruptFolderError(f"{where}: relabels an unknown row")
            elif kind == "query":
                if payload.get("index") != expected_query:
                    raise CorruptFolderError(
                        f"{where}: query index {payload.get('index')}, expected "
                        f"{expected_query}"
                    )
                query, observation, vector = self._decode_query(data, where)
                self._apply_query(query, observation, vector)
                expected_query += 1
            else:
                raise CorruptFolderError(f"{where}: unknown operation kind")
            self._last_seq = seq
        experience.replaying = False
        if experience.rows_applied != len(table):
            raise CorruptFolderError(
                f"{journal.path}: {len(table)} memory rows stored but only "
                f"{experience.rows_applied} added by the operations"
            )
        self._snapshot_seq = after
        self._queries_since_snapshot = experience.count - (
            snapshot[1] if snapshot is not None else 0
        )
        if (
            self._queries_since_snapshot >= self.config.snapshot_every
            and self._use_snapshot
        ):
            self._snapshot_quietly()

    def _load_snapshot(self, snapshot) -> int | None:
        """Loads ``snapshot``; returns its operation seq, or ``None`` when its
        leaves are named otherwise than the current experience's (an older
        layout of the solver state or ledger: a leaf renamed, added or
        removed), so the caller replays the journal instead."""
        seq, num_queries, stored_config, leaves, names = snapshot
        where = f"{self._journal.path}: snapshot at operation {seq}"
        # Folders written while the similarity covariate was a field of the
        # solver's config store it (False: a retriever never set it); the
        # covariate left the solver for earm_jax.contrib.similarity_covariate.
        stored_config = dict(stored_config)
        if stored_config.pop("similarity_covariate", False):
            raise CorruptFolderError(
                f"{where}: stored with the similarity covariate, which the "
                "solver no longer has (earm_jax.contrib.similarity_covariate)"
            )
        try:
            solver_config = SolverConfig(**stored_config)
        except TypeError as error:
            raise CorruptFolderError(f"{where}: bad solver config ({error})") from error
        experience = self.experience
        template = jax.eval_shape(
            lambda: experience.tree(
                experience.initial_state(solver_config), experience.ledger
            )
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
        tree = jax.tree.unflatten(treedef, [jnp.asarray(leaf) for leaf in leaves])
        state = tree if experience.ledger is None else tree[0]
        if int(state.count) != num_queries:
            raise CorruptFolderError(f"{where}: count disagrees with num_queries")
        rows = self._rows_in_snapshot(seq)
        if rows > len(self.rows):
            raise CorruptFolderError(
                f"{where}: covers {rows} memory rows, {len(self.rows)} are stored"
            )
        experience.restore(tree, solver_config, num_queries, rows)
        self._last_seq = seq
        return seq

    def _rows_in_snapshot(self, seq: int) -> int:
        (count,) = self._journal._db.execute(
            "SELECT COUNT(*) FROM memories WHERE op <= ?", (seq,)
        ).fetchone()
        return int(count)

    # ------------------------------------------------------------- encoding

    def _policy_width(self) -> int:
        """The embedding width the calls read (0 unless they follow the
        texts): the memories', or the embedder's while the folder holds none."""
        if not self.config.reads_embeddings:
            return 0
        if self.rows.stored_width:
            return self.rows.stored_width
        return int(self._embed_queries(["width"], "a width probe").shape[1])

    def _encode_query(
        self, query: Query, observation: Observation, vector=None
    ) -> bytes:
        parts = [
            np.asarray(query.candidates, np.int32).tobytes(),
            np.asarray(query.similarity, np.float32).tobytes(),
            np.asarray(query.valid, np.bool_).tobytes(),
            np.asarray(observation.values, np.float32).tobytes(),
            np.asarray(observation.mask, np.bool_).tobytes(),
        ]
        if self.config.reads_embeddings:
            if vector is None:  # a record the reopen could not rebuild from
                raise ValueError(
                    "a query of this preset is recorded with its embedding"
                )
            # The regression is rebuilt on reopen from every query's embedding.
            parts.append(np.asarray(vector, np.float32).tobytes())
        return b"".join(parts)

    def _decode_query(self, data: bytes | None, where: str):
        size = self.config.pool_size
        width = self.experience.policy_width
        if data is None or len(data) != 14 * size + 4 * width:
            raise CorruptFolderError(
                f"{where}: pool record has {0 if data is None else len(data)} bytes, "
                f"expected {14 * size + 4 * width}"
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
        applied = self.experience.rows_applied
        if np.any(valid & ((candidates < 0) | (candidates >= applied))):
            raise CorruptFolderError(f"{where}: a candidate row was not added yet")
        if np.any(mask & ~valid) or np.any(mask & ~((values >= 0) & (values <= 1))):
            raise CorruptFolderError(f"{where}: an observed score is invalid")
        vector = None
        if width:
            vector = np.frombuffer(data[offset:], np.float32)
            if not np.all(np.isfinite(vector)):
                raise CorruptFolderError(
                    f"{where}: the query's embedding is not finite"
                )
        return (
            Query(jnp.asarray(candidates), jnp.asarray(similarity), jnp.asarray(valid)),
            Observation(jnp.asarray(values), jnp.asarray(mask)),
            vector,
        )

    # ------------------------------------------------------------- snapshots

    def _committed(self, seq: int, query: bool = False) -> None:
        """Operation ``seq`` is committed (and applied); a query brings the
        next snapshot one nearer, and writes it when it is due."""
        self._last_seq = seq
        if query:
            self._queries_since_snapshot += 1
            if self._queries_since_snapshot >= self.config.snapshot_every:
                self._snapshot_quietly()

    def _snapshot_quietly(self) -> None:
        """A snapshot after a committed operation: it only speeds up the next
        open (the journal holds everything), so a failure (disk full, I/O
        error) is counted in :attr:`snapshot_failures`, logged, and retried
        at the next operation, never raised to a caller whose write is
        already stored."""
        try:
            self.snapshot()
        except Exception as error:  # noqa: BLE001 - counted, logged, retried
            self.snapshot_failures += 1
            self.last_snapshot_error = f"{type(error).__name__}: {error}"
            _LOG.warning(
                "%s: snapshot failed (%s); the journal holds every operation, "
                "the snapshot is retried after the next one",
                self.directory,
                self.last_snapshot_error,
            )

    @serialized
    def snapshot(self) -> int:
        """Writes the solver state now (atomically); returns the bytes written."""
        self._check_open()
        experience = self.experience
        named = jax.tree_util.tree_flatten_with_path(experience.tree())[0]
        written = self._journal.write_snapshot(
            self._last_seq,
            experience.count,
            experience.solver_config._asdict(),
            [np.asarray(leaf) for _, leaf in named],
            [jax.tree_util.keystr(path) for path, _ in named],
        )
        self._queries_since_snapshot = 0
        self._snapshot_seq = self._last_seq
        self._journal.sync_high_water()
        trim_heap()  # the snapshot's copies of the state are garbage now
        return written
