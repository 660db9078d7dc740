"""The online retriever for one agent: EARM over a growing memory, crash-safe.

Per query: embed it, take the top-``pool_size`` live memories by cosine
similarity (or take a pool someone else retrieved, :meth:`OnlineRetriever.rerank`),
let the solver pick the anchors, pay the scorer for the unpaid ones, fold the
answers in, and return the top ``k`` memories by mixed score in chronological
order.

Durability. Everything lives in one folder:

* ``journal.sqlite`` (SQLite, WAL): the source of truth. Every memory version,
  every operation (add / update / delete / query, each one transaction), every
  paid score, and a snapshot of the solver state every ``snapshot_every``
  queries (content-addressed chunks: unchanged parts are not rewritten).
* ``lock``: ``flock``-ed by the one process that writes; holds its pid.

On open the latest snapshot is loaded and the operations after it are replayed
through the same code path that ran them (the solver is deterministic given its
keys, and every query's pool and scores are in the journal), so the state is
bit for bit the one an uninterrupted run would hold. A write is acknowledged
when its call returns; by then its transaction is committed. Paid scores are
committed the moment the scorer answers, before anything else, so a crash never
makes a pair be paid twice (except one killed in the instant between the
scorer's answer and that commit).

Edits and deletions. A memory keeps its id for life, but each *version* of it
(its text) is a row of the experience matrix. ``update(id, text)`` retires the
old row and gives the new text a fresh row: scores paid for the old text stay
in the history (they were true of that text and still inform the query
factors) but are never again counted as evidence for the new text, which
starts with no observations. ``delete(ids)`` retires the rows: never a
candidate, never scored, never returned again; ids are never reused. The
chronological key of a memory is the position of its first version.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.base import NOT_INSERTED, Observation, Query
from earm_jax.core.config import SolverConfig, SolverState
from earm_jax.core.grow import grow_state
from earm_jax.core.online import online_solver, usable_candidates
from earm_jax.policies.adaptive import Ledger, adaptive_policy
from earm_jax.scoring.base import PairScore, Scorer
from earm_jax.settings import EarmSettings
from earm_jax.store.embeddings import TextEmbedder
from earm_jax.store.journal import FORMAT, CorruptFolderError, Journal
from earm_jax.store.lock import FolderLock, FolderLockedError

MemoryId = int | str


# Fields that define the experience (stored, must match on reopen) vs. runtime
# options a caller may change on every open.
_RUNTIME_FIELDS = (
    "top_k",
    "snapshot_every",
    "scorer_timeout",
    "lock_timeout",
    "synchronous",
    "precompile",
)


@dataclasses.dataclass(frozen=True)
class RetrieverConfig(EarmSettings):
    """Settings of an online retriever: the shared
    :class:`~earm_jax.settings.EarmSettings` (which EARM: rank, l2, solver,
    stratum, schedule) plus the retriever's own.

    Experience settings (stored in the journal; reopening with different ones
    raises): every :class:`~earm_jax.settings.EarmSettings` field, ``pool_size``,
    ``initial_memories``, ``initial_queries``, ``seed``.

    Runtime options (free to change on each open):
      top_k: default ``k``.
      snapshot_every: queries between solver-state snapshots (replay on open is
        at most this many queries).
      scorer_timeout: seconds one scorer request may take before its pairs
        count as failed (``None``: wait forever).
      lock_timeout: ``0`` fails at once when another process holds the folder,
        ``> 0`` waits that long, ``None`` waits forever.
      synchronous: SQLite durability, ``"FULL"`` (survives power loss) or
        ``"NORMAL"`` (survives a process crash).
      precompile: compile the next (doubled) buffer shapes in a background
        thread before they are needed, so growth does not stall one query.
    """

    # Constant cost per query however long the agent lives (see
    # earm_jax/core/solvers/incremental.py); "als" refits the whole history.
    solver: str = "incremental"
    pool_size: int = 200
    top_k: int = 10
    initial_memories: int = 1024
    initial_queries: int = 1024
    seed: int = 0
    snapshot_every: int = 100
    scorer_timeout: float | None = 120.0
    lock_timeout: float | None = 0.0
    synchronous: str = "FULL"
    precompile: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in (
            "pool_size",
            "top_k",
            "initial_memories",
            "initial_queries",
            "snapshot_every",
        ):
            value = getattr(self, name)
            if not _is_int(value) or value < 1:
                raise ValueError(
                    f"RetrieverConfig.{name} must be a positive int, got {value!r}"
                )
        if not _is_int(self.seed) or self.seed < 0:
            raise ValueError(
                f"RetrieverConfig.seed must be an int >= 0, got {self.seed!r}"
            )
        ratios = tuple(self.stage_ratios)
        if not ratios or not all(0 <= r <= 1 for r in ratios):
            raise ValueError(
                f"RetrieverConfig.stage_ratios must be fractions in [0, 1], got "
                f"{self.stage_ratios!r}"
            )
        object.__setattr__(self, "stage_ratios", tuple(float(r) for r in ratios))
        for name in ("scorer_timeout", "lock_timeout"):
            value = getattr(self, name)
            if value is not None and (
                not isinstance(value, int | float)
                or isinstance(value, bool)
                or not value >= 0
            ):
                raise ValueError(
                    f"RetrieverConfig.{name} must be None or a number >= 0, got "
                    f"{value!r}"
                )
        if self.synchronous not in ("FULL", "NORMAL"):
            raise ValueError(
                f"RetrieverConfig.synchronous must be 'FULL' or 'NORMAL', got "
                f"{self.synchronous!r}"
            )

    def experience(self) -> dict[str, Any]:
        """The stored settings (what a reopen must agree with)."""
        settings = dataclasses.asdict(self)
        for name in _RUNTIME_FIELDS:
            settings.pop(name)
        settings["stage_ratios"] = list(settings["stage_ratios"])
        return settings


def _runtime_of(config: RetrieverConfig) -> dict[str, Any]:
    return {name: getattr(config, name) for name in _RUNTIME_FIELDS}


def _is_int(value: Any) -> bool:
    return isinstance(value, int | np.integer) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class Memory:
    """One live memory: its id, text and metadata."""

    id: MemoryId
    text: str
    metadata: dict


@dataclasses.dataclass(frozen=True)
class Retrieved:
    """One query's answer.

    Attributes:
      memory_ids: the top-``k`` memory ids, in chronological order.
      texts: their texts.
      metadata: their metadata.
      scores: their mixed scores (direct score where anchored).
      anchored: whether each was scored directly at this query.
      calls: pairs sent to the scorer for this query (unpaid before).
      cache_hits: anchors answered from scores paid earlier.
      failures: ``(memory id, reason)`` for anchors the scorer failed on; they
        count as not observed, never as a made-up score.
      budget: the policy's direct-scoring budget for this query.
      query_index: this query's index in the retriever's life.
      ranked_ids: the same memories best first (ties: higher similarity first).
      rounds: scorer requests this query made (``preset="best"``: 0 to 4
        rounds of growing size, each one batched request; else 1).
    """

    memory_ids: list[MemoryId]
    texts: list[str]
    metadata: list[dict]
    scores: list[float]
    anchored: list[bool]
    calls: int
    cache_hits: int
    failures: list[tuple[MemoryId, str]]
    budget: int
    query_index: int
    ranked_ids: list[MemoryId]
    rounds: int = 1

    def by_score(self) -> list[MemoryId]:
        """The ids best first (instead of chronological)."""
        return list(self.ranked_ids)


# Jitted select/observe per (solver shapes, policy): shared by every retriever
# of the process (tenants, reopenings), so nothing compiles twice.
_FUNCTIONS: dict[tuple, tuple[Any, Any]] = {}
_FUNCTIONS_LOCK = threading.Lock()


def _functions_for(solver_config: SolverConfig, config: RetrieverConfig):
    key = (solver_config, _policy_key(config))
    with _FUNCTIONS_LOCK:
        if key not in _FUNCTIONS:
            solver = online_solver(solver_config, build_policy(config))
            _FUNCTIONS[key] = (jax.jit(solver.select), jax.jit(solver.observe))
        return _FUNCTIONS[key]


def _adaptive_for(config: RetrieverConfig):
    """The ``best`` preset's jitted round functions, or ``None`` (paper preset)."""
    adaptive_config = config.adaptive_config(config.pool_size)
    if adaptive_config is None:
        return None
    key = ("adaptive", adaptive_config)
    with _FUNCTIONS_LOCK:
        if key not in _FUNCTIONS:
            policy = adaptive_policy(adaptive_config)
            _FUNCTIONS[key] = (
                policy,
                jax.jit(policy.begin),
                jax.jit(policy.select_round),
                jax.jit(policy.observe_round),
                jax.jit(policy.finish),
            )
        return _FUNCTIONS[key]


