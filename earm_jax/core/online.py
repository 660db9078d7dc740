r"""The causal online completion solver (docs/method.md): select, observe, step.

The model of the experience matrix is

.. math:: \hat y_{m,t} = \mu + b_m + c_t + u_m \cdot v_t,

with loss :math:`\sum_{observed} (y - \hat y)^2 + \lambda(\|b\|^2 + \|c\|^2 +
\|U\|^2 + \|V\|^2)`. At query ``t`` the shared parameters (:math:`\mu, b, U`)
and the past queries' (:math:`c_s, v_s`, ``s < t``) are refit on the history of
queries ``< t`` (warm-started), the new query's :math:`(c_t, v_t)` are folded in
from its own anchors alone (an exact ridge solve of size ``r + 1``), the
completion of every candidate follows, and only then do the anchors join the
history. Nothing about query ``t`` reads anything of a later query.

The solver is a NamedTuple of pure functions (optax / blackjax style):

>>> import jax, jax.numpy as jnp
>>> import earm_jax as ej
>>> cfg = ej.SolverConfig(num_memories=50, capacity=4, pool_size=8, max_budget=8,
...                       rank=2)
>>> solver = ej.online_solver(cfg, ej.paper_policy(pool_size=8))
>>> state = solver.init(jax.random.key(0))
>>> query = ej.Query(jnp.arange(8, dtype=jnp.int32), jnp.linspace(1, 0, 8),
...                  jnp.ones(8, bool))
>>> anchors = solver.select(jax.random.key(1), state, query)
>>> int(anchors.sum())  # the first block scores the whole pool
8
>>> state, info = solver.observe(state, query, ej.Observation(
...     jnp.full(8, 0.5), anchors))
>>> int(state.count)
1
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from earm_jax.base import (
    Observation,
    Policy,
    Query,
    QueryContext,
    SideInputs,
    StepInfo,
)
from earm_jax.core import entry_log
from earm_jax.core.config import (
    InputTypeError,
    InputValueError,
    OnlineSolver,
    Parameters,
    SolverConfig,
    SolverState,
    check_key,
    check_observation,
    check_observation_values,
    check_policy,
    check_query,
    check_query_values,
    check_state,
    validate_config,
)
from earm_jax.core.model import (
    fold_in,
    mixed_scores,
    parameters,
    predict,
)
from earm_jax.core.prefix import running_count
from earm_jax.core.rounds import traced_rounds
from earm_jax.core.solvers import SolverAlgorithm, get_solver
from earm_jax.types import Array, ArrayLike, PRNGKey


def usable_candidates(state: SolverState, query: Query) -> Array:
    """``bool[N]``: valid candidates whose memory exists at this query."""
    inserted = state.insert_time[query.candidates] <= state.count
    in_range = (query.candidates >= 0) & (query.candidates < state.insert_time.shape[0])
    return jnp.asarray(query.valid) & inserted & in_range


def observed_first(observed: ArrayLike) -> Array:
    """``int32[N]``: the positions of ``observed`` first, then the others.

    Both groups in index order: ``argsort(~observed, stable=True)``, from a
    running count and one scatter instead of a sort (a sort of ``[S, N]``
    per step cost 4% of the batched step on CPU).
    """
    observed = jnp.asarray(observed, bool)
    observed_so_far = running_count(observed)
    num_observed = observed_so_far[-1]
    items = jnp.arange(observed.shape[-1], dtype=jnp.int32)
    position = jnp.where(
        observed,
        observed_so_far - 1,
        num_observed + (items + 1 - observed_so_far) - 1,
    )
    return jnp.zeros_like(items).at[position].set(items, unique_indices=True)


FoldIn = Callable[..., tuple[Array, Array, Array]]
"""``(params, memory_count, query, values, observed, usable, l2) ->
(query_bias, query_factors, completed)``: the new query's parameters from its
own anchors, and the completion of its pool (``float32[N]``)."""


def paper_fold_in(
    params: Parameters,
    memory_count: ArrayLike,
    query: Query,
    values: ArrayLike,
    observed: ArrayLike,
    usable: ArrayLike,
    l2: float,
) -> tuple[Array, Array, Array]:
    """The paper's fold-in (:func:`~earm_jax.core.model.fold_in`, a ridge solve
    of size ``R + 1`` on the query's anchors) and the completion it gives."""
    query_bias, query_factors = fold_in(
        params, memory_count, query.candidates, values, observed, l2
    )
    completed = predict(
        params, memory_count, query.candidates, query_bias, query_factors
    )
    return query_bias, query_factors, completed


def with_algorithm(config: SolverConfig, algorithm: SolverAlgorithm) -> SolverConfig:
    """``config`` with ``algorithm``'s name and bound hyperparameters written in."""
    if not isinstance(algorithm, SolverAlgorithm):
        raise InputTypeError(
            "algorithm must be an earm_jax.core.SolverAlgorithm (e.g. "
            f"earm_jax.als()), got {type(algorithm).__name__}"
        )
    return config._replace(solver=algorithm.name, **dict(algorithm.hyperparameters))


