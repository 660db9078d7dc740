r"""The history as a log of paid observations: storage sized by calls.

The row layout stores every query as a row of width ``max_budget`` (``K``),
whatever its budget was: ``Q * K`` slots although a query in steady state pays
for 35 of 200. The log stores each observation once, as an *entry*
``(memory id, value)``; the entries of one query are contiguous and appended in
query order, and ``query_start[s]`` / ``query_length[s]`` locate query ``s``'s.
Memory then follows the calls paid (8 bytes per entry plus 8 per query slot),
and a step reads only the entries of the queries it visits.

Capacity is static (``SolverConfig.entry_capacity`` entries, ``E``). The
buffers hold ``E + K`` entries: a query's row of ``K`` candidates is written
with one ``dynamic_update_slice`` at ``num_entries`` and only its first
``length`` entries count, so the tail needs ``K`` spare slots. A query whose
entries do not fit into ``E`` is stored with *no* entries (its slot and
parameters exist, its observations are not kept) and the solver reports them
in ``StepInfo.dropped``, as for a full query capacity ``Q``: nothing is lost
silently. ``entry_capacity >= sum of the budgets of Q queries`` guarantees no
drop (:func:`entries_needed`).

Selected by ``SolverConfig.entry_capacity > 0`` (``solver="incremental"``
only); the state's ``obs_index / obs_value / obs_mask`` rows then have width
0 and ``SolverState.history_log`` holds an :class:`EntryLog`.
:func:`rows_view` gives the row layout back (for checks, references and the
statistics' recount); :func:`log_from_rows` converts a row-layout history.

Everything here is pure and shape-static.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.types import Array, ArrayLike


class EntryLog(NamedTuple):
    """The observations of the history, one entry per paid call.

    Attributes:
      entry_memory: ``int32[E + K]`` memory id of each entry.
      entry_value: ``float32[E + K]`` its direct score.
      query_start: ``int32[Q]`` index of query slot ``s``'s first entry.
      query_length: ``int32[Q]`` how many entries query slot ``s`` holds.
      num_entries: ``int32[]`` entries stored (the next query's start).
    """

    entry_memory: Array
    entry_value: Array
    query_start: Array
    query_length: Array
    num_entries: Array


def init_log(capacity: int, entry_capacity: int, row_width: int) -> EntryLog:
    """An empty log for ``capacity`` query slots and ``entry_capacity`` entries.

    Args:
      capacity: ``Q``.
      entry_capacity: ``E``.
      row_width: ``K`` (``max_budget``): the spare tail of the buffers.
    """
    size = entry_capacity + row_width
    return EntryLog(
        entry_memory=jnp.zeros((size,), jnp.int32),
        entry_value=jnp.zeros((size,), jnp.float32),
        query_start=jnp.zeros((capacity,), jnp.int32),
        query_length=jnp.zeros((capacity,), jnp.int32),
        num_entries=jnp.zeros((), jnp.int32),
    )


def append_query(
    log: EntryLog,
    slot: ArrayLike,
    memories: ArrayLike,
    values: ArrayLike,
    mask: ArrayLike,
    row_width: int,
) -> tuple[EntryLog, Array]:
    """Stores one query's observations (a compressed row: observed first).

    Args:
      log: the log.
      slot: ``int32[]`` the query's slot (``>= Q``: nothing is stored).
      memories: ``int32[K]`` memory ids, the observed ones first.
      values: ``float32[K]`` their scores.
      mask: ``bool[K]`` which are observations (a prefix).
      row_width: ``K`` (static).

    Returns:
      ``(log, stored bool[K])``: ``stored`` is ``mask`` where the query's
      entries fit (slot and entry capacity), all ``False`` where they did not.
    """
    capacity = log.query_start.shape[0]
    entry_capacity = log.entry_memory.shape[0] - row_width
    mask = jnp.asarray(mask, bool)
    length = jnp.sum(mask.astype(jnp.int32))
    fits = (slot < capacity) & (log.num_entries + length <= entry_capacity)
    stored = mask & fits
    start = jnp.minimum(log.num_entries, entry_capacity)
    entry_memory = jax.lax.dynamic_update_slice(
        log.entry_memory, jnp.asarray(memories, jnp.int32), (start,)
    )
    entry_value = jax.lax.dynamic_update_slice(
        log.entry_value, jnp.asarray(values, jnp.float32), (start,)
    )
    stored_length = jnp.where(fits, length, 0)
    return (
        EntryLog(
            entry_memory=entry_memory,
            entry_value=entry_value,
            query_start=log.query_start.at[slot].set(start, mode="drop"),
            query_length=log.query_length.at[slot].set(stored_length, mode="drop"),
            num_entries=log.num_entries + stored_length,
        ),
        stored,
    )


def query_spans(log: EntryLog, rows: Array) -> tuple[Array, Array]:
    """``(start, length)`` of query slots ``rows`` (``int32[W]`` each).

    Read in a loop (one while loop): unrolled, or as a gather, XLA fused the
    reads into the new query's write (a dynamic slice of the dynamic update)
    and copied ``query_start [Q]`` per step, with or without an optimization
    barrier (seen in the compiled donated step; guarded by
    ``tests/core/test_entry_log.py``).
    """

    def body(k: Array, spans: tuple[Array, Array]) -> tuple[Array, Array]:
        start, length = spans
        row = rows[k]
        start = start.at[k].set(
            jax.lax.dynamic_index_in_dim(log.query_start, row, keepdims=False)
        )
        length = length.at[k].set(
            jax.lax.dynamic_index_in_dim(log.query_length, row, keepdims=False)
        )
        return start, length

    zeros = jnp.zeros(rows.shape, jnp.int32)
    return jax.lax.fori_loop(0, rows.shape[0], body, (zeros, zeros))


def gather_rows(log: EntryLog, rows: Array, width: int) -> tuple[Array, Array, Array]:
    """The entries of query slots ``rows`` as rows of ``width`` (masked).

    Returns:
      ``(index int32[W, width], value float32[W, width], mask bool[W, width])``.
    """
    start, length = query_spans(log, rows)
    return _rows_of_spans(log, start, length, width)


def rows_view(log: EntryLog, width: int) -> tuple[Array, Array, Array]:
    """The whole history in the row layout: ``[Q, width]`` index, value, mask."""
    return _rows_of_spans(log, log.query_start, log.query_length, width)


def entries(log: EntryLog, count: ArrayLike) -> tuple[Array, Array, Array, Array]:
    """Every entry with its query slot, for the queries ``< count``.

    Returns:
      ``(query int32[E + K], memory int32[E + K], value float32[E + K],
      mask bool[E + K])``; ``mask`` marks the stored entries.
    """
    size = log.entry_memory.shape[0]
    capacity = log.query_start.shape[0]
    slots = jnp.arange(capacity, dtype=jnp.int32)
    holds = (slots < count) & (log.query_length > 0)
    first = (
        jnp.full((size,), -1, jnp.int32)
        .at[jnp.where(holds, log.query_start, size)]
        .max(slots, mode="drop")
    )
    owner = jax.lax.cummax(first)  # the last query starting at or before
    query = jnp.maximum(owner, 0)
    position = jnp.arange(size, dtype=jnp.int32)
    mask = (
        (owner >= 0)
        & (position < log.query_start[query] + log.query_length[query])
        & holds[query]
    )
    return query, log.entry_memory, log.entry_value, mask


def _rows_of_spans(
    log: EntryLog, start: Array, length: Array, width: int
) -> tuple[Array, Array, Array]:
    offsets = jnp.arange(width, dtype=jnp.int32)
    positions = start[:, None] + offsets[None, :]
    mask = offsets[None, :] < length[:, None]
    positions = jnp.where(mask, positions, 0)
    return (
        jnp.where(mask, log.entry_memory[positions], 0),
        jnp.where(mask, log.entry_value[positions], 0.0),
        mask,
    )


def log_from_rows(
    index: ArrayLike, value: ArrayLike, mask: ArrayLike, entry_capacity: int
) -> EntryLog:
    """Converts a row-layout history (``[Q, K]`` rows) into a log.

    The observed entries of each row keep their order. Raises ``ValueError``
    when they do not fit ``entry_capacity`` (checked when called outside jit;
    traced, the caller must size ``entry_capacity``).
    """
    index = jnp.asarray(index, jnp.int32)
    value = jnp.asarray(value, jnp.float32)
    mask = jnp.asarray(mask, bool)
    capacity, width = index.shape
    lengths = jnp.sum(mask, axis=1).astype(jnp.int32)
    total = jnp.sum(lengths)
    if not isinstance(total, jax.core.Tracer) and int(total) > entry_capacity:
        raise ValueError(
            f"the history holds {total} observations, more than "
            f"SolverConfig.entry_capacity={entry_capacity}"
        )
    starts = jnp.cumsum(lengths) - lengths
    order = jnp.argsort(~mask, axis=1, stable=True)
    compressed_index = jnp.take_along_axis(index, order, axis=1)
    compressed_value = jnp.take_along_axis(value, order, axis=1)
    compressed_mask = jnp.take_along_axis(mask, order, axis=1)
    positions = starts[:, None] + jnp.arange(width)[None, :]
    positions = jnp.where(compressed_mask, positions, entry_capacity + width)
    log = init_log(capacity, entry_capacity, width)
    return log._replace(
        entry_memory=log.entry_memory.at[positions].set(compressed_index, mode="drop"),
        entry_value=log.entry_value.at[positions].set(compressed_value, mode="drop"),
        query_start=starts.astype(jnp.int32),
        query_length=lengths,
        num_entries=total.astype(jnp.int32),
    )


def entries_needed(
    budget: Callable[[Array], ArrayLike], capacity: int, max_budget: int
) -> int:
    """Entries that ``capacity`` queries need at most under a budget schedule.

    ``budget`` maps a query index to its budget (e.g. ``policy.budget``; the
    solver clips it into ``[0, max_budget]``); the sum over queries
    ``0 .. capacity - 1`` is an ``entry_capacity`` that never drops.

    >>> import earm_jax as ej
    >>> entries_needed(ej.paper_policy(pool_size=200).budget, 100, 200)
    5800
    """
    budgets = jax.vmap(budget)(jnp.arange(capacity, dtype=jnp.int32))
    return int(jnp.sum(jnp.clip(jnp.asarray(budgets, jnp.int32), 0, max_budget)))


__all__ = [
    "EntryLog",
    "append_query",
    "entries",
    "entries_needed",
    "gather_rows",
    "init_log",
    "log_from_rows",
    "query_spans",
    "rows_view",
]
