r"""Search expansion (docs/design-notes.md): completions outside the pool.

The model completes any memory with history, not only the pool's candidates:

.. math:: \hat y_{m,t} = \mu + b_m + c_t + u_m \cdot v_t .

At query ``t`` a memory ``m`` outside the pool :math:`C_t` is *eligible* for
expansion when it exists (``insert_time[m] <= t``) and has history (at least one
direct score at a query ``< t``: ``memory_count[m] > 0`` in the state query
``t`` starts from). The ``E`` eligible memories with the highest completion fill
``E`` fixed expansion slots (``lax.top_k`` plus a validity mask: fixed shapes,
jit/vmap-friendly) and compete with the pool for the top ``K`` on the same
footing as the pool's unscored candidates (clipped into [0, 1], one ulp below a
direct score of equal value).

Causality: the parameters are the ones the solver used for query ``t``'s pool
(fit on queries ``< t``), and :math:`(c_t, v_t)` are folded in from query ``t``'s
own anchors only; nothing of a later query is read. ``E = 0`` leaves the solver's
outputs untouched: :func:`run_expanded` runs the very same ``select`` /
``observe`` as :func:`earm_jax.core.run.run`, with the same keys.

>>> import jax, jax.numpy as jnp
>>> import earm_jax as ej
>>> from earm_jax.contrib.expand import run_expanded
>>> cfg = ej.SolverConfig(num_memories=30, capacity=6, pool_size=8, max_budget=8,
...                       rank=2)
>>> solver = ej.online_solver(cfg, ej.paper_policy(pool_size=8))
>>> T = 6
>>> candidates = (jnp.arange(T)[:, None] * 3 + jnp.arange(8)[None, :]) % 30
>>> pool = ej.Query(candidates.astype(jnp.int32), jnp.ones((T, 8)),
...                 jnp.ones((T, 8), bool))
>>> stream = ej.Stream(pool,
...     scores=jnp.full((T, 8), 0.5), relevant=jnp.zeros((T, 8), bool),
...     insert_time=jnp.zeros(30, jnp.int32))
>>> _, infos, expansion = run_expanded(solver, jax.random.key(0), stream, 4)
>>> expansion.memories.shape, bool(expansion.valid[0].any())  # no history at t=0
((6, 4), False)
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from earm_jax.base import Observation, Query, StepInfo, Stream
from earm_jax.core.config import OnlineSolver, Parameters, SolverState
from earm_jax.core.model import fold_in, parameters, predict
from earm_jax.core.online import usable_candidates
from earm_jax.core.run import start_stream
from earm_jax.core.solvers import get_solver
from earm_jax.core.solvers.base import no_update
from earm_jax.types import Array, ArrayLike, PRNGKey

EXPANSION_SCORES = ("completion", "interaction")
"""What outside memories are ranked by (see :func:`expansion_slots`)."""


class ExpandInfo(NamedTuple):
    """The expansion slots of one query (leading ``T`` axis from
    :func:`run_expanded`).

    Attributes:
      memories: ``int32[E]`` memory rows in the slots (0 where not ``valid``).
      scores: ``float32[E]`` their ranking scores (completions, clipped into
        [0, 1] and one ulp below like the pool's), ``-inf`` where not ``valid``.
      valid: ``bool[E]`` slots holding an eligible memory (fewer than ``E``
        eligible memories leave the last slots empty).
      completed: ``float32[E]`` the unclipped completions (0 where not ``valid``).
    """

    memories: Array
    scores: Array
    valid: Array
    completed: Array


def eligible_outside(
    state: SolverState, query: Query, insert_time: ArrayLike | None = None
) -> Array:
    """``bool[M]``: memories that may take an expansion slot at this query.

    Inserted by the query (``insert_time <= state.count``), observed at least once
    before it (``state.memory_count > 0``: ``state`` is the one the query starts
    from, so its history holds queries ``< t`` only) and not a valid candidate of
    the pool.
    """
    insert_time = state.insert_time if insert_time is None else insert_time
    num_memories = state.memory_count.shape[0]
    in_pool = (
        jnp.zeros((num_memories,), bool)
        .at[query.candidates]
        .max(jnp.asarray(query.valid, bool), mode="drop")
    )
    inserted = jnp.asarray(insert_time) <= state.count
    return inserted & (state.memory_count > 0) & ~in_pool


def expansion_slots(
    params: Parameters,
    state: SolverState,
    query: Query,
    query_bias: ArrayLike,
    query_factors: ArrayLike,
    num_slots: int,
    clip: bool = True,
    min_score: ArrayLike = -jnp.inf,
    score: str = "completion",
) -> ExpandInfo:
    r"""The ``num_slots`` eligible outside memories with the highest completion.

    Args:
      params: the parameters the query's pool completion used.
      state: the state the query started from (history of queries ``< t``).
      query: the query's pool.
      query_bias, query_factors: :math:`(c_t, v_t)` folded in from its anchors.
      num_slots: ``E`` (a Python int, static); must be ``>= 0``.
      clip: clip completions into [0, 1] (as ``SolverConfig.clip_completions``).
      min_score: a memory takes a slot only if its completion is at least this
        (may be traced; ``-inf``: no gate, docs/design-notes.md as written). On a scorer
        whose answers mean "relevant" above 0.5, ``0.5`` admits only memories
        the model predicts relevant.
      score: what an outside memory is ranked by: ``"completion"`` (the full
        :math:`\hat y`, docs/design-notes.md) or ``"interaction"``
        (:math:`\mu + c_t + u_m \cdot v_t`: the memory bias left out, so a
        memory relevant to some past query does not look relevant to every
        later one).

    Returns:
      :class:`ExpandInfo` with ``E`` slots in descending score order.
    """
    if not isinstance(num_slots, int) or num_slots < 0:
        raise ValueError(f"num_slots must be an int >= 0, got {num_slots!r}")
    if score not in EXPANSION_SCORES:
        raise ValueError(f"score must be one of {EXPANSION_SCORES}, got {score!r}")
    num_memories = state.memory_count.shape[0]
    num_slots_used = min(num_slots, num_memories)
    every = jnp.arange(num_memories, dtype=jnp.int32)
    completed = predict(params, state.memory_count, every, query_bias, query_factors)
    ranked_by = completed if score == "completion" else completed - params.memory_bias
    shown = jnp.clip(ranked_by, 0.0, 1.0) if clip else ranked_by
    shown = jnp.nextafter(shown, -jnp.inf)
    eligible = eligible_outside(state, query) & (
        jnp.nextafter(shown, jnp.inf) >= min_score
    )
    ranked = jnp.where(eligible, shown, -jnp.inf)
    top_scores, top = jax.lax.top_k(ranked, num_slots_used)
    valid = jnp.isfinite(top_scores)
    memories = jnp.where(valid, top, 0).astype(jnp.int32)
    pad = num_slots - num_slots_used
    if pad:
        memories = jnp.pad(memories, (0, pad))
        top_scores = jnp.pad(top_scores, (0, pad), constant_values=-jnp.inf)
        valid = jnp.pad(valid, (0, pad))
    return ExpandInfo(
        memories=memories,
        scores=jnp.where(valid, top_scores, -jnp.inf).astype(jnp.float32),
        valid=valid,
        completed=jnp.where(valid, completed[memories], 0.0).astype(jnp.float32),
    )


def expanded_step(
    solver: OnlineSolver,
    key: PRNGKey,
    state: SolverState,
    query: Query,
    scores_row: ArrayLike,
    num_slots: int,
    min_score: ArrayLike = -jnp.inf,
    score: str = "completion",
) -> tuple[SolverState, StepInfo, ExpandInfo]:
    """``solver.step`` plus the query's expansion slots.

    The returned state and :class:`StepInfo` are exactly ``solver.step``'s. The
    parameters of the pool's completion are recovered without a second refit
    for algorithms that fit in ``refit`` (``update`` is a no-op: the new state
    holds the refit parameters); for the others ``refit`` runs on the old state
    (the incremental solver's ``refit`` is a no-op, so its parameters are the
    old state's). :math:`(c_t, v_t)` is then re-folded from the same anchors (an
    ``R + 1`` ridge solve).
    """
    config = solver.config
    algorithm = solver.algorithm or get_solver(config.solver)
    anchors = solver.select(key, state, query)
    values = jnp.asarray(scores_row, jnp.float32)
    new_state, info = solver.observe(state, query, Observation(values, anchors))
    if algorithm.update is no_update:
        params = parameters(new_state)
    else:
        params, _ = algorithm.refit(
            parameters(state), state.solver_extras, state, config
        )
    observed = info.anchors & usable_candidates(state, query)
    query_bias, query_factors = fold_in(
        params,
        state.memory_count,
        query.candidates,
        jnp.where(observed, values, 0.0),
        observed,
        config.l2,
    )
    expansion = expansion_slots(
        params,
        state,
        query,
        query_bias,
        query_factors,
        num_slots,
        clip=config.clip_completions,
        min_score=min_score,
        score=score,
    )
    return new_state, info, expansion


def run_expanded(
    solver: OnlineSolver,
    key: PRNGKey,
    stream: Stream,
    num_slots: int,
    min_score: ArrayLike = -jnp.inf,
    score: str = "completion",
) -> tuple[SolverState, StepInfo, ExpandInfo]:
    """:func:`earm_jax.core.run.run` with ``num_slots`` expansion slots per query
    (``min_score`` and ``score`` as for :func:`expansion_slots`).

    Same keys, same anchors, same state and :class:`StepInfo` as ``run``; the
    third output holds each query's :class:`ExpandInfo` (leading ``T`` axis).
    """
    state, keys = start_stream(solver, key, stream)

    def one_query(state, inputs):
        query_key, query, scores_row = inputs
        new_state, info, expansion = expanded_step(
            solver, query_key, state, query, scores_row, num_slots, min_score, score
        )
        return new_state, (info, expansion)

    final, (infos, expansions) = jax.lax.scan(
        one_query, state, (keys, stream.queries, stream.scores)
    )
    return final, infos, expansions


def expanded_ranking(
    pool_scores: ArrayLike,
    pool_eligible: ArrayLike,
    candidates: ArrayLike,
    expansion: ExpandInfo,
) -> tuple[Array, Array, Array]:
    """The pool and the expansion slots as one ranking of ``N + E`` items.

    Args:
      pool_scores: ``float32[..., N]`` the Mixed scores of the pool.
      pool_eligible: ``bool[..., N]`` usable candidates.
      candidates: ``int32[..., N]`` the pool's memory rows.
      expansion: :class:`ExpandInfo` with the same leading axes.

    Returns:
      ``(scores float32[..., N+E], eligible bool[..., N+E], memories
      int32[..., N+E])``; ties keep pool items first.
    """
    scores = jnp.concatenate(
        [jnp.asarray(pool_scores, jnp.float32), expansion.scores], axis=-1
    )
    eligible = jnp.concatenate(
        [jnp.asarray(pool_eligible, bool), expansion.valid], axis=-1
    )
    memories = jnp.concatenate(
        [jnp.asarray(candidates, jnp.int32), expansion.memories], axis=-1
    )
    return scores, eligible, memories


__all__ = [
    "EXPANSION_SCORES",
    "ExpandInfo",
    "eligible_outside",
    "expanded_ranking",
    "expanded_step",
    "expansion_slots",
    "run_expanded",
]
