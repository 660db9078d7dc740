"""The online retriever for one agent: EARM over a growing memory, kept on disk.

Per query: embed it, take the top-``pool_size`` memories by cosine similarity,
let the solver pick the anchors, pay the scorer for those (through the score
cache, so no pair is paid twice), fold the answers in, and return the top ``k``
memories by mixed score in chronological order. Every paid score is appended to
an observation log before the solver sees it, and the solver state is written
after every query, so a restart loses nothing.

Files in the retriever's folder:

* ``config.json``: :class:`RetrieverConfig` and the solver shapes.
* ``memories.jsonl``: one line per memory (id, text, metadata, inserted at).
* ``embeddings.npy``: ``float32[M, D]`` unit-norm memory embeddings.
* ``state.npz``: the :class:`~earm_jax.core.config.SolverState` leaves.
* ``observations.jsonl``: every query with its anchors, scores and failures.
* ``scores.sqlite``: the score cache (:mod:`earm_jax.scoring.cache`).

Host side: files, embeddings and the scorer. The math is the pure core.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.base import NOT_INSERTED, Observation, Query
from earm_jax.core.config import OnlineSolver, SolverConfig
from earm_jax.core.grow import grow_state
from earm_jax.core.online import online_solver
from earm_jax.policies.adaptive import adaptive_policy
from earm_jax.policies.rerank import top_k_context
from earm_jax.scoring.base import Scorer
from earm_jax.scoring.cache import CachedScorer, ScoreCache
from earm_jax.settings import EarmSettings
from earm_jax.store.checkpoint import atomic_write, load_pytree, save_pytree
from earm_jax.store.embeddings import TextEmbedder


@dataclasses.dataclass(frozen=True)
class RetrieverConfig(EarmSettings):
    """Settings of an online retriever (stored in its ``config.json``): the
    shared :class:`~earm_jax.settings.EarmSettings` plus the retriever's own."""

    # Constant cost per query however long the agent lives (see
    # earm_jax/core/solvers/incremental.py); "als" refits the whole history.
    solver: str = "incremental"
    pool_size: int = 200
    top_k: int = 10
    initial_memories: int = 256
    initial_queries: int = 64
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("pool_size", "top_k", "initial_memories", "initial_queries"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"RetrieverConfig.{name} must be a positive int, got {value!r}"
                )


@dataclasses.dataclass(frozen=True)
class Retrieved:
    """One query's answer.

    Attributes:
      memory_ids: the top-``k`` memory ids, in chronological order.
      texts: their texts.
      scores: their mixed scores (direct score where anchored).
      anchored: whether each was scored directly at this query.
      calls: pairs sent to the scorer for this query (cache misses).
      cache_hits: anchors answered from the score cache.
      failures: ``(memory id, reason)`` for anchors the scorer failed on; they
        count as not observed, never as a made-up score.
      budget: the policy's direct-scoring budget for this query (``best``
        preset: the most this query was allowed to spend under the ledger).
      rounds: scorer requests made for this query (``best``: 0 to 4 rounds).
    """

    memory_ids: list[int]
    texts: list[str]
    scores: list[float]
    anchored: list[bool]
    calls: int
    cache_hits: int
    failures: list[tuple[int, str]]
    budget: int
    rounds: int = 1


