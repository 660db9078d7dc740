r"""The causal online completion solver (DESIGN §2.6).

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
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

from earm_jax import _linalg, incremental
from earm_jax.base import Observation, Policy, Query, StepInfo
from earm_jax.policies.rerank import mixed_scores
from earm_jax.types import Array, ArrayLike, PRNGKey

SOLVERS = ("als", "gradient", "incremental")


class SolverConfig(NamedTuple):
    """Static configuration: shapes and hyperparameters (closed over, never traced).

    Attributes:
      num_memories: ``M``, rows of the experience matrix.
      capacity: ``Q``, how many queries the history holds.
      pool_size: ``N``, candidates per query.
      max_budget: ``K``, the most anchors one query may store (``<= pool_size``).
      rank: ``R``, latent dimension; 0 gives the bias-only model.
      l2: ridge penalty :math:`\\lambda` on biases and factors (paper: 0.1).
      solver: ``"als"`` (alternating closed-form ridge solves), ``"gradient"``
        (optax Adam steps on the same masked loss) or ``"incremental"`` (the
        same block solves over a bounded block per query, from per-memory
        sufficient statistics: constant cost per query, see
        :mod:`earm_jax.incremental`).
      num_sweeps: ALS sweeps per query (warm-started), an upper bound when
        ``tolerance > 0``.
      tolerance: stop the ALS sweeps early once the relative decrease of the
        loss is below this (0 = always ``num_sweeps``).
      num_steps: gradient steps per query for ``solver="gradient"``.
      learning_rate: Adam step size for ``solver="gradient"``.
      init_scale: standard deviation of the random initial memory factors.
      refresh_rows: for ``solver="incremental"``, earlier history rows re-solved
        (round robin) per query besides the new one.
      clip_completions: clip completions into the scorer's range [0, 1] in the
        mixed scores, so no prediction outranks a direct score of 1 (direct
        scores are authoritative; at equal value the direct score ranks first).
        ``StepInfo.completed`` stays unclipped.
    """

    num_memories: int
    capacity: int
    pool_size: int
    max_budget: int
    rank: int = 8
    l2: float = 0.1
    solver: str = "als"
    num_sweeps: int = 5
    tolerance: float = 0.0
    num_steps: int = 20
    learning_rate: float = 0.05
    init_scale: float = 0.1
    refresh_rows: int = 8
    clip_completions: bool = True


class SolverState(NamedTuple):
    """Everything carried from one query to the next (fixed shapes for a stream).

    Attributes:
      global_mean: ``float32[]`` :math:`\\mu`.
      memory_bias: ``float32[M]`` :math:`b_m`.
      memory_factors: ``float32[M, R]`` :math:`u_m` (used only once a memory has
        an observation in the history; until then it is the random init).
      query_bias: ``float32[Q]`` :math:`c_t` per query slot.
      query_factors: ``float32[Q, R]`` :math:`v_t` per query slot.
      insert_time: ``int32[M]`` first query index at which each memory exists.
      obs_index: ``int32[Q, K]`` memory ids observed at each past query.
      obs_value: ``float32[Q, K]`` their direct scores.
      obs_mask: ``bool[Q, K]`` which entries of a row hold an observation.
      memory_count: ``int32[M]`` observations of each memory in the history.
      count: ``int32[]`` queries seen so far (the next query's index).
      solver_extras: solver-specific carry (the optax state for ``"gradient"``;
        :class:`~earm_jax.incremental.IncrementalStats` for ``"incremental"``;
        ``()`` for ``"als"``).
    """

    global_mean: Array
    memory_bias: Array
    memory_factors: Array
    query_bias: Array
    query_factors: Array
    insert_time: Array
    obs_index: Array
    obs_value: Array
    obs_mask: Array
    memory_count: Array
    count: Array
    solver_extras: Any = ()


class Parameters(NamedTuple):
    """The model's parameters (a view of the state), as one pytree."""

    global_mean: Array
    memory_bias: Array
    memory_factors: Array
    query_bias: Array
    query_factors: Array


class OnlineSolver(NamedTuple):
    """The solver's pure functions; build it with :func:`online_solver`.

    Attributes:
      init: ``(key, insert_time=None) -> SolverState``.
      select: ``(key, state, query) -> bool[N]`` anchors to score; runs before any
        score of this query exists.
      observe: ``(state, query, observation) -> (state, StepInfo)``; refits on the
        history, folds the query in, completes, then stores the observations.
      step: ``(key, state, query, scores_row) -> (state, StepInfo)``: ``select``
        then ``observe`` with the scorer's answers revealed at the anchors only.
      config: the :class:`SolverConfig`.
      policy: the :class:`~earm_jax.base.Policy`.
    """

    init: Callable[..., SolverState]
    select: Callable[[PRNGKey, SolverState, Query], Array]
    observe: Callable[[SolverState, Query, Observation], tuple[SolverState, StepInfo]]
    step: Callable[
        [PRNGKey, SolverState, Query, ArrayLike], tuple[SolverState, StepInfo]
    ]
    config: SolverConfig
    policy: Policy


def validate_config(config: SolverConfig) -> None:
    """Raises ``ValueError`` naming the first bad field of ``config``."""
    for name in ("num_memories", "capacity", "pool_size", "max_budget"):
        value = getattr(config, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(
                f"SolverConfig.{name} must be a positive int, got {value!r}"
            )
    if not isinstance(config.rank, int) or config.rank < 0:
        raise ValueError(f"SolverConfig.rank must be an int >= 0, got {config.rank!r}")
    if config.max_budget > config.pool_size:
        raise ValueError(
            f"SolverConfig.max_budget={config.max_budget} exceeds "
            f"pool_size={config.pool_size}: a row can never hold more anchors than "
            "the pool has candidates"
        )
    if not config.l2 > 0:
        raise ValueError(f"SolverConfig.l2 must be > 0, got {config.l2!r}")
    if config.solver not in SOLVERS:
        raise ValueError(
            f"SolverConfig.solver must be one of {SOLVERS}, got {config.solver!r}"
        )
    for name in ("num_sweeps", "num_steps", "refresh_rows"):
        value = getattr(config, name)
        if not isinstance(value, int) or value < 0:
            raise ValueError(f"SolverConfig.{name} must be an int >= 0, got {value!r}")
    if config.tolerance < 0:
        raise ValueError(
            f"SolverConfig.tolerance must be >= 0, got {config.tolerance!r}"
        )
    if not config.learning_rate > 0:
        raise ValueError(
            f"SolverConfig.learning_rate must be > 0, got {config.learning_rate!r}"
        )


def check_query(config: SolverConfig, query: Query, name: str = "query") -> None:
    """Raises ``ValueError`` naming the field when ``query`` has the wrong shape/dtype.

    Shapes and dtypes are static, so this works at trace time under ``jit``.
    """
    expected = {
        "candidates": ((config.pool_size,), jnp.integer),
        "similarity": ((config.pool_size,), jnp.floating),
        "valid": ((config.pool_size,), jnp.bool_),
    }
    _check_fields(query, expected, name)


def check_observation(config: SolverConfig, observation: Observation) -> None:
    """Raises ``ValueError`` naming the field when ``observation`` is malformed."""
    expected = {
        "values": ((config.pool_size,), jnp.floating),
        "mask": ((config.pool_size,), jnp.bool_),
    }
    _check_fields(observation, expected, "observation")


def _kind_name(kind) -> str:
    return "bool" if kind is jnp.bool_ else kind.__name__


def _check_fields(value: Any, expected: dict, name: str) -> None:
    if not isinstance(value, tuple) or not hasattr(value, "_fields"):
        raise ValueError(
            f"{name} must be a {type(value).__name__} NamedTuple, got {value!r}"
        )
    for field, (shape, kind) in expected.items():
        leaf = getattr(value, field)
        leaf_shape = jnp.shape(leaf)
        leaf_dtype = jnp.result_type(leaf)
        if leaf_shape != shape:
            raise ValueError(
                f"{name}.{field} must have shape {shape}, got {leaf_shape}"
            )
        if not jnp.issubdtype(leaf_dtype, kind):
            raise ValueError(
                f"{name}.{field} must have a {_kind_name(kind)} dtype, got {leaf_dtype}"
            )


# --------------------------------------------------------------------------- model


def parameters(state: SolverState) -> Parameters:
    """The model parameters held in ``state``."""
    return Parameters(
        state.global_mean,
        state.memory_bias,
        state.memory_factors,
        state.query_bias,
        state.query_factors,
    )


def effective_memory_factors(
    memory_factors: ArrayLike, memory_count: ArrayLike
) -> Array:
    """Factors of memories with history; zero for memories never observed.

    A memory without observations has no evidence for its factors, so its
    prediction is the bias-only one (:math:`\\mu + c_t`); the random init stays
    in the state only to break the symmetry of the first ALS sweep.
    """
    return jnp.where(jnp.asarray(memory_count)[:, None] > 0, memory_factors, 0.0)


def history_rows(state: SolverState) -> Array:
    """``bool[Q]``: slots that hold a past query (``< count``)."""
    return jnp.arange(state.obs_mask.shape[0]) < state.count


def _history_without_mean(params: Parameters, state: SolverState) -> Array:
    """``float32[Q, K]``: :math:`b_m + c_s + u_m \\cdot v_s` at every history entry."""
    factors = effective_memory_factors(params.memory_factors, state.memory_count)
    index = state.obs_index
    return (
        params.memory_bias[index]
        + params.query_bias[:, None]
        + jnp.einsum(
            "qkr,qr->qk",
            factors[index],
            params.query_factors,
            precision=jax.lax.Precision.HIGHEST,
        )
    )


def loss(params: Parameters, state: SolverState, l2: float) -> Array:
    r"""The regularised squared loss on the history of queries ``< state.count``.

    Regularisation counts the parameters the history determines: biases and
    factors of memories with observations, and of past query slots.
    """
    rows = history_rows(state)
    mask = state.obs_mask & rows[:, None]
    seen = state.memory_count > 0
    factors = effective_memory_factors(params.memory_factors, state.memory_count)
    prediction = params.global_mean + _history_without_mean(params, state)
    residual = jnp.where(mask, state.obs_value - prediction, 0.0)
    penalty = (
        jnp.sum(jnp.where(seen, params.memory_bias, 0.0) ** 2)
        + jnp.sum(factors**2)
        + jnp.sum(jnp.where(rows, params.query_bias, 0.0) ** 2)
        + jnp.sum(jnp.where(rows[:, None], params.query_factors, 0.0) ** 2)
    )
    return jnp.sum(residual**2) + l2 * penalty


def predict(
    params: Parameters,
    memory_count: ArrayLike,
    memories: ArrayLike,
    query_bias: ArrayLike,
    query_factors: ArrayLike,
) -> Array:
    """:math:`\\hat y = \\mu + b_m + c + u_m \\cdot v` for memory ids ``memories``."""
    factors = effective_memory_factors(params.memory_factors, memory_count)
    memories = jnp.asarray(memories)
    return (
        params.global_mean
        + params.memory_bias[memories]
        + query_bias
        + jnp.dot(factors[memories], query_factors, precision=jax.lax.Precision.HIGHEST)
    )


def fold_in(
    params: Parameters,
    memory_count: ArrayLike,
    memories: ArrayLike,
    values: ArrayLike,
    mask: ArrayLike,
    l2: float,
) -> tuple[Array, Array]:
    r"""The new query's :math:`(c_t, v_t)` from its own anchors, all else fixed.

    Solves :math:`\min_{c, v} \sum_{k} m_k (y_k - \mu - b_{m_k} - c - u_{m_k}\cdot v)^2
    + \lambda (c^2 + \|v\|^2)`, a ridge problem of size ``R + 1``. With no
    anchors the answer is the prior ``(0, 0)``.

    Returns:
      ``(query_bias float32[], query_factors float32[R])``.
    """
    factors = effective_memory_factors(params.memory_factors, memory_count)
    memories = jnp.asarray(memories)
    features = _linalg.with_intercept(factors[memories])
    targets = jnp.asarray(values) - params.global_mean - params.memory_bias[memories]
    gram, rhs = _linalg.normal_equations(features, targets, mask)
    solution = _linalg.ridge_solve(gram, rhs, l2)
    return solution[0], solution[1:]


# ------------------------------------------------------------------- ALS blocks


def _solve_queries(params: Parameters, state: SolverState, l2: float) -> Parameters:
    """Exact block update of every past query's (c, v); other slots stay 0."""
    rows = history_rows(state)
    mask = state.obs_mask & rows[:, None]
    factors = effective_memory_factors(params.memory_factors, state.memory_count)
    index = state.obs_index
    features = _linalg.with_intercept(factors[index])  # [Q, K, R+1]
    targets = state.obs_value - params.global_mean - params.memory_bias[index]
    gram, rhs = _linalg.normal_equations(features, targets, mask)
    solution = _linalg.ridge_solve(gram, rhs, l2)
    solution = jnp.where(rows[:, None], solution, 0.0)
    return params._replace(query_bias=solution[:, 0], query_factors=solution[:, 1:])


def _solve_memories(params: Parameters, state: SolverState, l2: float) -> Parameters:
    """Exact block update of (b, u) of every memory with observations."""
    rows = history_rows(state)
    mask = (state.obs_mask & rows[:, None]).reshape(-1)
    index = state.obs_index.reshape(-1)
    query_features = _linalg.with_intercept(params.query_factors)  # [Q, R+1]
    num_per_row = state.obs_index.shape[1]
    features = jnp.repeat(query_features, num_per_row, axis=0)
    targets = (
        state.obs_value - params.global_mean - params.query_bias[:, None]
    ).reshape(-1)
    gram, rhs = _linalg.segment_normal_equations(
        features, targets, mask, index, params.memory_bias.shape[0]
    )
    solution = _linalg.ridge_solve(gram, rhs, l2)
    seen = state.memory_count > 0
    return params._replace(
        memory_bias=jnp.where(seen, solution[:, 0], params.memory_bias),
        memory_factors=jnp.where(seen[:, None], solution[:, 1:], params.memory_factors),
    )


def _solve_mean(params: Parameters, state: SolverState) -> Parameters:
    """Exact update of the (unpenalised) global mean; kept when there is no data."""
    rows = history_rows(state)
    mask = state.obs_mask & rows[:, None]
    rest = _history_without_mean(params, state)
    total = jnp.sum(jnp.where(mask, state.obs_value - rest, 0.0))
    num = jnp.sum(mask)
    mean = jnp.where(num > 0, total / jnp.maximum(num, 1), params.global_mean)
    return params._replace(global_mean=mean)


def als_sweep(params: Parameters, state: SolverState, l2: float) -> Parameters:
    """One ALS sweep: past queries, then memories, then the mean (each exact)."""
    params = _solve_queries(params, state, l2)
    params = _solve_memories(params, state, l2)
    return _solve_mean(params, state)


def _refit_als(
    params: Parameters, state: SolverState, config: SolverConfig
) -> Parameters:
    if config.tolerance <= 0:
        return jax.lax.fori_loop(
            0, config.num_sweeps, lambda _, p: als_sweep(p, state, config.l2), params
        )

    def cond(carry):
        sweep, _, previous, current = carry
        improving = (previous - current) > config.tolerance * jnp.maximum(
            current, 1e-12
        )
        return (sweep < config.num_sweeps) & ((sweep == 0) | improving)

    def body(carry):
        sweep, p, _, current = carry
        p = als_sweep(p, state, config.l2)
        return sweep + 1, p, current, loss(p, state, config.l2)

    start = loss(params, state, config.l2)
    _, params, _, _ = jax.lax.while_loop(cond, body, (0, params, jnp.inf, start))
    return params


def _refit_gradient(
    params: Parameters,
    opt_state: Any,
    state: SolverState,
    config: SolverConfig,
    optimizer: optax.GradientTransformation,
) -> tuple[Parameters, Any]:
    grad_fn = jax.grad(loss)

    def one_step(_, carry):
        p, o = carry
        grads = grad_fn(p, state, config.l2)
        updates, o = optimizer.update(grads, o, p)
        return optax.apply_updates(p, updates), o

    return jax.lax.fori_loop(0, config.num_steps, one_step, (params, opt_state))


# -------------------------------------------------------------------- the solver


def usable_candidates(state: SolverState, query: Query) -> Array:
    """``bool[N]``: valid candidates whose memory exists at this query."""
    inserted = state.insert_time[query.candidates] <= state.count
    in_range = (query.candidates >= 0) & (query.candidates < state.insert_time.shape[0])
    return jnp.asarray(query.valid) & inserted & in_range


def online_solver(config: SolverConfig, policy: Policy) -> OnlineSolver:
    """Builds the causal online solver for ``config`` and ``policy``.

    Args:
      config: shapes and hyperparameters; validated here (``ValueError`` naming
        the field).
      policy: budget schedule and anchor sampler (e.g. :func:`paper_policy`).

    Returns:
      An :class:`OnlineSolver` of pure, jit-able functions. Nothing is jitted
      here: jit at the outermost scope (e.g. ``jax.jit(solver.step)`` or
      ``jax.jit(functools.partial(ej.run, solver))``).
    """
    validate_config(config)
    if not isinstance(policy, Policy):
        raise ValueError(
            f"policy must be an earm_jax.Policy, got {type(policy).__name__}"
        )
    num_memories, capacity = config.num_memories, config.capacity
    max_budget, rank = config.max_budget, config.rank
    optimizer = optax.adam(config.learning_rate)

    def init(key: PRNGKey, insert_time: ArrayLike | None = None) -> SolverState:
        if insert_time is None:
            insert_time = jnp.zeros((num_memories,), jnp.int32)
        if jnp.shape(insert_time) != (num_memories,):
            raise ValueError(
                f"insert_time must have shape ({num_memories},), "
                f"got {jnp.shape(insert_time)}"
            )
        if not jnp.issubdtype(jnp.result_type(insert_time), jnp.integer):
            raise ValueError(
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
        extras = optimizer.init(params) if config.solver == "gradient" else ()
        if config.solver == "incremental":
            extras = incremental.init_stats(num_memories, rank)
        return SolverState(
            *params,
            insert_time=jnp.asarray(insert_time, jnp.int32),
            obs_index=jnp.zeros((capacity, max_budget), jnp.int32),
            obs_value=jnp.zeros((capacity, max_budget), jnp.float32),
            obs_mask=jnp.zeros((capacity, max_budget), bool),
            memory_count=jnp.zeros((num_memories,), jnp.int32),
            count=jnp.zeros((), jnp.int32),
            solver_extras=extras,
        )

    def budget_of(state: SolverState) -> Array:
        budget = jnp.asarray(policy.budget(state.count), jnp.int32)
        return jnp.clip(budget, 0, max_budget)

    def select(key: PRNGKey, state: SolverState, query: Query) -> Array:
        check_query(config, query)
        usable = usable_candidates(state, query)
        anchors = policy.anchors(key, query, budget_of(state), usable)
        # The policy's promise, enforced: never an unusable candidate.
        return jnp.asarray(anchors, bool) & usable

    def refit(state: SolverState) -> tuple[Parameters, Any]:
        params = parameters(state)
        if config.solver == "gradient":
            return _refit_gradient(
                params, state.solver_extras, state, config, optimizer
            )
        if config.solver == "incremental":
            # The history up to t - 1 was folded in by the update after each query.
            return params, state.solver_extras
        return _refit_als(params, state, config), state.solver_extras

    def observe(
        state: SolverState, query: Query, observation: Observation
    ) -> tuple[SolverState, StepInfo]:
        check_query(config, query)
        check_observation(config, observation)
        usable = usable_candidates(state, query)
        values = jnp.asarray(observation.values, jnp.float32)
        offered = jnp.asarray(observation.mask, bool)
        observed = offered & usable & jnp.isfinite(values)
        values = jnp.where(observed, values, 0.0)

        # 1. Refit on queries < t (the history does not hold row t yet).
        params, extras = refit(state)
        # 2. Fold in query t from its anchors alone.
        query_bias, query_factors = fold_in(
            params, state.memory_count, query.candidates, values, observed, config.l2
        )
        completed = predict(
            params, state.memory_count, query.candidates, query_bias, query_factors
        )
        completed = jnp.where(usable, completed, 0.0)
        shown = jnp.clip(completed, 0.0, 1.0) if config.clip_completions else completed
        # One ulp below: at equal value the direct score outranks the completion.
        shown = jnp.nextafter(shown, -jnp.inf)
        scores = mixed_scores(shown, values, observed, usable)

        # 3. The anchors join the history (compressed to a row of width K).
        order = jnp.argsort(~observed, stable=True)[:max_budget]
        row_mask = observed[order]
        has_room = state.count < capacity
        stored = row_mask & has_room
        slot = state.count
        new_state = SolverState(
            global_mean=params.global_mean,
            memory_bias=params.memory_bias,
            memory_factors=params.memory_factors,
            query_bias=params.query_bias.at[slot].set(query_bias, mode="drop"),
            query_factors=params.query_factors.at[slot].set(query_factors, mode="drop"),
            insert_time=state.insert_time,
            obs_index=state.obs_index.at[slot].set(
                query.candidates[order], mode="drop"
            ),
            obs_value=state.obs_value.at[slot].set(values[order], mode="drop"),
            obs_mask=state.obs_mask.at[slot].set(stored, mode="drop"),
            memory_count=state.memory_count.at[query.candidates[order]].add(
                stored.astype(jnp.int32)
            ),
            count=state.count + 1,
            solver_extras=extras,
        )
        if config.solver == "incremental":
            # 4. A bounded block sweep with the new row (after its scores exist).
            new_state = incremental.update(new_state, config.l2, config.refresh_rows)
        dropped = jnp.sum(offered & usable) - jnp.sum(stored)
        info = StepInfo(
            scores=scores,
            completed=completed,
            anchors=observed,
            budget=budget_of(state),
            dropped=dropped.astype(jnp.int32),
        )
        return new_state, info

    def step(
        key: PRNGKey, state: SolverState, query: Query, scores_row: ArrayLike
    ) -> tuple[SolverState, StepInfo]:
        anchors = select(key, state, query)
        return observe(
            state, query, Observation(jnp.asarray(scores_row, jnp.float32), anchors)
        )

    return OnlineSolver(init, select, observe, step, config, policy)


__all__ = [
    "OnlineSolver",
    "Parameters",
    "SolverConfig",
    "SolverState",
    "als_sweep",
    "fold_in",
    "loss",
    "online_solver",
    "parameters",
    "predict",
]
