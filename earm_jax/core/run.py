"""Drivers: ``run`` scans one stream's queries, ``run_batch`` vmaps over streams."""

from __future__ import annotations

import numbers

import jax
import jax.numpy as jnp

from earm_jax.base import SideInputs, StepInfo, Stream
from earm_jax.core.config import (
    InputValueError,
    OnlineSolver,
    SolverState,
    check_query,
    check_query_values,
)
from earm_jax.types import PRNGKey


def check_stream(solver: OnlineSolver, stream: Stream, batched: bool = False) -> None:
    """Raises :class:`~earm_jax.core.config.InputValueError` naming the field
    when ``stream`` does not fit ``solver``.

    Shapes are static: this runs at trace time, before any state exists. The
    queries' values (:func:`~earm_jax.core.config.check_query_values`: ids,
    repeats, non-finite similarities) are checked when the host knows them,
    i.e. when :func:`run` / :func:`run_batch` are called outside ``jit``; the
    message names the stream and the query.
    """
    config = solver.config
    lead = 2 if batched else 1
    shape = jnp.shape(stream.scores)
    if len(shape) != lead + 1:
        raise InputValueError(
            f"stream.scores must have {lead + 1} dims "
            f"({'S, ' if batched else ''}T, N), "
            f"got shape {shape}"
        )
    num_queries = shape[lead - 1]
    if num_queries > config.capacity:
        raise InputValueError(
            f"stream has {num_queries} queries but SolverConfig.capacity="
            f"{config.capacity}: raise capacity (the history is a fixed buffer)"
        )
    if shape[-1] != config.pool_size:
        raise InputValueError(
            f"stream.scores must have pool size {config.pool_size} last, "
            f"got shape {shape}"
        )
    if jnp.shape(stream.relevant) != shape:
        raise InputValueError(
            f"stream.relevant must have shape {shape}, got {jnp.shape(stream.relevant)}"
        )
    expected_insert = shape[: lead - 1] + (config.num_memories,)
    if jnp.shape(stream.insert_time) != expected_insert:
        raise InputValueError(
            f"stream.insert_time must have shape {expected_insert}, "
            f"got {jnp.shape(stream.insert_time)}"
        )
    one_query = jax.tree.map(lambda leaf: leaf[(0,) * lead], stream.queries)
    check_query(config, jax.eval_shape(lambda: one_query), name="stream.queries[t]")
    # Values only when concrete (an eager call): under jit they are tracers,
    # and checked(solver) is the traced check.
    check_query_values(
        config, stream.queries, ("stream", "query") if batched else ("query",)
    )


def start_stream(
    solver: OnlineSolver, key: PRNGKey, stream: Stream
) -> tuple[SolverState, jax.Array]:
    """Checks one stream and starts it: the initial state and one key per query
    (split up front), as :func:`run` and the expanded run share them."""
    check_stream(solver, stream)
    init_key, scan_key = jax.random.split(key)
    num_queries = stream.scores.shape[0]
    state = solver.init(init_key, stream.insert_time)
    return state, jax.random.split(scan_key, num_queries)


def run(
    solver: OnlineSolver, key: PRNGKey, stream: Stream
) -> tuple[SolverState, StepInfo]:
    """Runs the solver causally over one stream's queries (``lax.scan``).

    Query ``t`` sees the scorer's answers only at the anchors it selects; its
    outputs never depend on queries after it. A stream that carries
    ``query_embeddings`` and ``memory_embeddings`` hands each query's
    :class:`~earm_jax.base.SideInputs` to the policy.

    Args:
      solver: from :func:`~earm_jax.online_solver`.
      key: PRNG key; split into one key per query up front.
      stream: one stream (leading ``T`` axis on queries and scores).

    Returns:
      ``(final_state, infos)`` where ``infos`` is a :class:`StepInfo` with a
      leading ``T`` axis. Jit-able end to end, e.g.
      ``jax.jit(functools.partial(run, solver))``.
    """
    state, keys = start_stream(solver, key, stream)
    if stream.query_embeddings is None or stream.memory_embeddings is None:
        embeddings = None
    else:
        embeddings = jnp.asarray(stream.query_embeddings, jnp.float32)
        memory_embeddings = jnp.asarray(stream.memory_embeddings, jnp.float32)

    def one_query(state, inputs):
        query_key, query, scores_row, embedding = inputs
        side = None
        if embedding is not None:
            side = SideInputs(embedding, memory_embeddings[query.candidates])
        return solver.step(query_key, state, query, scores_row, side)

    return jax.lax.scan(
        one_query, state, (keys, stream.queries, stream.scores, embeddings)
    )