def _policy_key(config: RetrieverConfig) -> tuple:
    return (config.pool_size, tuple(sorted(config.earm_fields().items())))


def build_policy(config: RetrieverConfig):
    """The retriever's anchor policy: through the shared settings object."""
    return config.policy(config.pool_size)


def _solver_config(config: RetrieverConfig, num_memories: int, capacity: int):
    return config.solver_config(num_memories, capacity, config.pool_size)


def _check_id(value: Any, where: str) -> MemoryId:
    if isinstance(value, bool) or not isinstance(value, int | str | np.integer):
        raise ValueError(f"{where} must be an int or a str, got {value!r}")
    if isinstance(value, str) and not value:
        raise ValueError(f"{where} must not be an empty string")
    return int(value) if isinstance(value, int | np.integer) else value


def _check_text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{where} must be a non-empty string, got {value!r}")
    return value


def _check_texts(texts: Any, name: str = "texts") -> list[str]:
    if isinstance(texts, str | bytes) or not isinstance(texts, Sequence):
        raise ValueError(
            f"{name} must be a list of strings, got {type(texts).__name__} "
            f"(wrap a single text in a list)"
        )
    return [_check_text(t, f"{name}[{i}]") for i, t in enumerate(texts)]


def _check_k(k: Any, default: int) -> int:
    if k is None:
        return default
    if not _is_int(k) or k < 1:
        raise ValueError(f"k must be an int >= 1, got {k!r}")
    return int(k)