class OnlineRetriever:
    """EARM for one agent: add memories, query, and keep the experience on disk.

    Args:
      directory: the retriever's folder (created if missing; reopened if it holds
        a retriever already, whose stored config then wins).
      scorer: the relevance scorer (e.g. :class:`earm_jax.scoring.vllm.VllmScorer`).
      embedder: text embedder (e.g. :class:`earm_jax.store.embeddings.Embedder`).
      config: settings for a new retriever.
    """

    def __init__(
        self,
        directory: str | Path,
        scorer: Scorer,
        embedder: TextEmbedder,
        config: RetrieverConfig | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.embedder = embedder
        self.cache = ScoreCache(self.directory / "scores.sqlite")
        self.scorer = CachedScorer(scorer, self.cache)
        config_path = self.directory / "config.json"
        if config_path.exists():
            stored = json.loads(config_path.read_text())
            settings = stored["retriever"]
            settings["stage_ratios"] = tuple(settings["stage_ratios"])
            self.config = RetrieverConfig(**settings)
            self.solver_config = SolverConfig(**stored["solver"])
            self._load()
        else:
            self.config = config or RetrieverConfig()
            self.solver_config = self.config.solver_config(
                self.config.initial_memories,
                self.config.initial_queries,
                self.config.pool_size,
            )
            self.texts: list[str] = []
            self.embeddings = np.zeros((0, 0), np.float32)
            self.state = self._solver().init(
                self._key("init"),
                jnp.full((self.solver_config.num_memories,), NOT_INSERTED, jnp.int32),
            )
            self._save_config()
            self._save_state()
        self._compiled: dict[SolverConfig, tuple[Any, Any]] = {}
        self._load_ledger()
        self._adaptive_functions: Any = None

    # ------------------------------------------------------------------ helpers

    def _key(self, purpose: str, index: int = 0) -> jax.Array:
        base = jax.random.key(self.config.seed)
        tag = {"init": 0, "select": 1, "grow": 2}[purpose]
        return jax.random.fold_in(jax.random.fold_in(base, tag), index)

    def _solver(self) -> OnlineSolver:
        return online_solver(
            self.solver_config, self.config.policy(self.config.pool_size)
        )

    def _functions(self):
        """Jitted select/observe for the current shapes (recompiled on growth)."""
        if self.solver_config not in self._compiled:
            solver = self._solver()
            self._compiled[self.solver_config] = (
                jax.jit(solver.select),
                jax.jit(solver.observe),
            )
        return self._compiled[self.solver_config]

    @property
    def num_memories(self) -> int:
        return len(self.texts)

    @property
    def num_queries(self) -> int:
        return int(self.state.count)

    # ----------------------------------------------------------------- storage

    def _save_config(self) -> None:
        payload = {
            "retriever": dataclasses.asdict(self.config),
            "solver": self.solver_config._asdict(),
        }
        atomic_write(
            self.directory / "config.json",
            lambda path: Path(path).write_text(json.dumps(payload, indent=2)),
        )

    def _save_state(self) -> None:
        save_pytree(self.directory / "state.npz", self.state)
        if getattr(self, "ledger", None) is not None:
            save_pytree(self.directory / "ledger.npz", self.ledger)

    def _save_memories(self) -> None:
        def write_embeddings(path: str) -> None:
            with open(path, "wb") as handle:
                np.save(handle, self.embeddings)

        atomic_write(self.directory / "embeddings.npy", write_embeddings)

    def _adaptive(self):
        """The ``best`` preset's adaptive policy, or ``None`` (paper preset)."""
        config = self.config.adaptive_config(self.config.pool_size)
        return None if config is None else adaptive_policy(config)

    def _load_ledger(self) -> None:
        policy = self._adaptive()
        self.ledger = None
        if policy is not None:
            path = self.directory / "ledger.npz"
            self.ledger = (
                load_pytree(path, policy.init()) if path.exists() else policy.init()
            )

    def _load(self) -> None:
        template = self._solver().init(self._key("init"))
        self.state = load_pytree(self.directory / "state.npz", template)
        self.texts = []
        memories = self.directory / "memories.jsonl"
        if memories.exists():
            for line in memories.read_text().splitlines():
                if line.strip():
                    self.texts.append(json.loads(line)["text"])
        embeddings = self.directory / "embeddings.npy"
        self.embeddings = (
            np.load(embeddings) if embeddings.exists() else np.zeros((0, 0), np.float32)
        )
        if len(self.embeddings) != len(self.texts):
            raise ValueError(
                f"{self.directory}: embeddings.npy has {len(self.embeddings)} rows "
                f"but memories.jsonl has {len(self.texts)} memories"
            )

    def _append_log(self, name: str, record: dict[str, Any]) -> None:
        with open(self.directory / name, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())

    # ------------------------------------------------------------------ growth

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
            self._save_config()

    # --------------------------------------------------------------------- API

    def add(
        self, texts: Sequence[str], metadata: Sequence[dict] | None = None
    ) -> list[int]:
        """Adds memories; they are candidates from the next query on.

        Returns:
          Their ids (rows of the experience matrix, kept for life).
        """
        texts = list(texts)
        for position, text in enumerate(texts):
            if not isinstance(text, str) or not text.strip():
                raise ValueError(
                    f"texts[{position}] must be a non-empty string, got {text!r}"
                )
        if metadata is not None and len(metadata) != len(texts):
            raise ValueError(
                f"metadata has {len(metadata)} entries for {len(texts)} texts"
            )
        if not texts:
            return []
        vectors = np.asarray(self.embedder.embed(texts), np.float32)
        first = self.num_memories
        ids = list(range(first, first + len(texts)))
        self._ensure_room(first + len(texts), self.num_queries + 1)
        inserted_at = self.num_queries
        self.state = self.state._replace(
            insert_time=self.state.insert_time.at[jnp.asarray(ids)].set(inserted_at)
        )
        self.embeddings = (
            vectors
            if self.embeddings.size == 0
            else np.concatenate([self.embeddings, vectors])
        )
        self.texts.extend(texts)
        for index, text in zip(ids, texts, strict=True):
            extra = metadata[index - first] if metadata is not None else {}
            self._append_log(
                "memories.jsonl",
                {
                    "id": index,
                    "text": text,
                    "inserted_at": inserted_at,
                    "metadata": extra,
                },
            )
        self._save_memories()
        self._save_state()
        return ids

    def _pool(self, query_vector: np.ndarray) -> Query:
        size = self.config.pool_size
        similarity = self.embeddings @ query_vector
        take = min(size, len(similarity))
        top = np.argsort(-similarity, kind="stable")[:take]
        candidates = np.zeros(size, np.int32)
        sims = np.zeros(size, np.float32)
        valid = np.zeros(size, bool)
        candidates[:take], sims[:take], valid[:take] = top, similarity[top], True
        return Query(jnp.asarray(candidates), jnp.asarray(sims), jnp.asarray(valid))

    def query(self, text: str, k: int | None = None) -> Retrieved:
        """Answers one query with the top ``k`` memories (chronological order)."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"text must be a non-empty string, got {text!r}")
        k = self.config.top_k if k is None else k
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        if self.num_memories == 0:
            raise ValueError("the retriever holds no memory yet: add() some first")
        self._ensure_room(self.num_memories, self.num_queries + 1)
        select, observe = self._functions()
        query = self._pool(np.asarray(self.embedder.embed([text])[0], np.float32))
        index = self.num_queries
        hits_before = self.scorer.counters.hits
        misses_before = self.scorer.counters.misses
        values = np.zeros(self.config.pool_size, np.float32)
        mask = np.zeros(self.config.pool_size, bool)
        failures: list[tuple[int, str]] = []
        memory_ids_all: list[int] = []
        answers_all: list[Any] = []

        def pay(positions: np.ndarray) -> None:
            """One batched scorer request for these pool positions."""
            memory_ids = np.asarray(query.candidates)[positions]
            answers = self.scorer.score(text, [self.texts[m] for m in memory_ids])
            for position, memory, answer in zip(
                positions, memory_ids, answers, strict=True
            ):
                if answer.ok:
                    values[position], mask[position] = answer.value, True
                else:
                    failures.append((int(memory), answer.reason))
            memory_ids_all.extend(int(m) for m in memory_ids)
            answers_all.extend(answers)

        adaptive = self._adaptive()
        if adaptive is None:
            anchors = np.asarray(select(self._key("select", index), self.state, query))
            pay(np.flatnonzero(anchors))
            rounds = 1
        else:
            # The best preset: rounds of one batched request each, until settled
            # or the hard call budget (the ledger) says stop.
            if self._adaptive_functions is None:
                self._adaptive_functions = (
                    jax.jit(adaptive.begin),
                    jax.jit(adaptive.select_round),
                    jax.jit(adaptive.observe_round),
                    jax.jit(adaptive.finish),
                )
            begin, select_round, observe_round, finish = self._adaptive_functions
            progress = begin(self.ledger, query)
            rounds = 0
            for _ in range(adaptive.config.num_rounds):
                requested = np.asarray(select_round(self.ledger, progress))
                if not requested.any():
                    break
                pay(np.flatnonzero(requested))
                rounds += 1
                progress = observe_round(
                    self.ledger,
                    progress,
                    Observation(jnp.asarray(values), jnp.asarray(mask)),
                    jnp.asarray(requested),
                )
            self.ledger, adaptive_info = finish(self.ledger, progress)
        memory_ids = np.asarray(memory_ids_all, np.int64)
        answers = answers_all
        # The log first: a crash after this line loses no paid score.
        self._append_log(
            "observations.jsonl",
            {
                "query_index": index,
                "text": text,
                "scorer": self.scorer.identity.key(),
                "anchors": [int(m) for m in memory_ids],
                "scores": [a.value if a.ok else None for a in answers],
                "failures": [[m, reason] for m, reason in failures],
            },
        )
        self.state, info = observe(
            self.state, query, Observation(jnp.asarray(values), jnp.asarray(mask))
        )
        self._save_state()
        ranking = info.scores if adaptive is None else adaptive_info.scores
        budget = info.budget if adaptive is None else adaptive_info.limit
        # Ids are assigned in arrival order, so they are the chronological key.
        ids, chosen = top_k_context(ranking, query.candidates, query.candidates, k)
        ids, chosen = np.asarray(ids), np.asarray(chosen)
        scores = np.asarray(ranking)
        position_of = {int(m): p for p, m in enumerate(np.asarray(query.candidates))}
        picked = [int(m) for m, c in zip(ids, chosen, strict=True) if c]
        return Retrieved(
            memory_ids=picked,
            texts=[self.texts[m] for m in picked],
            scores=[float(scores[position_of[m]]) for m in picked],
            anchored=[bool(mask[position_of[m]]) for m in picked],
            calls=self.scorer.counters.misses - misses_before,
            cache_hits=self.scorer.counters.hits - hits_before,
            failures=failures,
            budget=int(budget),
            rounds=rounds,
        )

    def close(self) -> None:
        self.cache.close()


__all__ = ["OnlineRetriever", "Retrieved", "RetrieverConfig"]
