"""A debug solver: the value checks that the host cannot make under ``jit``.

What is checked where:

* **Shapes, dtypes and argument types** are static, so ``select``/``observe``
  check them at trace time, under ``jit`` too
  (:class:`~earm_jax.core.config.InputValueError` /
  :class:`~earm_jax.core.config.InputTypeError` naming the field).
* **Values** (a candidate id outside ``[0, num_memories)``, a memory listed
  twice in one pool, a non-finite similarity of a valid candidate, an
  observed score that is NaN, infinite or outside [0, 1]) are checked on the
  host only when the arrays are concrete (eager calls of ``select``,
  ``observe``, ``step``, ``run`` and ``run_batch``:
  :func:`~earm_jax.core.config.check_query_values`,
  :func:`~earm_jax.core.config.check_observation_values`). Under ``jit``,
  ``scan`` or ``vmap`` they are tracers: the solver then sanitises instead of
  raising (a bad id is never anchored, a non-finite score is unobserved, a
  finite one outside [0, 1] is used as given).

:func:`checked` adds the value checks as :mod:`jax.experimental.checkify`
checks, so a traced caller gets an error naming the field and position. They
also cover what the host checks do not: an observation masked in at a padding
candidate (``query.valid`` False). Functionalise the checked functions with
``checkify.checkify`` (before or after ``jit``) and call ``err.throw()``:

>>> import jax, jax.numpy as jnp
>>> from jax.experimental import checkify
>>> import earm_jax as ej
>>> cfg = ej.SolverConfig(num_memories=20, capacity=4, pool_size=4, max_budget=4,
...                       rank=1)
>>> solver = ej.checked(ej.online_solver(cfg, ej.paper_policy(pool_size=4)))
>>> select = jax.jit(checkify.checkify(solver.select))
>>> state = solver.init(jax.random.key(0))
>>> bad = ej.Query(jnp.array([0, 1, 2, 99]), jnp.zeros(4), jnp.ones(4, bool))
>>> error, anchors = select(jax.random.key(1), state, bad)
>>> error.get()
'query.candidates[3]=99 is not a memory id in [0, num_memories=20) ...'

Under ``vmap`` over streams a failed check names the stream: as
``"stream 3: query.candidates[2]=99 ..."`` when the ``vmap`` is
:func:`~earm_jax.run_batch`'s (without ``streams_per_chunk``) or one named
``axis_name=earm_jax.core.run.STREAM_AXIS``; ``checkify.checkify`` wrapped
around a ``vmap`` otherwise reports only the first failure, whichever stream
it came from. (``vmap`` of a function already checkified reports every failed
stream as ``"at mapped index 3: ..."``.)

Without ``checkify.checkify`` the checked functions still work eagerly (a
failed check raises at once) but refuse to be staged by ``jit``. The checks
read the inputs only: on good inputs every output equals the unchecked
solver's, bit for bit.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental import checkify

from earm_jax.base import Observation, Query, StepInfo
from earm_jax.core.config import OnlineSolver, SolverState
from earm_jax.core.run import STREAM_AXIS
from earm_jax.types import Array, ArrayLike, PRNGKey


def _first(bad: Array) -> Array:
    """The position of the first True of ``bad`` (0 when there is none)."""
    return jnp.argmax(bad).astype(jnp.int32)


def _stream_index() -> Array | None:
    """The stream's index when traced inside a ``vmap`` named
    :data:`~earm_jax.core.run.STREAM_AXIS`, else ``None``."""
    try:
        return jax.lax.axis_index(STREAM_AXIS)
    except NameError:  # not under a vmap over streams
        return None


def _check(ok: Array, message: str, **values: Array) -> None:
    """``checkify.check``, the message prefixed by the stream's index under a
    ``vmap`` over streams (``checkify`` outside that ``vmap`` keeps only the
    first failure and not its index, so the index travels in the message)."""
    stream = _stream_index()
    if stream is not None:
        message = "stream {stream}: " + message
        values = {"stream": stream, **values}
    checkify.check(ok, message, **values)


def check_query_ids(query: Query, num_memories: int) -> None:
    """checkify checks: valid candidates are memory ids, each listed once, with
    finite similarity."""
    candidates = jnp.asarray(query.candidates)
    valid = jnp.asarray(query.valid, bool)
    outside = valid & ((candidates < 0) | (candidates >= num_memories))
    position = _first(outside)
    _check(
        ~jnp.any(outside),
        "query.candidates[{position}]={value} is not a memory id in "
        f"[0, num_memories={num_memories}) (mark padding with query.valid=False)",
        position=position,
        value=candidates[position],
    )
    # A repeated id: sort the usable ids (padding and ids outside the memories
    # get distinct negative keys, so they never repeat); a stable sort keeps a
    # repeat's first two positions adjacent and in pool order.
    usable = valid & ~outside
    keys = jnp.where(usable, candidates, -1 - jnp.arange(candidates.shape[-1]))
    order = jnp.argsort(keys, stable=True)
    ordered = keys[order]
    repeat = ordered[1:] == ordered[:-1]
    at = _first(repeat)
    _check(
        ~jnp.any(repeat),
        "query.candidates holds memory {value} twice (positions {first} and "
        "{second}): a pool lists each memory once",
        value=ordered[at],
        first=order[at].astype(jnp.int32),
        second=order[at + 1].astype(jnp.int32),
    )
    similarity = jnp.asarray(query.similarity)
    not_finite = valid & ~jnp.isfinite(similarity)
    position = _first(not_finite)
    _check(
        ~jnp.any(not_finite),
        "query.similarity[{position}]={value} is not finite at a valid candidate",
        position=position,
        value=similarity[position],
    )


def check_observation_scores(query: Query, observation: Observation) -> None:
    """checkify checks: observed scores are finite, in [0, 1], at valid candidates."""
    values = jnp.asarray(observation.values)
    mask = jnp.asarray(observation.mask, bool)
    bad = mask & ~((values >= 0.0) & (values <= 1.0))  # False for NaN too
    position = _first(bad)
    _check(
        ~jnp.any(bad),
        "observation.values[{position}]={value} where observation.mask is True: "
        "an observed score must be finite and in [0, 1] (leave a failed pair "
        "out of the mask)",
        position=position,
        value=values[position],
    )
    padding = mask & ~jnp.asarray(query.valid, bool)
    position = _first(padding)
    _check(
        ~jnp.any(padding),
        "observation.mask[{position}] is True where query.valid is False: a "
        "padding candidate has no score",
        position=position,
    )


def checked(solver: OnlineSolver) -> OnlineSolver:
    """``solver`` with checkify value checks in ``select``, ``observe`` and ``step``.

    Args:
      solver: any :class:`~earm_jax.core.config.OnlineSolver`.

    Returns:
      The same solver (same ``init``, ``config``, ``policy``, ``algorithm``)
      whose ``select``, ``observe`` and ``step`` first check their inputs'
      values (see the module doc); wrap them, or a driver such as
      ``functools.partial(ej.run, checked_solver)``, in
      ``checkify.checkify``.
    """
    num_memories = solver.config.num_memories

    def select(
        key: PRNGKey, state: SolverState, query: Query, side: Any = None
    ) -> Array:
        check_query_ids(query, num_memories)
        return solver.select(key, state, query, side)

    def observe(
        state: SolverState, query: Query, observation: Observation, side: Any = None
    ) -> tuple[SolverState, StepInfo]:
        check_query_ids(query, num_memories)
        check_observation_scores(query, observation)
        return solver.observe(state, query, observation, side)

    def step(
        key: PRNGKey,
        state: SolverState,
        query: Query,
        scores_row: ArrayLike,
        side: Any = None,
    ) -> tuple[SolverState, StepInfo]:
        scores_row = jnp.asarray(scores_row, jnp.float32)
        if solver.policy.num_rounds == 1:
            # As solver.step: the scorer's row is revealed at the anchors only,
            # so only the anchored scores are checked (a NaN there fails).
            anchors = select(key, state, query, side)
            return observe(state, query, Observation(scores_row, anchors), side)
        # Several rounds: the answers stored are checked; a NaN answer is a
        # failed call the policy already left out.
        check_query_ids(query, num_memories)
        new_state, info = solver.step(key, state, query, scores_row, side)
        check_observation_scores(query, Observation(scores_row, info.anchors))
        return new_state, info

    return solver._replace(select=select, observe=observe, step=step)


__all__ = ["check_observation_scores", "check_query_ids", "checked"]
