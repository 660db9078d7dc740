r"""The solver's math as a per-stream NumPy loop: the baseline of the benchmarks.

What someone would write without JAX: one stream at a time, one query at a
time, the history as NumPy arrays sliced to the ``t`` rows it holds (so the
``als`` refit costs ``O(t)``, unlike the fixed-capacity JAX buffer), the block
solves with batched ``np.linalg.solve``, the per-memory sums with
``np.add.at``. Same model, same order of operations as ``earm_jax.core.online``
(refit on the history, exact fold-in, completion, then the anchors join the
history) and, for ``"incremental"``, as ``earm_jax.core.solvers.incremental``.
Float32 like the JAX path.

The anchors are given (``anchors[T, N]``, e.g. ``StepInfo.anchors`` of a JAX
run), so the two paths see the same observations and their completions can be
compared entry by entry; the budget schedule and the sampler are not part of
the timed NumPy work (which favours the baseline slightly).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class NumpyConfig(NamedTuple):
    num_memories: int
    capacity: int
    rank: int = 8
    l2: float = 0.1
    solver: str = "als"
    num_sweeps: int = 5
    refresh_rows: int = 8
    init_scale: float = 0.1


def _intercept(factors: np.ndarray) -> np.ndarray:
    ones = np.ones(factors.shape[:-1] + (1,), factors.dtype)
    return np.concatenate([ones, factors], axis=-1)


def _ridge(gram: np.ndarray, rhs: np.ndarray, l2: float) -> np.ndarray:
    eye = np.eye(gram.shape[-1], dtype=gram.dtype)
    return np.linalg.solve(gram + l2 * eye, rhs[..., None])[..., 0]


class NumpySolver:
    """The online solver for one stream, state held in NumPy arrays."""

    def __init__(
        self,
        config: NumpyConfig,
        insert_time: np.ndarray,
        seed: int = 0,
        initial_factors: np.ndarray | None = None,
    ):
        c = config
        self.config = c
        rng = np.random.default_rng(seed)
        dim = c.rank + 1
        self.mean = np.float32(0.0)
        self.memory_bias = np.zeros(c.num_memories, np.float32)
        if initial_factors is None:
            initial_factors = c.init_scale * rng.normal(size=(c.num_memories, c.rank))
        self.memory_factors = np.array(initial_factors, np.float32)
        self.query_bias = np.zeros(c.capacity, np.float32)
        self.query_factors = np.zeros((c.capacity, c.rank), np.float32)
        self.insert_time = np.asarray(insert_time)
        self.rows_index: list[np.ndarray] = []
        self.rows_value: list[np.ndarray] = []
        self.memory_count = np.zeros(c.num_memories, np.int64)
        self.count = 0
        self.gram = np.zeros((c.num_memories, dim, dim), np.float32)
        self.rhs = np.zeros((c.num_memories, dim), np.float32)
        self.cursor = 0

    # ------------------------------------------------------------- helpers
    def _effective(self) -> np.ndarray:
        return np.where(self.memory_count[:, None] > 0, self.memory_factors, 0.0)

    def _flat_history(self):
        if not self.rows_index:
            return None
        lengths = np.array([len(r) for r in self.rows_index])
        rows = np.repeat(np.arange(len(lengths)), lengths)
        index = np.concatenate(self.rows_index)
        value = np.concatenate(self.rows_value)
        return rows, index, value

    # ----------------------------------------------------------------- ALS
    def _als_sweep(self, flat) -> None:
        c = self.config
        rows, index, value = flat
        num_rows = len(self.rows_index)
        factors = self._effective()
        # queries
        x = _intercept(factors[index])  # [L, D]
        z = value - self.mean - self.memory_bias[index]
        dim = x.shape[1]
        gram = np.zeros((num_rows, dim, dim), np.float32)
        rhs = np.zeros((num_rows, dim), np.float32)
        np.add.at(gram, rows, x[:, :, None] * x[:, None, :])
        np.add.at(rhs, rows, z[:, None] * x)
        w = _ridge(gram, rhs, c.l2)
        self.query_bias[:num_rows] = w[:, 0]
        self.query_factors[:num_rows] = w[:, 1:]
        # memories
        x = _intercept(self.query_factors[rows])
        z = value - self.mean - self.query_bias[rows]
        gram = np.zeros((c.num_memories, dim, dim), np.float32)
        rhs = np.zeros((c.num_memories, dim), np.float32)
        np.add.at(gram, index, x[:, :, None] * x[:, None, :])
        np.add.at(rhs, index, z[:, None] * x)
        seen = np.flatnonzero(self.memory_count > 0)
        w = _ridge(gram[seen], rhs[seen], c.l2)
        self.memory_bias[seen] = w[:, 0]
        self.memory_factors[seen] = w[:, 1:]
        # mean
        factors = self._effective()
        rest = (
            self.memory_bias[index]
            + self.query_bias[rows]
            + np.einsum("lr,lr->l", factors[index], self.query_factors[rows])
        )
        self.mean = np.float32(np.mean(value - rest))

    # --------------------------------------------------------- incremental
    def _incremental_update(self) -> None:
        c = self.config
        newest = self.count - 1
        earlier = newest
        num_past = min(c.refresh_rows, earlier)
        past = [(self.cursor + i) % max(earlier, 1) for i in range(num_past)]
        block = [newest] + past
        in_stats = [False] + [True] * num_past
        self.cursor = (self.cursor + c.refresh_rows) % max(earlier, 1)
        touched = []
        for row, counted in zip(block, in_stats, strict=True):
            index, value = self.rows_index[row], self.rows_value[row]
            if len(index) == 0:
                continue
            x = _intercept(self.memory_factors[index])
            z = value - self.mean - self.memory_bias[index]
            w = _ridge(x.T @ x, x.T @ z, c.l2)
            x_new = _intercept(w[1:])
            if counted:
                x_old = _intercept(self.query_factors[row])
                old = self.query_bias[row]
                np.add.at(self.gram, index, -np.outer(x_old, x_old))
                np.add.at(self.rhs, index, -(value - old)[:, None] * x_old)
            np.add.at(self.gram, index, np.outer(x_new, x_new))
            np.add.at(self.rhs, index, (value - w[0])[:, None] * x_new)
            self.query_bias[row], self.query_factors[row] = w[0], w[1:]
            touched.append(index)
        if touched:
            ids = np.unique(np.concatenate(touched))
            gram = self.gram[ids]
            rhs = self.rhs[ids] - self.mean * gram[:, 0, :]
            w = _ridge(gram, rhs, c.l2)
            self.memory_bias[ids] = w[:, 0]
            self.memory_factors[ids] = w[:, 1:]
        num = self.gram[:, 0, 0].sum()
        if num > 0.5:
            coefficients = np.concatenate(
                [self.memory_bias[:, None], self.memory_factors], axis=1
            )
            total = self.rhs[:, 0].sum() - np.sum(coefficients * self.gram[:, 0, :])
            self.mean = np.float32(total / num)

    # ---------------------------------------------------------------- step
    def observe(
        self,
        candidates: np.ndarray,
        valid: np.ndarray,
        values: np.ndarray,
        anchors: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray]:
        """One query: refit, fold in, complete, store. Returns (scores, completed)."""
        c = self.config
        usable = valid & (self.insert_time[candidates] <= self.count)
        observed = anchors & usable
        if c.solver == "als":
            flat = self._flat_history()
            if flat is not None and len(flat[1]):
                for _ in range(c.num_sweeps):
                    self._als_sweep(flat)
        factors = self._effective()
        memories = candidates[observed]
        x = _intercept(factors[memories])
        z = values[observed] - self.mean - self.memory_bias[memories]
        w = _ridge(x.T @ x, x.T @ z, c.l2)
        completed = (
            self.mean
            + self.memory_bias[candidates]
            + w[0]
            + factors[candidates] @ w[1:]
        ).astype(np.float32)
        completed = np.where(usable, completed, 0.0)
        scores = np.where(observed, values, completed)
        scores = np.where(usable, scores, -np.inf)
        if self.count < c.capacity:
            self.query_bias[self.count] = w[0]
            self.query_factors[self.count] = w[1:]
            self.rows_index.append(memories.astype(np.int64))
            self.rows_value.append(values[observed].astype(np.float32))
            np.add.at(self.memory_count, memories, 1)
        self.count += 1
        if c.solver == "incremental" and self.count <= c.capacity:
            self._incremental_update()
        return scores, completed


def run_stream(
    config: NumpyConfig,
    candidates: np.ndarray,
    valid: np.ndarray,
    scores: np.ndarray,
    anchors: np.ndarray,
    insert_time: np.ndarray,
    seed: int = 0,
    initial_factors: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Runs one stream; returns ``(scores[T, N], completed[T, N])``.

    ``initial_factors`` (``[M, R]``) replaces the random init, e.g. with the JAX
    solver's, to compare the two paths entry by entry.
    """
    solver = NumpySolver(config, insert_time, seed, initial_factors)
    out_scores, out_completed = [], []
    for t in range(scores.shape[0]):
        s, c = solver.observe(
            candidates[t], valid[t], scores[t].astype(np.float32), anchors[t]
        )
        out_scores.append(s)
        out_completed.append(c)
    return np.stack(out_scores), np.stack(out_completed)


def run_streams(
    config: NumpyConfig,
    streams,
    anchors: np.ndarray,
    seed: int = 0,
    initial_factors: np.ndarray | None = None,
):
    """The per-stream Python loop over a batch (``streams`` with a leading S axis)."""
    candidates = np.asarray(streams.queries.candidates)
    valid = np.asarray(streams.queries.valid)
    scores = np.asarray(streams.scores, np.float32)
    insert_time = np.asarray(streams.insert_time)
    anchors = np.asarray(anchors)
    return [
        run_stream(
            config,
            candidates[s],
            valid[s],
            scores[s],
            anchors[s],
            insert_time[s],
            seed + s,
            None if initial_factors is None else initial_factors[s],
        )
        for s in range(scores.shape[0])
    ]
