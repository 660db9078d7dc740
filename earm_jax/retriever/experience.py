"""The experience a retriever holds: the solver's state (the causal query x
memory matrix and its fitted model), its buffer shapes, the round preset's
carry (``best``'s call ledger, learned calls' regression), and the count of
queries folded in.

One object owns them (:class:`Experience`, the retriever's ``experience``).
It changes only through its methods, each of which the live path and the
replay of the journal both call, so a reopened folder's experience is bit for
bit the one an uninterrupted run would hold.

Shapes are fixed inside jit, so the memory rows and the query capacity double
when they fill up (:func:`~earm_jax.core.grow.grow_state`), and every new shape
compiles once per process (:mod:`earm_jax.retriever.compiled`). When a
retriever grows, every shape no open retriever holds or could still grow into
(the one it left, a shape compiled ahead that it went past) is dropped from
that cache: each compiled executable keeps its memory until it is dropped, so
keeping every shape ever used made a long-lived process's resident memory
grow with each doubling. The next shapes compile in a background thread
before they are needed (:meth:`Experience.warm_ahead`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.base import NOT_INSERTED, Observation, Query, SideInputs
from earm_jax.core.config import SolverConfig, SolverState
from earm_jax.core.grow import grow_state
from earm_jax.core.online import online_solver, usable_candidates
from earm_jax.policies.adaptive import Ledger
from earm_jax.policies.adaptive.state import RoundState
from earm_jax.policies.adaptive.stop_rules import in_similarity_head
from earm_jax.retriever.compiled import (
    adaptive_for,
    build_policy,
    functions_for,
    left_behind,
    round_context,
    run_dummy,
    solver_config_of,
    track,
)
from earm_jax.retriever.config import RetrieverConfig
from earm_jax.retriever.resident import trim_heap

PayRound = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]
"""``pay(positions) -> (values, ok)``: one round's answers (one batched scorer
request live; the recorded answers on replay)."""


def _in_head(policy, progress) -> bool:
    """Whether the query's next round still pays down the similarity order."""
    if isinstance(progress, RoundState):
        return bool(in_similarity_head(policy.config, progress))
    return int(progress.rounds) < 1  # learned calls: the head is the first round