def _metadata_json(value: Any, where: str) -> str:
    if value is None:
        value = {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a dict, got {type(value).__name__}")
    try:
        text = json.dumps(dict(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        raise ValueError(f"{where} must be JSON-serialisable: {error}") from None
    return text


class _Pending:
    """One scorer request running in a daemon thread (so a hang never blocks)."""

    def __init__(self, scorer: Scorer, requests: list) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        thread = threading.Thread(
            target=self._run, args=(scorer, requests), daemon=True
        )
        thread.start()

    def _run(self, scorer: Scorer, requests: list) -> None:
        try:
            self.result = scorer.score_many(requests)
        except BaseException as error:  # noqa: BLE001 - reported per pair
            self.error = error
        finally:
            self.done.set()


def _validated(answer: Any) -> PairScore:
    if not isinstance(answer, PairScore):
        return PairScore.failure(
            f"scorer returned {type(answer).__name__}, not a PairScore"
        )
    if not answer.ok:
        return PairScore.failure(answer.reason or "failed")
    value = answer.value
    if not isinstance(value, int | float | np.floating) or isinstance(value, bool):
        return PairScore.failure(f"score is not a number: {value!r}")
    if not math.isfinite(value):
        return PairScore.failure(f"score is not finite: {value!r}")
    if not 0.0 <= value <= 1.0:
        return PairScore.failure(f"score out of range [0, 1]: {value!r}")
    return PairScore.success(float(value))


def _serialized(method):
    """Runs ``method`` under the retriever's lock: threads of one process may
    share one retriever (one writer per folder, one call at a time)."""

    @functools.wraps(method)
    def locked(self, *args, **kwargs):
        with self._mutex:
            return method(self, *args, **kwargs)

    return locked


def _failure_kind(reason: str) -> str:
    return reason.split(":")[0].split(" after ")[0]


class OnlineRetriever:
    """EARM for one agent: add, edit, delete, query; the experience kept on disk.

    One process writes a folder at a time (a second gets
    :class:`~earm_jax.store.lock.FolderLockedError` naming the holder's pid).
    Use as a context manager, or call :meth:`close`.

    Args:
      directory: the retriever's folder (created if missing; reopened, with
        recovery, if it holds a retriever already).
      scorer: the relevance scorer; its ``identity`` is recorded, and reopening
        with another scorer identity raises (its scores would mix with the
        stored ones): use a new folder for a new scorer.
      embedder: text embedder; its width is recorded on the first add.
      config: settings; ``None`` takes the stored ones (or the defaults for a
        new folder). Experience settings must match the stored ones.

    Raises:
      FolderLockedError: another process holds the folder.
      CorruptFolderError: the folder fails its consistency check.
      ValueError: a different config or scorer than the folder's.
    """

    _use_snapshot = True

    def __init__(
        self,
        directory: str | os.PathLike[str],
        scorer: Scorer,
        embedder: TextEmbedder,
        config: RetrieverConfig | None = None,
    ) -> None:
        if config is not None and not isinstance(config, RetrieverConfig):
            raise ValueError(
                f"config must be a RetrieverConfig, got {type(config).__name__}"
            )
        for name, thing, needed in (
            ("scorer", scorer, ("identity", "score_many")),
            ("embedder", embedder, ("embed",)),
        ):
            missing = [n for n in needed if not hasattr(thing, n)]
            if missing:
                raise ValueError(f"{name} has no {', '.join(missing)}")
        self.directory = Path(directory)
        if self.directory.exists() and not self.directory.is_dir():
            raise ValueError(f"{self.directory} exists and is not a folder")
        self.directory.mkdir(parents=True, exist_ok=True)
        timeout = (config or RetrieverConfig()).lock_timeout
        self._lock = FolderLock(self.directory, timeout=timeout)
        self._journal: Journal | None = None
        self._warming: set[tuple[int, int]] = set()
        self._mutex = threading.RLock()
        self._warm_thread: threading.Thread | None = None
        try:
            self._open(scorer, embedder, config)
        except BaseException:
            self._release()
            raise

    # ----------------------------------------------------------------- opening

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
                Journal.set_meta(db, "runtime", _runtime_of(runtime))
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
                    **{k: v for k, v in stored_runtime.items() if k in _RUNTIME_FIELDS},
                )
            else:
                with journal.transaction() as db:
                    Journal.set_meta(db, "runtime", _runtime_of(config))
            self.config = dataclasses.replace(
                base, **{n: getattr(runtime, n) for n in _RUNTIME_FIELDS}
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

    def _reset_memory_tables(self) -> None:
        self._ids: list[MemoryId] = []
        self._texts: list[str] = []
        self._metadata: list[dict] = []
        self._origin: list[int] = []
        self._live: list[bool] = []
        self._row_of: dict[MemoryId, int] = {}
        self._retired_ids: set[MemoryId] = set()
        self._embeddings = np.zeros((0, 0), np.float32)

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
        self.solver_config = _solver_config(
            config, config.initial_memories, config.initial_queries
        )
        self.state = self._initial_state(self.solver_config)
        adaptive = _adaptive_for(self.config)
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

    # ------------------------------------------------------------------ state

    def _key(self, purpose: str, index: int = 0) -> jax.Array:
        base = jax.random.key(self.config.seed)
        tag = {"init": 0, "select": 1, "grow": 2}[purpose]
        return jax.random.fold_in(jax.random.fold_in(base, tag), index)

    def _functions(self):
        return _functions_for(self.solver_config, self.config)

    def _ensure_room(self, num_memories: int, num_queries: int) -> None:
        memories, capacity = (
            self.solver_config.num_memories,
            self.solver_config.capacity,
        )
        while memories < num_memories:
            memories *= 2
        while capacity < num_queries:
            capacity *= 2
        if (memories, capacity) != (
            self.solver_config.num_memories,
            self.solver_config.capacity,
        ):
            self.state, self.solver_config = grow_state(
                self.state,
                self.solver_config,
                self._key("grow", memories + capacity),
                num_memories=memories,
                capacity=capacity,
            )

    def _set_insert_time(self, rows: Sequence[int], value: int) -> None:
        insert_time = np.array(self.state.insert_time)
        insert_time[np.asarray(rows, np.int64)] = value
        self.state = self.state._replace(insert_time=jnp.asarray(insert_time))

    def _apply_add(self, first: int, count: int) -> None:
        self._ensure_room(first + count, 0)
        self._set_insert_time(range(first, first + count), self._count)
        self._rows_applied = first + count
        self._visible_rows = self._rows_applied

    def _apply_retire(self, rows: Sequence[int]) -> None:
        self._set_insert_time(rows, NOT_INSERTED)

    def _apply_query(self, query: Query, observation: Observation):
        self._ensure_room(self._rows_applied, self._count + 1)
        if self.ledger is not None:
            # Replay the rounds with the recorded answers: the same requests,
            # hence the same ledger, as when the query ran.
            values = np.asarray(observation.values)
            ok = np.asarray(observation.mask)
            self.ledger, _, _ = self._rounds(
                query, lambda positions: (values[positions], ok[positions])
            )
        _, observe = self._functions()
        state, info = observe(self.state, query, observation)
        self.state = state
        self._count += 1
        return info

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

    @_serialized
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

    # -------------------------------------------------------------- growth

    def _warm_ahead(self) -> None:
        """Compiles the next buffer shapes in the background (no stall later).

        Queries grow the history by one row each, so warming starts at half of
        the query capacity; memories arrive in batches, so at three quarters.
        One warming thread at a time (tracing holds the GIL: it slows queries
        a little while it runs instead of stalling one query for seconds).
        """
        if not self.config.precompile or self._replaying:
            return
        if self._warm_thread is not None and self._warm_thread.is_alive():
            return
        memories, capacity = (
            self.solver_config.num_memories,
            self.solver_config.capacity,
        )
        target = None
        if (self._count + 1) * 2 > capacity:
            target = (memories, capacity * 2)
        elif self._rows_applied * 4 > memories * 3:
            target = (memories * 2, capacity)
        if target is None or target in self._warming:
            return
        self._warming.add(target)
        # Not a daemon: exiting while XLA compiles aborts the process, so the
        # interpreter waits for a running compile to finish before it exits.
        self._warm_thread = threading.Thread(
            target=self._warm,
            args=(self.state, self.solver_config, target),
            daemon=False,
        )
        self._warm_thread.start()

    @_serialized
    def warm_up(self) -> None:
        """Compiles the solver for the current buffer shapes now (else the first
        query does)."""
        self._check_open()
        self._run_dummy(self.state, self.solver_config)

    def _run_dummy(self, state, solver_config) -> None:
        select, observe = _functions_for(solver_config, self.config)
        size = self.config.pool_size
        query = Query(
            jnp.zeros(size, jnp.int32),
            jnp.zeros(size, jnp.float32),
            jnp.zeros(size, bool),
        )
        select(self._key("select", 0), state, query)
        nothing = Observation(jnp.zeros(size), jnp.zeros(size, bool))
        observe(state, query, nothing)
        adaptive = _adaptive_for(self.config)
        if adaptive is not None:  # the best preset's round functions too
            policy, begin, select_round, observe_round, finish = adaptive
            ledger = policy.init()
            progress = begin(ledger, query, query.valid, jnp.zeros(size))
            select_round(ledger, progress)
            progress = observe_round(ledger, progress, nothing, query.valid)
            finish(ledger, progress)

    def _warm(self, state, solver_config, target) -> None:
        try:
            grown, grown_config = grow_state(
                state,
                solver_config,
                self._key("grow", sum(target)),
                num_memories=target[0],
                capacity=target[1],
            )
            self._run_dummy(grown, grown_config)
        except Exception:  # noqa: BLE001 - warming is only an optimisation
            pass

    # ---------------------------------------------------------------- helpers

    def _check_open(self) -> None:
        if self._journal is None:
            raise ValueError(f"the retriever of {self.directory} is closed")

    @property
    def num_memories(self) -> int:
        """Live memories (added, not deleted)."""
        return len(self._row_of)

    @property
    def num_queries(self) -> int:
        """Queries answered so far (the next query's index)."""
        return self._count

    def _embed(self, texts: list[str], what: str) -> np.ndarray:
        vectors = self.embedder.embed(texts)
        try:
            vectors = np.asarray(vectors, np.float32)
        except (TypeError, ValueError) as error:
            raise ValueError(
                f"the embedder returned no array for {what}: {error}"
            ) from None
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(
                f"the embedder returned shape {vectors.shape} for {len(texts)} "
                f"{what}; expected ({len(texts)}, width)"
            )
        width = self.width
        if width is not None and vectors.shape[1] != width:
            raise ValueError(
                f"the embedder returned width {vectors.shape[1]}, this retriever's "
                f"memories have width {width} (another embedding model?)"
            )
        if vectors.shape[1] < 1:
            raise ValueError("the embedder returned zero-width vectors")
        if not np.all(np.isfinite(vectors)):
            bad = int(np.flatnonzero(~np.all(np.isfinite(vectors), axis=1))[0])
            raise ValueError(
                f"the embedder returned a non-finite vector ({what}[{bad}])"
            )
        norms = np.linalg.norm(vectors, axis=1)
        if np.any(np.abs(norms - 1.0) > 1e-3):
            bad = int(np.flatnonzero(np.abs(norms - 1.0) > 1e-3)[0])
            raise ValueError(
                f"the embedder returned a vector of norm {norms[bad]:.4g} "
                f"({what}[{bad}]); the retriever needs unit-norm embeddings"
            )
        return vectors

    def _append_rows(self, db, ids, texts, metas, vectors, origins, seq) -> None:
        first = len(self._ids)
        db.executemany(
            "INSERT INTO memories VALUES (?, ?, ?, ?, ?, ?, ?, NULL)",
            [
                (first + i, mid, text, meta, vector.tobytes(), origin, seq)
                for i, (mid, text, meta, vector, origin) in enumerate(
                    zip(ids, texts, metas, vectors, origins, strict=True)
                )
            ],
        )

    def _remember_rows(self, ids, texts, metas, vectors, origins) -> None:
        for mid, text, meta, origin in zip(ids, texts, metas, origins, strict=True):
            self._row_of[mid] = len(self._ids)
            self._ids.append(mid)
            self._texts.append(text)
            self._metadata.append(json.loads(meta))
            self._origin.append(origin)
            self._live.append(True)
        self._embeddings = (
            vectors.copy()
            if self._embeddings.size == 0
            else np.concatenate([self._embeddings, vectors])
        )

    # -------------------------------------------------------------------- API

    @_serialized
    def add(
        self,
        texts: Sequence[str],
        metadata: Sequence[Mapping | None] | None = None,
        ids: Sequence[MemoryId] | None = None,
    ) -> list[MemoryId]:
        """Adds memories; they are candidates from the next query on.

        Args:
          texts: the memories' texts (a list; a bare ``str`` is refused).
          metadata: one JSON-serialisable dict per text (or ``None``).
          ids: caller-chosen ``int`` or ``str`` ids, unique and never used
            before in this folder; ``None`` assigns integers.

        Returns:
          The ids, in order. Nothing is stored unless every input is valid.
        """
        self._check_open()
        texts = _check_texts(texts)
        if metadata is not None:
            if isinstance(metadata, Mapping | str) or not isinstance(
                metadata, Sequence
            ):
                raise ValueError("metadata must be a list with one dict per text")
            if len(metadata) != len(texts):
                raise ValueError(
                    f"metadata has {len(metadata)} entries for {len(texts)} texts"
                )
        metas = [
            _metadata_json(None if metadata is None else metadata[i], f"metadata[{i}]")
            for i in range(len(texts))
        ]
        if ids is not None:
            if isinstance(ids, str) or not isinstance(ids, Sequence):
                raise ValueError("ids must be a list with one id per text")
            if len(ids) != len(texts):
                raise ValueError(f"ids has {len(ids)} entries for {len(texts)} texts")
            ids = [_check_id(mid, f"ids[{i}]") for i, mid in enumerate(ids)]
            if len(set(ids)) != len(ids):
                dup = next(m for m in ids if ids.count(m) > 1)
                raise ValueError(f"ids holds {dup!r} twice")
            for mid in ids:
                if mid in self._row_of:
                    raise ValueError(f"id {mid!r} exists already (use update)")
                if mid in self._retired_ids:
                    raise ValueError(f"id {mid!r} was deleted; ids are never reused")
        if not texts:
            return []
        vectors = self._embed(texts, "texts")
        if ids is None:
            start = max(self._journal.max_int_id() + 1, 0)
            ids = list(range(start, start + len(texts)))
        first = len(self._ids)
        origins = list(range(first, first + len(texts)))
        with self._journal.transaction() as db:
            if self.width is None:
                Journal.set_meta(db, "width", int(vectors.shape[1]))
            seq = Journal.append_op(db, "add", {"first": first, "count": len(texts)})
            self._append_rows(db, ids, texts, metas, vectors, origins, seq)
        self.width = int(vectors.shape[1])
        self._remember_rows(ids, texts, metas, vectors, origins)
        self._apply_add(first, len(texts))
        self._last_seq = seq
        self._warm_ahead()
        return list(ids)

    @_serialized
    def update(self, id: MemoryId, text: str, metadata: Mapping | None = None) -> None:
        """Replaces a memory's text (and metadata, if given); keeps its id.

        The new text gets a fresh row with no observations: scores paid for
        the old text are never counted as evidence for the new one.
        """
        self._check_open()
        mid = _check_id(id, "id")
        text = _check_text(text, "text")
        if mid not in self._row_of:
            raise KeyError(f"no live memory with id {mid!r}")
        old = self._row_of[mid]
        meta = (
            json.dumps(self._metadata[old], sort_keys=True)
            if metadata is None
            else _metadata_json(metadata, "metadata")
        )
        vectors = self._embed([text], "text")
        new = len(self._ids)
        with self._journal.transaction() as db:
            seq = Journal.append_op(db, "retire", {"rows": [old], "reason": "update"})
            db.execute("UPDATE memories SET retired_op=? WHERE row=?", (seq, old))
            seq = Journal.append_op(db, "add", {"first": new, "count": 1})
            self._append_rows(
                db, [mid], [text], [meta], vectors, [self._origin[old]], seq
            )
        self._live[old] = False
        del self._row_of[mid]
        self._apply_retire([old])
        self._remember_rows([mid], [text], [meta], vectors, [self._origin[old]])
        self._apply_add(new, 1)
        self._last_seq = seq

    @_serialized
    def delete(self, ids: Sequence[MemoryId]) -> None:
        """Deletes memories: never a candidate, scored or returned again."""
        self._check_open()
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValueError("ids must be a list of ids")
        ids = [_check_id(mid, f"ids[{i}]") for i, mid in enumerate(ids)]
        unknown = [mid for mid in ids if mid not in self._row_of]
        if unknown:
            raise KeyError(f"no live memory with id(s) {unknown!r}")
        if not ids:
            return
        rows = sorted({self._row_of[mid] for mid in ids})
        with self._journal.transaction() as db:
            seq = Journal.append_op(db, "retire", {"rows": rows, "reason": "delete"})
            db.executemany(
                "UPDATE memories SET retired_op=? WHERE row=?", [(seq, r) for r in rows]
            )
        for row in rows:
            self._live[row] = False
            del self._row_of[self._ids[row]]
            self._retired_ids.add(self._ids[row])
        self._apply_retire(rows)
        self._last_seq = seq

    @_serialized
    def get(self, ids: Sequence[MemoryId]) -> list[Memory]:
        """The live memories ``ids`` (``KeyError`` naming any unknown or deleted)."""
        self._check_open()
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise ValueError("ids must be a list of ids")
        ids = [_check_id(mid, f"ids[{i}]") for i, mid in enumerate(ids)]
        unknown = [mid for mid in ids if mid not in self._row_of]
        if unknown:
            raise KeyError(f"no live memory with id(s) {unknown!r}")
        return [
            Memory(mid, self._texts[r], dict(self._metadata[r]))
            for mid in ids
            for r in [self._row_of[mid]]
        ]

    @_serialized
    def memories(self) -> list[Memory]:
        """Every live memory, in chronological order."""
        rows = sorted(self._row_of.values(), key=lambda r: (self._origin[r], r))
        return [
            Memory(self._ids[r], self._texts[r], dict(self._metadata[r])) for r in rows
        ]

    # ---------------------------------------------------------------- querying

    def _eligible(self, where: Mapping | None) -> np.ndarray:
        live = np.asarray(self._live[: self._visible_rows], bool)
        if where:
            match = np.array(
                [
                    all(meta.get(k) == v for k, v in where.items())
                    for meta in self._metadata[: self._visible_rows]
                ],
                bool,
            )
            live &= match
        return live

    def _pool_from_vector(self, vector: np.ndarray, where: Mapping | None) -> Query:
        size = self.config.pool_size
        count = self._visible_rows
        similarity = self._embeddings[:count] @ vector
        eligible = self._eligible(where)
        similarity = np.where(eligible, similarity, -np.inf).astype(np.float32)
        take = int(min(size, eligible.sum()))
        order = np.lexsort((np.arange(count), -similarity))[:take]
        return self._pool(order, similarity[order])

    def _pool(self, rows: np.ndarray, similarity: np.ndarray) -> Query:
        size = self.config.pool_size
        take = len(rows)
        candidates = np.zeros(size, np.int32)
        sims = np.zeros(size, np.float32)
        valid = np.zeros(size, bool)
        candidates[:take], sims[:take], valid[:take] = rows, similarity, True
        return Query(jnp.asarray(candidates), jnp.asarray(sims), jnp.asarray(valid))

    def _score(self, requests: list[tuple[str, list[str]]]) -> list[list[PairScore]]:
        """The scorer's answers, each validated; every fault becomes a failure."""
        if not requests:
            return []
        pending = _Pending(self.scorer, requests)
        timeout = self.config.scorer_timeout
        if not pending.done.wait(timeout):
            reason = f"timeout after {timeout:g} s"
            return [[PairScore.failure(reason)] * len(m) for _, m in requests]
        if pending.error is not None:
            error = pending.error
            reason = f"scorer raised {type(error).__name__}: {error}"
            return [[PairScore.failure(reason)] * len(m) for _, m in requests]
        answers = pending.result
        if not isinstance(answers, Sequence) or len(answers) != len(requests):
            got = (
                len(answers)
                if isinstance(answers, Sequence)
                else type(answers).__name__
            )
            reason = f"wrong length: {got} answers for {len(requests)} requests"
            return [[PairScore.failure(reason)] * len(m) for _, m in requests]
        out = []
        for (_, memories), row in zip(requests, answers, strict=True):
            if not isinstance(row, Sequence) or len(row) != len(memories):
                got = len(row) if isinstance(row, Sequence) else type(row).__name__
                reason = f"wrong length: {got} scores for {len(memories)} pairs"
                out.append([PairScore.failure(reason)] * len(memories))
            else:
                out.append([_validated(answer) for answer in row])
        return out

    def _prepare(self, text: str, query: Query, index: int, state: SolverState):
        """Anchors of a query (rows, pool positions) and its cached scores."""
        select, _ = self._functions()
        anchors = np.asarray(select(self._key("select", index), state, query))
        positions = np.flatnonzero(anchors)
        rows = np.asarray(query.candidates)[positions]
        cached = self._journal.get_scores(
            self._scorer_key, text, [self._texts[r] for r in rows]
        )
        return positions, rows, cached

    def _finish(
        self, text, query, positions, rows, answers, k, calls, hits, adaptive=None
    ):
        """Records the query, updates the state, and builds the answer."""
        size = self.config.pool_size
        values = np.zeros(size, np.float32)
        mask = np.zeros(size, bool)
        failures = []
        for position, row, answer in zip(positions, rows, answers, strict=True):
            if answer.ok:
                values[position], mask[position] = answer.value, True
            else:
                failures.append((self._ids[row], answer.reason))
                self.failure_counts[_failure_kind(answer.reason)] += 1
        observation = Observation(jnp.asarray(values), jnp.asarray(mask))
        index = self._count
        self._ensure_room(self._rows_applied, index + 1)
        _, observe = self._functions()
        state, info = observe(self.state, query, observation)
        # The best preset ranks by its own merge of direct answers and
        # similarity (policies/adaptive.py); the paper's by the mixed scores.
        scores = np.asarray(info.scores if adaptive is None else adaptive[1].scores)
        budget = int(info.budget if adaptive is None else adaptive[1].limit)
        valid = np.asarray(query.valid)
        candidates = np.asarray(query.candidates)
        positions_ranked = [
            p for p in np.lexsort((np.arange(size), -scores)) if valid[p]
        ][:k]
        chosen = sorted(
            positions_ranked, key=lambda p: (self._origin[candidates[p]], p)
        )
        payload = {
            "index": index,
            "text": text,
            "k": k,
            "calls": calls,
            "cache_hits": hits,
            "budget": budget,
            "failures": [
                [int(rows[i]), a.reason] for i, a in enumerate(answers) if not a.ok
            ],
            "answer": [int(candidates[p]) for p in positions_ranked],
        }
        with self._journal.transaction() as db:
            seq = Journal.append_op(
                db, "query", payload, self._encode_query(query, observation)
            )
        self.state = state
        if adaptive is not None:
            self.ledger = adaptive[0]
        self._count += 1
        self._last_seq = seq
        self._queries_since_snapshot += 1
        if self._queries_since_snapshot >= self.config.snapshot_every:
            self.snapshot()
        self._warm_ahead()
        return Retrieved(
            memory_ids=[self._ids[candidates[p]] for p in chosen],
            texts=[self._texts[candidates[p]] for p in chosen],
            metadata=[dict(self._metadata[candidates[p]]) for p in chosen],
            scores=[float(scores[p]) for p in chosen],
            anchored=[bool(mask[p]) for p in chosen],
            calls=calls,
            cache_hits=hits,
            failures=failures,
            budget=budget,
            query_index=index,
            ranked_ids=[self._ids[candidates[p]] for p in positions_ranked],
            rounds=1 if adaptive is None else adaptive[2],
        )

    def _pay(
        self, text: str, rows, cached, index: int
    ) -> tuple[list[PairScore], int, int]:
        """Answers for the anchors: stored ones, then the scorer for the rest."""
        missing = list(
            dict.fromkeys(
                self._texts[r] for r, v in zip(rows, cached, strict=True) if v is None
            )
        )
        fresh = dict(
            zip(
                missing,
                self._score([(text, missing)])[0] if missing else [],
                strict=True,
            )
        )
        self._journal.put_scores(
            self._scorer_key,
            [(text, m, a.value) for m, a in fresh.items() if a.ok],
            index,
        )
        answers = [
            PairScore.success(v) if v is not None else fresh[self._texts[r]]
            for r, v in zip(rows, cached, strict=True)
        ]
        return answers, len(missing), sum(v is not None for v in cached)

    @_serialized
    def query(
        self, text: str, k: int | None = None, where: Mapping | None = None
    ) -> Retrieved:
        """Answers one query with the top ``k`` memories (chronological order).

        Args:
          text: the query.
          k: how many memories (default ``config.top_k``).
          where: keep only memories whose metadata has these key/value pairs.
        """
        self._check_open()
        text = _check_text(text, "text")
        k = _check_k(k, self.config.top_k)
        if where is not None and not isinstance(where, Mapping):
            raise ValueError(f"where must be a dict, got {type(where).__name__}")
        if not self._row_of:
            raise ValueError("the retriever holds no memory yet: add() some first")
        vector = self._embed([text], "query")[0]
        query = self._pool_from_vector(vector, where)
        if not bool(np.asarray(query.valid).any()):
            raise ValueError(f"no memory matches where={dict(where or {})!r}")
        return self._answer(text, query, k)

    def _rounds(self, query: Query, pay) -> tuple[Ledger, Any, int]:
        """The ``best`` preset's rounds for one query.

        ``pay(positions) -> (values, ok)`` answers one round (one batched scorer
        request live; the recorded answers on replay). Returns the new ledger,
        the policy's info and the number of rounds.
        """
        policy, begin, select_round, observe_round, finish = _adaptive_for(self.config)
        ledger = self.ledger
        # The learned order of the unscored reads the memories' biases in the
        # experience matrix as fitted on the queries before this one.
        memory_bias = self.state.memory_bias[query.candidates]
        progress = begin(
            ledger, query, usable_candidates(self.state, query), memory_bias
        )
        size = self.config.pool_size
        rounds = 0
        for _ in range(policy.config.num_rounds):
            requested = np.asarray(select_round(ledger, progress))
            if not requested.any():
                break
            positions = np.flatnonzero(requested)
            answered, ok = pay(positions)
            values = np.zeros(size, np.float32)
            mask = np.zeros(size, bool)
            values[positions] = np.where(ok, answered, 0.0)
            mask[positions] = ok
            progress = observe_round(
                ledger,
                progress,
                Observation(jnp.asarray(values), jnp.asarray(mask)),
                jnp.asarray(requested),
            )
            rounds += 1
        ledger, info = finish(ledger, progress)
        return ledger, info, rounds

    def _answer_adaptive(self, text: str, query: Query, k: int) -> Retrieved:
        index = self._count
        all_positions, all_rows, all_answers = [], [], []
        totals = {"calls": 0, "hits": 0}

        def pay(positions: np.ndarray):
            rows = np.asarray(query.candidates)[positions]
            cached = self._journal.get_scores(
                self._scorer_key, text, [self._texts[r] for r in rows]
            )
            answers, calls, hits = self._pay(text, rows, cached, index)
            totals["calls"] += calls
            totals["hits"] += hits
            all_positions.extend(int(p) for p in positions)
            all_rows.extend(int(r) for r in rows)
            all_answers.extend(answers)
            return (
                np.asarray([a.value if a.ok else 0.0 for a in answers], np.float32),
                np.asarray([a.ok for a in answers], bool),
            )

        ledger, info, rounds = self._rounds(query, pay)
        return self._finish(
            text,
            query,
            np.asarray(all_positions, np.int64),
            np.asarray(all_rows, np.int64),
            all_answers,
            k,
            totals["calls"],
            totals["hits"],
            adaptive=(ledger, info, rounds),
        )

    def _answer(self, text: str, query: Query, k: int) -> Retrieved:
        index = self._count
        self._ensure_room(self._rows_applied, index + 1)
        if self.ledger is not None:
            return self._answer_adaptive(text, query, k)
        positions, rows, cached = self._prepare(text, query, index, self.state)
        answers, calls, hits = self._pay(text, rows, cached, index)
        return self._finish(text, query, positions, rows, answers, k, calls, hits)

    @_serialized
    def rerank(
        self,
        query: str,
        candidates: Sequence[Mapping | tuple],
        k: int | None = None,
    ) -> Retrieved:
        """Reranks a pool someone else retrieved (Mem0, LangChain, LlamaIndex ...).

        Args:
          query: the query text.
          candidates: up to ``pool_size`` entries, each a dict with ``id`` and
            ``text`` (optional ``score``: the retriever's similarity, else
            cosine with this retriever's embedder; optional ``metadata``), or
            an ``(id, text)`` pair. Unknown ids are added on first sight; a
            known id with a new text is updated first.
          k: how many to return (default ``config.top_k``).
        """
        self._check_open()
        query = _check_text(query, "query")
        k = _check_k(k, self.config.top_k)
        if isinstance(candidates, str | Mapping) or not isinstance(
            candidates, Sequence
        ):
            raise ValueError("candidates must be a list of {'id', 'text'} dicts")
        if not candidates:
            raise ValueError("candidates is empty")
        if len(candidates) > self.config.pool_size:
            raise ValueError(
                f"{len(candidates)} candidates exceed pool_size={self.config.pool_size}"
            )
        parsed = []
        for i, entry in enumerate(candidates):
            if isinstance(entry, Mapping):
                mid, text = entry.get("id"), entry.get("text")
                score, meta = entry.get("score"), entry.get("metadata")
            elif isinstance(entry, tuple) and len(entry) == 2:
                (mid, text), score, meta = entry, None, None
            else:
                raise ValueError(
                    f"candidates[{i}] must be a dict or an (id, text) pair"
                )
            mid = _check_id(mid, f"candidates[{i}].id")
            text = _check_text(text, f"candidates[{i}].text")
            if score is not None and (
                not isinstance(score, int | float | np.floating)
                or not math.isfinite(score)
            ):
                raise ValueError(f"candidates[{i}].score must be a finite number")
            _metadata_json(meta, f"candidates[{i}].metadata")
            if mid in self._retired_ids and mid not in self._row_of:
                raise ValueError(f"candidates[{i}]: id {mid!r} was deleted")
            parsed.append((mid, text, score, meta))
        if len({p[0] for p in parsed}) != len(parsed):
            raise ValueError("candidates hold an id twice")
        if any(p[2] is not None for p in parsed) and any(p[2] is None for p in parsed):
            raise ValueError("give a score for every candidate or for none")
        vector = self._embed([query], "query")[0]
        new = [(m, t, meta) for m, t, _, meta in parsed if m not in self._row_of]
        changed = [
            (m, t)
            for m, t, _, _ in parsed
            if m in self._row_of and self._texts[self._row_of[m]] != t
        ]
        if new:
            self.add(
                [t for _, t, _ in new],
                [meta for _, _, meta in new],
                [m for m, _, _ in new],
            )
        for mid, text in changed:
            self.update(mid, text)
        rows = np.array([self._row_of[m] for m, _, _, _ in parsed], np.int64)
        if parsed[0][2] is not None:
            similarity = np.array([p[2] for p in parsed], np.float32)
        else:
            similarity = (self._embeddings[rows] @ vector).astype(np.float32)
        order = np.lexsort((np.arange(len(rows)), -similarity))
        pool = self._pool(rows[order], similarity[order])
        return self._answer(query, pool, k)

    @_serialized
    def query_many(self, texts: Sequence[str], k: int | None = None) -> list[Retrieved]:
        """Answers several queries in order, their anchors in one scorer request.

        The answers equal those of calling :meth:`query` on each in turn: the
        anchors of query ``i`` are drawn from the state after query ``i - 1``
        (the policy needs only the query count and the memories, so they can be
        drawn up front); should a policy's draw depend on more, the missing
        pairs are paid at that query.
        """
        self._check_open()
        texts = _check_texts(texts)
        k = _check_k(k, self.config.top_k)
        if not texts:
            return []
        if not self._row_of:
            raise ValueError("the retriever holds no memory yet: add() some first")
        vectors = self._embed(texts, "texts")
        pools = [self._pool_from_vector(v, None) for v in vectors]
        if self.ledger is not None:
            # The best preset's rounds depend on the answers of earlier rounds:
            # no anchors can be planned ahead, so the queries run in turn.
            return [
                self._answer(text, pool, k)
                for text, pool in zip(texts, pools, strict=True)
            ]
        start = self._count
        # Plan every query's anchors up front (select reads only the count and
        # the memories), pay all unpaid pairs in one request, then answer in order.
        requests: dict[str, list[str]] = {}
        for i, (text, pool) in enumerate(zip(texts, pools, strict=True)):
            ahead = self.state._replace(count=jnp.asarray(start + i, jnp.int32))
            _, rows, cached = self._prepare(text, pool, start + i, ahead)
            want = requests.setdefault(text, [])
            for r, v in zip(rows, cached, strict=True):
                if v is None and self._texts[r] not in want:
                    want.append(self._texts[r])
        batch = [(q, m) for q, m in requests.items() if m]
        fresh: dict[tuple[str, str], PairScore] = {}
        for (q, memories), answers in zip(batch, self._score(batch), strict=True):
            for memory, answer in zip(memories, answers, strict=True):
                fresh[(q, memory)] = answer
        self._journal.put_scores(
            self._scorer_key,
            [(q, m, a.value) for (q, m), a in fresh.items() if a.ok],
            start,
        )
        results = []
        used: set[tuple[str, str]] = set()
        for text, pool in zip(texts, pools, strict=True):
            self._ensure_room(self._rows_applied, self._count + 1)
            positions, rows, cached = self._prepare(text, pool, self._count, self.state)
            answers, calls, hits, unplanned = [], 0, 0, False
            for r, v in zip(rows, cached, strict=True):
                pair = (text, self._texts[r])
                if pair in fresh and pair not in used:
                    answers.append(fresh[pair])
                    used.add(pair)
                    calls += 1
                elif v is not None:
                    answers.append(PairScore.success(v))
                    hits += 1
                else:
                    unplanned = True
            if unplanned:  # the policy drew other anchors than planned
                answers, more, hits = self._pay(text, rows, cached, self._count)
                calls += more
            results.append(
                self._finish(text, pool, positions, rows, answers, k, calls, hits)
            )
        return results

    @_serialized
    def answer(self, index: int) -> list[MemoryId]:
        """The ids query ``index`` returned, best first (from the journal)."""
        self._check_open()
        if not _is_int(index) or not 0 <= index < self._count:
            raise ValueError(f"index must be in [0, {self._count}), got {index!r}")
        row = self._journal._db.execute(
            "SELECT payload FROM ops WHERE kind='query' AND "
            "json_extract(payload, '$.index')=?",
            (int(index),),
        ).fetchone()
        return [self._ids[r] for r in json.loads(row[0])["answer"]]

    # ------------------------------------------------------------------ close

    def _release(self) -> None:
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        if self._lock is not None:
            self._lock.release()

    @_serialized
    def close(self) -> None:
        """Snapshots the state (for a fast reopen) and releases the folder."""
        if self._journal is None:
            return
        try:
            if self._last_seq > self._snapshot_seq:
                self.snapshot()
        finally:
            self._release()

    def __enter__(self) -> OnlineRetriever:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


__all__ = [
    "CorruptFolderError",
    "FolderLockedError",
    "Memory",
    "OnlineRetriever",
    "Retrieved",
    "RetrieverConfig",
    "TextEmbedder",
    "build_policy",
]