STREAM_AXIS = "streams"
"""The name :func:`run_batch` gives its ``vmap`` over streams (and the stream
mesh's axis, :mod:`earm_jax.core.sharding`): :func:`~earm_jax.core.checked.checked`
reads the stream's index from it (``jax.lax.axis_index``) to say which stream
failed. A ``vmap`` of your own names it the same way:
``jax.vmap(f, axis_name=STREAM_AXIS)``."""


def run_batch(
    solver: OnlineSolver,
    keys: PRNGKey,
    streams: Stream,
    streams_per_chunk: int | None = None,
) -> tuple[SolverState, StepInfo]:
    """``run`` over a leading stream axis ``S`` (``vmap``); ``keys``: shape ``[S]``.

    Args:
      solver: from :func:`~earm_jax.online_solver`.
      keys: one PRNG key per stream, ``[S]``.
      streams: a :class:`~earm_jax.base.Stream` with a leading ``S`` axis.
      streams_per_chunk: ``None`` (default) runs all ``S`` streams as one
        ``vmap``. An integer ``C`` runs them in consecutive chunks of ``C``
        (a ``lax.map`` over chunks, each a ``vmap`` of ``C`` streams over all
        queries; a last chunk of ``S mod C`` runs after them), with the same
        results. On a CPU this keeps the working set of a step (the
        statistics are ~0.2 MB per stream at ``M = 1,000``, rank 8) in cache
        once ``S`` is large: on 2 cores at ``S = 1,024``, chunks of 64 ran
        7,569 stream-queries/s against 5,194 for one batch (docs/performance.md).
        Accelerators want the whole batch at once (leave it ``None``).

    Returns:
      ``(final_states, infos)``, each leaf with a leading ``S`` axis.
    """
    check_stream(solver, streams, batched=True)
    if jnp.shape(keys)[:1] != jnp.shape(streams.scores)[:1]:
        raise InputValueError(
            f"keys must have one key per stream: shape {jnp.shape(keys)} vs "
            f"{jnp.shape(streams.scores)[0]} streams"
        )
    if streams_per_chunk is not None:
        if (
            isinstance(streams_per_chunk, bool)
            or not isinstance(streams_per_chunk, numbers.Integral)
            or streams_per_chunk < 1
        ):
            raise InputValueError(
                "streams_per_chunk must be None or a positive int, "
                f"got {streams_per_chunk!r}"
            )
        streams_per_chunk = int(streams_per_chunk)  # e.g. from a NumPy integer

    num_streams = jnp.shape(streams.scores)[0]
    whole_batch = streams_per_chunk is None or streams_per_chunk >= num_streams
    # Inside a chunk the vmap's index is the position in the chunk, not the
    # stream's: leave the axis unnamed there, so a failed check names no
    # stream rather than a wrong one.
    axis_name = STREAM_AXIS if whole_batch else None

    def batch(keys, streams):
        return jax.vmap(
            lambda key, stream: run(solver, key, stream), axis_name=axis_name
        )(keys, streams)

    if whole_batch:
        return batch(keys, streams)
    num_chunks = num_streams // streams_per_chunk
    whole = num_chunks * streams_per_chunk
    chunks = jax.tree.map(
        lambda leaf: leaf[:whole].reshape(
            (num_chunks, streams_per_chunk) + leaf.shape[1:]
        ),
        (keys, streams),
    )
    outputs = jax.lax.map(lambda chunk: batch(*chunk), chunks)
    outputs = jax.tree.map(
        lambda leaf: leaf.reshape((whole,) + leaf.shape[2:]), outputs
    )
    if whole == num_streams:
        return outputs
    rest = batch(*jax.tree.map(lambda leaf: leaf[whole:], (keys, streams)))
    return jax.tree.map(lambda head, tail: jnp.concatenate([head, tail]), outputs, rest)


__all__ = ["STREAM_AXIS", "check_stream", "run", "run_batch", "start_stream"]