def online_solver(
    config: SolverConfig,
    policy: Policy,
    algorithm: SolverAlgorithm | None = None,
    *,
    fold_in: FoldIn = paper_fold_in,
) -> OnlineSolver:
    """Builds the causal online solver for ``config`` and ``policy``.

    Args:
      config: shapes and hyperparameters; validated here
        (:class:`~earm_jax.core.config.InputValueError` naming the field).
      policy: budget schedule and anchor sampler (e.g. :func:`paper_policy`).
      algorithm: ``None`` (default): the algorithm registered under
        ``config.solver``, reading its hyperparameters from ``config``. Or an
        algorithm from a factory (:func:`~earm_jax.core.algorithms.als`,
        ``incremental``, ``gradient``): its name and bound hyperparameters
        replace those fields of ``config`` (the returned solver's ``config``
        reports them). :func:`~earm_jax.core.compose.compose_solver` builds
        the config from smaller parts.
      fold_in: how the new query is folded in from its anchors and its pool
        completed (a :data:`FoldIn`); the paper's by default. A measured
        variant lives in :mod:`earm_jax.contrib.similarity_covariate`.

    Returns:
      An :class:`OnlineSolver` of pure, jit-able functions. Nothing is jitted
      here: jit at the outermost scope (e.g. ``jax.jit(solver.step)`` or
      ``jax.jit(functools.partial(ej.run, solver))``).
    """
    if algorithm is not None:
        config = with_algorithm(config, algorithm)
    validate_config(config)
    if algorithm is None:
        algorithm = get_solver(config.solver)
    check_policy(config, policy)
    num_memories, capacity = config.num_memories, config.capacity
    max_budget, rank = config.max_budget, config.rank
    # The log layout keeps no rows: width 0 (entry_log holds the history).
    uses_log = config.entry_capacity > 0
    row_width = 0 if uses_log else max_budget

    def init(key: PRNGKey, insert_time: ArrayLike | None = None) -> SolverState:
        if insert_time is None:
            insert_time = jnp.zeros((num_memories,), jnp.int32)
        if jnp.shape(insert_time) != (num_memories,):
            raise InputValueError(
                f"insert_time must have shape ({num_memories},), "
                f"got {jnp.shape(insert_time)}"
            )
        if not jnp.issubdtype(jnp.result_type(insert_time), jnp.integer):
            raise InputValueError(
                f"insert_time must be integer, got {jnp.result_type(insert_time)}"
            )
        params = Parameters(
            global_mean=jnp.zeros((), jnp.float32),
            memory_bias=jnp.zeros((num_memories,), jnp.float32),
            memory_factors=config.init_scale
            * jax.random.normal(key, (num_memories, rank), jnp.float32),
            query_bias=jnp.zeros((capacity,), jnp.float32),
            query_factors=jnp.zeros((capacity, rank), jnp.float32),
        )
        extras = algorithm.init_extras(config, params)
        return SolverState(
            *params,
            insert_time=jnp.asarray(insert_time, jnp.int32),
            obs_index=jnp.zeros((capacity, row_width), jnp.int32),
            obs_value=jnp.zeros((capacity, row_width), jnp.float32),
            obs_mask=jnp.zeros((capacity, row_width), bool),
            memory_count=jnp.zeros((num_memories,), jnp.int32),
            count=jnp.zeros((), jnp.int32),
            solver_extras=extras,
            history_log=(
                entry_log.init_log(capacity, config.entry_capacity, max_budget)
                if uses_log
                else ()
            ),
            # The factors keep the whole key (as before policies carried
            # anything); the policy's carry starts from a key of its own.
            policy_state=policy.init(jax.random.fold_in(key, 1)),
        )

    def context_of(
        state: SolverState, query: Query, side: SideInputs | None
    ) -> QueryContext:
        return QueryContext(
            usable=usable_candidates(state, query),
            count=state.count,
            room=jnp.asarray(max_budget, jnp.int32),
            memory_bias=state.memory_bias[query.candidates],
            side=side,
        )

    def checked_begin(
        key: PRNGKey,
        state: SolverState,
        query: Query,
        side: SideInputs | None,
        function: str,
    ) -> Any:
        check_key(key, function)
        check_state(state, function)
        check_query(config, query)
        check_query_values(config, query)
        return policy.begin(
            key, state.policy_state, query, context_of(state, query, side)
        )

    def begin(
        key: PRNGKey, state: SolverState, query: Query, side: SideInputs | None = None
    ) -> Any:
        return checked_begin(key, state, query, side, "begin")

    def select(
        key: PRNGKey, state: SolverState, query: Query, side: SideInputs | None = None
    ) -> Array:
        progress = checked_begin(key, state, query, side, "select")
        return jnp.asarray(policy.select(state.policy_state, progress), bool)

    def refit(state: SolverState) -> tuple[Parameters, Any]:
        return algorithm.refit(parameters(state), state.solver_extras, state, config)

    def store(
        state: SolverState, query: Query, observation: Observation, decision: Any
    ) -> tuple[SolverState, StepInfo]:
        usable = usable_candidates(state, query)
        values = jnp.asarray(observation.values, jnp.float32)
        offered = jnp.asarray(observation.mask, bool)
        observed = offered & usable & jnp.isfinite(values)
        values = jnp.where(observed, values, 0.0)

        # 1. Refit on queries < t (the history does not hold row t yet).
        params, extras = refit(state)
        # 2. Fold in query t from its anchors alone; complete its pool.
        query_bias, query_factors, completed = fold_in(
            params, state.memory_count, query, values, observed, usable, config.l2
        )
        completed = jnp.where(usable, completed, 0.0)
        shown = jnp.clip(completed, 0.0, 1.0) if config.clip_completions else completed
        # One ulp below: at equal value the direct score outranks the completion.
        shown = jnp.nextafter(shown, -jnp.inf)
        scores = mixed_scores(shown, values, observed, usable)

        # 3. The anchors join the history (compressed to a row of width K; in
        # the log layout, its observed prefix becomes the query's entries).
        order = observed_first(observed)[:max_budget]
        row_mask = observed[order]
        has_room = state.count < capacity
        slot = state.count
        if uses_log:
            history_log, stored = entry_log.append_query(
                state.history_log,
                slot,
                query.candidates[order],
                values[order],
                row_mask,
                max_budget,
            )
            obs_index, obs_value, obs_mask = (
                state.obs_index,
                state.obs_value,
                state.obs_mask,
            )  # width 0: nothing to write
        else:
            history_log = state.history_log
            stored = row_mask & has_room
            obs_index = state.obs_index.at[slot].set(
                query.candidates[order], mode="drop"
            )
            obs_value = state.obs_value.at[slot].set(values[order], mode="drop")
            obs_mask = state.obs_mask.at[slot].set(stored, mode="drop")
        new_state = SolverState(
            global_mean=params.global_mean,
            memory_bias=params.memory_bias,
            memory_factors=params.memory_factors,
            query_bias=params.query_bias.at[slot].set(query_bias, mode="drop"),
            query_factors=params.query_factors.at[slot].set(query_factors, mode="drop"),
            insert_time=state.insert_time,
            obs_index=obs_index,
            obs_value=obs_value,
            obs_mask=obs_mask,
            memory_count=state.memory_count.at[query.candidates[order]].add(
                stored.astype(jnp.int32)
            ),
            count=state.count + 1,
            solver_extras=extras,
            history_log=history_log,
        )
        # 4. The algorithm's own work once the row exists (e.g. an incremental
        # sweep); nothing for algorithms that fit in ``refit``.
        new_state = algorithm.update(new_state, config)
        dropped = jnp.sum(offered & usable) - jnp.sum(stored)
        info = StepInfo(
            scores=scores,
            completed=completed,
            anchors=observed,
            budget=jnp.asarray(decision.limit, jnp.int32),
            dropped=dropped.astype(jnp.int32),
            calls=jnp.asarray(decision.calls, jnp.int32),
            rounds=jnp.asarray(decision.rounds, jnp.int32),
        )
        if decision.scores is not None:
            info = info._replace(scores=decision.scores)
        return new_state, info

    def finish(
        state: SolverState, query: Query, progress: Any, answers: ArrayLike
    ) -> tuple[SolverState, StepInfo]:
        check_state(state, "finish")
        answers = jnp.asarray(answers, jnp.float32)
        policy_state, decision = policy.finish(state.policy_state, progress)
        new_state, info = store(
            state, query, Observation(answers, decision.anchors), decision
        )
        return new_state._replace(policy_state=policy_state), info

    def observe(
        state: SolverState,
        query: Query,
        observation: Observation,
        side: SideInputs | None = None,
    ) -> tuple[SolverState, StepInfo]:
        check_state(state, "observe")
        check_query(config, query)
        check_observation(config, observation)
        check_query_values(config, query)
        check_observation_values(observation)
        # The observations as the query's one round: the policy's begin key
        # only draws what it would select, which is not asked here.
        progress = policy.begin(
            jax.random.key(0),
            state.policy_state,
            query,
            context_of(state, query, side),
        )
        offered = jnp.asarray(observation.mask, bool)
        progress = policy.observe(state.policy_state, progress, offered, observation)
        return finish(state, query, progress, observation.values)

    def step(
        key: PRNGKey,
        state: SolverState,
        query: Query,
        scores_row: ArrayLike,
        side: SideInputs | None = None,
    ) -> tuple[SolverState, StepInfo]:
        check_key(key, "step")
        check_state(state, "step")
        check_query(config, query)
        check_query_values(config, query)
        answers = jnp.asarray(scores_row, jnp.float32)
        context = context_of(state, query, side)
        policy_state, decision = traced_rounds(
            policy, key, state.policy_state, query, context, answers
        )
        new_state, info = store(
            state, query, Observation(answers, decision.anchors), decision
        )
        return new_state._replace(policy_state=policy_state), info

    return OnlineSolver(
        init, select, observe, step, config, policy, algorithm, begin, finish
    )


__all__ = [
    "FoldIn",
    "observed_first",
    "online_solver",
    "paper_fold_in",
    "usable_candidates",
    "with_algorithm",
]
