"""Growing the solver's fixed buffers as memories and queries arrive, and
compiling the next shapes before they are needed.

Shapes are fixed inside jit, so the memory rows and the query capacity double
when they fill up (:func:`~earm_jax.core.grow.grow_state`), and every new shape
compiles once per process (:mod:`earm_jax.retriever.compiled`). When a
retriever grows, every shape no open retriever holds or could still grow into
(the one it left, a shape compiled ahead that it went past) is dropped from
that cache: each compiled executable keeps its memory until it is dropped, so
keeping every shape ever used made a long-lived process's resident memory
grow with each doubling.
"""

from __future__ import annotations

import threading

from earm_jax.core.grow import grow_state
from earm_jax.retriever.compiled import left_behind, run_dummy
from earm_jax.retriever.resident import trim_heap
from earm_jax.retriever.serial import serialized


class Growth:
    """The buffer-growth half of :class:`~earm_jax.retriever.online.OnlineRetriever`."""

    def _ensure_room(self, num_memories: int, num_queries: int) -> None:
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
                self._key("grow", memories + capacity),
                num_memories=memories,
                capacity=capacity,
            )
            if left_behind(old, self.config):
                trim_heap()  # what the dropped executables held

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

    @serialized
    def warm_up(self) -> None:
        """Compiles the solver for the current buffer shapes now (else the first
        query does)."""
        self._check_open()
        self._run_dummy(self.state, self.solver_config)

    def _run_dummy(self, state, solver_config) -> None:
        width = self._embeddings.shape[1] if self._embeddings.size else 0
        run_dummy(state, solver_config, self.config, self._key("select", 0), width)

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
        finally:
            trim_heap()  # the compiler's working memory, freed in this thread


__all__ = ["Growth"]