class Experience:
    """The solver state, its shapes, the round carry and the query count.

    Args:
      config: the retriever's settings (read, never changed).
      policy_width: the embedding width the round preset's calls read (0
        unless they follow the texts).

    Attributes:
      state: the solver's :class:`~earm_jax.core.config.SolverState`.
      solver_config: its shapes (grown by :meth:`ensure_room`).
      ledger: the round preset's carry, ``None`` for one-round presets.
      count: queries folded in (the next query's index).
      rows_applied: memory rows whose ``add`` is applied; ``visible_rows``,
        those a query may draw (rows become visible as the replay applies
        their operation).
      active: ``False`` once the retriever closed (its shapes are no longer
        held, :func:`~earm_jax.retriever.compiled.left_behind`).
    """

    def __init__(self, config: RetrieverConfig, policy_width: int = 0) -> None:
        self.config = config
        self.policy_width = policy_width
        self.solver_config = solver_config_of(
            config, config.initial_memories, config.initial_queries
        )
        self.state = self.initial_state(self.solver_config)
        adaptive = self.rounds_functions()
        self.ledger: Ledger | None = None if adaptive is None else adaptive[0].init()
        self.count = 0
        self.rows_applied = 0
        self.visible_rows = 0
        self.replaying = False
        self.active = True
        self._warming: set[tuple[int, int]] = set()
        self._warm_thread: threading.Thread | None = None
        track(self)

    # ------------------------------------------------------------- functions

    def key(self, purpose: str, index: int = 0) -> jax.Array:
        base = jax.random.key(self.config.seed)
        tag = {"init": 0, "select": 1, "grow": 2}[purpose]
        return jax.random.fold_in(jax.random.fold_in(base, tag), index)

    def functions(self):
        """The jitted ``select`` and ``observe`` of the current shapes."""
        return functions_for(self.solver_config, self.config)

    def rounds_functions(self):
        return adaptive_for(self.config, self.policy_width)

    def initial_state(self, solver_config: SolverConfig) -> SolverState:
        solver = online_solver(solver_config, build_policy(self.config))
        return solver.init(
            self.key("init"),
            jnp.full((solver_config.num_memories,), NOT_INSERTED, jnp.int32),
        )

    def tree(self, state: SolverState | None = None, ledger: Any = None):
        """What a snapshot holds: the solver state, and the round carry
        beside it."""
        state = self.state if state is None else state
        ledger = self.ledger if ledger is None else ledger
        return state if ledger is None else (state, ledger)

    def restore(self, experience, solver_config, count: int, rows: int) -> None:
        """Takes a snapshot's :meth:`tree` (opening a folder)."""
        state = experience if self.ledger is None else experience[0]
        if self.ledger is not None:
            self.ledger = experience[1]
        self.state, self.solver_config = state, solver_config
        self.count = count
        self.rows_applied = rows

    # ------------------------------------------------------------- changes

    def ensure_room(self, num_memories: int, num_queries: int) -> None:
        old = self.solver_config
        memories, capacity = old.num_memories, old.capacity
        while memories < num_memories:
            memories *= 2
        while capacity < num_queries:
            capacity *= 2
        if (memories, capacity) != (old.num_memories, old.capacity):
            self.state, self.solver_config = grow_state(
                self.state,
                old,
                self.key("grow", memories + capacity),
                num_memories=memories,
                capacity=capacity,
            )
            if left_behind(old, self.config):
                trim_heap()  # what the dropped executables held

    def _set_insert_time(self, rows: Sequence[int], value: int) -> None:
        insert_time = np.array(self.state.insert_time)
        insert_time[np.asarray(rows, np.int64)] = value
        self.state = self.state._replace(insert_time=jnp.asarray(insert_time))

    def apply_add(self, first: int, count: int) -> None:
        """Rows ``first .. first + count - 1`` become candidates from now on."""
        self.ensure_room(first + count, 0)
        self._set_insert_time(range(first, first + count), self.count)
        self.rows_applied = first + count
        self.visible_rows = self.rows_applied

    def apply_retire(self, rows: Sequence[int]) -> None:
        """``rows`` are never candidates again."""
        self._set_insert_time(rows, NOT_INSERTED)

    def observe(self, query: Query, observation: Observation):
        """The solver's state and info after ``query`` (nothing is changed:
        :meth:`record` takes them once the query is stored)."""
        self.ensure_room(self.rows_applied, self.count + 1)
        _, observe = self.functions()
        return observe(self.state, query, observation)

    def record(self, state: SolverState, ledger: Any = None) -> None:
        """Takes a query's new state (and round carry): the query is folded in."""
        self.state = state
        if ledger is not None:
            self.ledger = ledger
        self.count += 1

    def select(self, query: Query, index: int, state: SolverState | None = None):
        """The anchors the one-round policy draws for query ``index``."""
        select, _ = self.functions()
        state = self.state if state is None else state
        return np.asarray(select(self.key("select", index), state, query))

    # -------------------------------------------------------------- rounds

    def rounds(
        self,
        query: Query,
        pay: PayRound,
        side: SideInputs | None = None,
        head_only: bool = False,
    ) -> tuple[Ledger, Any, int]:
        """The round preset's rounds for one query (no state changes).

        ``pay`` answers one round; ``side`` holds the query's and the
        candidates' embeddings (the calls that follow the texts read them);
        ``head_only`` stops where the similarity head ends (a query planned
        ahead of its turn: what follows reads a regression the queries before
        it still change). Returns the policy's new carry, its decision and the
        number of rounds.
        """
        policy, begin, select_round, observe_round, finish = self.rounds_functions()
        ledger = self.ledger
        # The learned order of the unscored reads the memories' biases in the
        # experience matrix as fitted on the queries before this one.
        memory_bias = self.state.memory_bias[query.candidates]
        progress = begin(
            None,
            ledger,
            query,
            round_context(
                usable_candidates(self.state, query),
                self.state.count,
                self.config.pool_size,
                memory_bias,
                side,
            ),
        )
        size = self.config.pool_size
        rounds = 0
        for _ in range(policy.num_rounds):
            if head_only and not _in_head(policy, progress):
                break
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
                jnp.asarray(requested),
                Observation(jnp.asarray(values), jnp.asarray(mask)),
            )
            rounds += 1
        ledger, info = finish(ledger, progress)
        return ledger, info, rounds

    # ------------------------------------------------------------ compiling

    def warm_ahead(self, width: int) -> None:
        """Compiles the next buffer shapes in the background (no stall later).

        Queries grow the history by one row each, so warming starts at half of
        the query capacity; memories arrive in batches, so at three quarters.
        One warming thread at a time (tracing holds the GIL: it slows queries
        a little while it runs instead of stalling one query for seconds).
        """
        if not self.config.precompile or self.replaying:
            return
        if self._warm_thread is not None and self._warm_thread.is_alive():
            return
        memories, capacity = (
            self.solver_config.num_memories,
            self.solver_config.capacity,
        )
        target = None
        if (self.count + 1) * 2 > capacity:
            target = (memories, capacity * 2)
        elif self.rows_applied * 4 > memories * 3:
            target = (memories * 2, capacity)
        if target is None or target in self._warming:
            return
        self._warming.add(target)
        # Not a daemon: exiting while XLA compiles aborts the process, so the
        # interpreter waits for a running compile to finish before it exits.
        self._warm_thread = threading.Thread(
            target=self._warm,
            args=(self.state, self.solver_config, target, width),
            daemon=False,
        )
        self._warm_thread.start()

    def warm_up(self, width: int) -> None:
        """Compiles the current shapes now."""
        self._run_dummy(self.state, self.solver_config, width)

    def _run_dummy(self, state, solver_config, width: int) -> None:
        run_dummy(state, solver_config, self.config, self.key("select", 0), width)

    def _warm(self, state, solver_config, target, width: int) -> None:
        try:
            grown, grown_config = grow_state(
                state,
                solver_config,
                self.key("grow", sum(target)),
                num_memories=target[0],
                capacity=target[1],
            )
            self._run_dummy(grown, grown_config, width)
        except Exception:  # noqa: BLE001 - warming is only an optimisation
            pass
        finally:
            trim_heap()  # the compiler's working memory, freed in this thread


__all__ = ["Experience", "PayRound"]
