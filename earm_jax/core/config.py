"""The solver's static configuration, its carried state, and their validation.

Every solver algorithm (:mod:`earm_jax.core.solvers`) and every driver shares
these types; nothing here computes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jaxtyping import Bool, Float, Int

from earm_jax.base import AnchorPolicy, Observation, Policy, Query, StepInfo
from earm_jax.types import Array

if TYPE_CHECKING:  # the algorithms build on this module's types
    from earm_jax.core.solvers.base import SolverAlgorithm


class SolverConfig(NamedTuple):
    """Static configuration: shapes and hyperparameters (closed over, never traced).

    Attributes:
      num_memories: ``M``, rows of the experience matrix.
      capacity: ``Q``, how many queries the history holds.
      pool_size: ``N``, candidates per query.
      max_budget: ``K``, the most anchors one query may store (``<= pool_size``).
        A policy's budget above it is clipped to it at every query, not
        refused (a schedule is a traced function of the count);
        ``StepInfo.budget`` reports the clipped value.
      rank: ``R``, latent dimension; 0 gives the bias-only model.
      l2: ridge penalty :math:`\\lambda` on biases and factors (paper: 0.1).
      solver: ``"incremental"`` (default: block ridge solves over a bounded
        block per query, from per-memory sufficient statistics: constant cost
        per query, the quality of ``"als"`` on the simulated and LoCoMo
        benchmarks; see :mod:`earm_jax.core.solvers.incremental`), ``"als"``
        (alternating closed-form ridge solves over the whole history) or
        ``"gradient"`` (optax Adam steps on the same masked loss); any name
        registered in :data:`earm_jax.core.solvers.SOLVERS`.
      num_sweeps: ALS sweeps per query (warm-started), an upper bound when
        ``tolerance > 0``.
      tolerance: stop the ALS sweeps early once the relative decrease of the
        loss is below this (0 = always ``num_sweeps``).
      num_steps: gradient steps per query for ``solver="gradient"``.
      learning_rate: Adam step size for ``solver="gradient"`` (not read when
        the algorithm was built with a custom optimizer,
        ``earm_jax.gradient(optimizer)``: ``OnlineSolver.algorithm`` holds it).
      init_scale: standard deviation of the random initial memory factors.
      refresh_rows: for ``solver="incremental"``, earlier history rows re-solved
        (round robin) per query besides the new one.
      clip_completions: clip completions into the scorer's range [0, 1] in the
        mixed scores, so no prediction outranks a direct score of 1 (direct
        scores are authoritative; at equal value the direct score ranks first).
        ``StepInfo.completed`` stays unclipped.
      entry_capacity: ``E`` > 0 stores the history as a log of at most ``E``
        observations (:mod:`earm_jax.core.entry_log`: memory follows the calls
        paid) instead of ``Q`` rows of width ``K``; ``solver="incremental"``
        only. A query whose observations no longer fit is stored without them
        and counted in ``StepInfo.dropped``;
        :func:`~earm_jax.core.entry_log.entries_needed` gives an ``E`` that
        never drops. 0 (default): the row layout.
      block_entries: with the log, the most history entries one incremental
        step visits (``>= 2 * max_budget``). 0 (default):
        ``(refresh_rows + 1) * max_budget``, i.e. the whole block every step,
        exactly the step of the row layout. Smaller: the round robin visits,
        of the ``refresh_rows`` earlier rows due, the prefix whose entries fit
        with the new row's, and resumes at the first row that did not fit (so
        steps in steady state pay for the anchors stored, not for ``K`` slots
        per row; no observation is skipped, rows are only revisited later).
    """

    num_memories: int
    capacity: int
    pool_size: int
    max_budget: int
    rank: int = 8
    l2: float = 0.1
    solver: str = "incremental"
    num_sweeps: int = 3
    tolerance: float = 0.0
    num_steps: int = 20
    learning_rate: float = 0.05
    init_scale: float = 0.1
    refresh_rows: int = 8
    clip_completions: bool = True
    entry_capacity: int = 0
    block_entries: int = 0


class SolverState(NamedTuple):
    """Everything carried from one query to the next (fixed shapes for a stream).

    The annotations give each leaf's shape in the dimension names of
    :mod:`earm_jax.types` (floats are float32, integers int32); ``run_batch``
    adds a leading ``S`` axis to every leaf.

    Attributes:
      global_mean: :math:`\\mu`.
      memory_bias: :math:`b_m`.
      memory_factors: :math:`u_m` (used only once a memory has an observation
        in the history; until then it is the random init).
      query_bias: :math:`c_t` per query slot.
      query_factors: :math:`v_t` per query slot.
      insert_time: first query index at which each memory exists.
      obs_index: memory ids observed at each past query (width ``K = 0`` when
        the history is a log: see ``history_log``).
      obs_value: their direct scores.
      obs_mask: which entries of a row hold an observation.
      memory_count: observations of each memory in the history.
      count: queries seen so far (the next query's index).
      solver_extras: solver-specific carry (the optax state for ``"gradient"``;
        :class:`~earm_jax.core.solvers.incremental.IncrementalStats` for
        ``"incremental"``; each algorithm's own NamedTuple, see
        :mod:`earm_jax.core.solvers`).
      history_log: ``()`` in the row layout; with
        ``SolverConfig.entry_capacity > 0`` the history's
        :class:`~earm_jax.core.entry_log.EntryLog` (then the ``obs_*`` rows
        have width 0; :func:`~earm_jax.core.entry_log.rows_view` gives rows).
      policy_state: what the policy carries from query to query (``best``'s
        ledger, learned calls' regression; ``()`` for the paper's one-round
        policies).
    """

    global_mean: Float[Array, ""]
    memory_bias: Float[Array, " M"]
    memory_factors: Float[Array, "M R"]
    query_bias: Float[Array, " Q"]
    query_factors: Float[Array, "Q R"]
    insert_time: Int[Array, " M"]
    obs_index: Int[Array, "Q K"]
    obs_value: Float[Array, "Q K"]
    obs_mask: Bool[Array, "Q K"]
    memory_count: Int[Array, " M"]
    count: Int[Array, ""]
    solver_extras: Any = ()
    history_log: Any = ()
    policy_state: Any = ()


class Parameters(NamedTuple):
    """The model's parameters (a view of the state), as one pytree.

    Attributes:
      global_mean: :math:`\\mu`.
      memory_bias: :math:`b_m`.
      memory_factors: :math:`u_m`.
      query_bias: :math:`c_t` per query slot.
      query_factors: :math:`v_t` per query slot.
    """

    global_mean: Float[Array, ""]
    memory_bias: Float[Array, " M"]
    memory_factors: Float[Array, "M R"]
    query_bias: Float[Array, " Q"]
    query_factors: Float[Array, "Q R"]


class OnlineSolver(NamedTuple):
    """The solver's pure functions; build it with :func:`online_solver`.

    Every function that takes ``side`` (a :class:`~earm_jax.base.SideInputs`,
    default ``None``) hands it to the policy (learned calls read it; the
    paper's policies and ``best`` do not).

    Attributes:
      init: ``(key, insert_time=None) -> SolverState`` (the policy's carry in
        ``policy_state``).
      select: ``(key, state, query, side=None) -> bool[N]`` the policy's first
        round of calls; runs before any score of this query exists (a
        one-round policy's whole selection).
      observe: ``(state, query, observation, side=None) -> (state, StepInfo)``:
        the observations as the query's one round; refits on the history, folds
        the query in, completes, then stores them (and the policy closes the
        query).
      step: ``(key, state, query, scores_row, side=None) -> (state,
        StepInfo)``: the policy's rounds, each revealing the scorer's answers
        where it asks, then the solver stores what was paid.
      begin: ``(key, state, query, side=None) -> progress``: the policy's
        progress before its first round, for a host loop that pays between
        rounds (``policy.select`` / ``policy.observe`` with
        ``state.policy_state``; :func:`~earm_jax.core.rounds.pay_rounds`).
      finish: ``(state, query, progress, answers) -> (state, StepInfo)``: the
        end of such a loop: the policy decides, the solver stores the answers
        it kept (``answers``: ``float32[N]``, read where stored).
      config: the :class:`SolverConfig`, with the algorithm's bound
        hyperparameters written in (the values in use).
      policy: the :class:`~earm_jax.base.Policy`.
      algorithm: the :class:`~earm_jax.core.solvers.base.SolverAlgorithm` in
        use (the registered one named by ``config.solver``, or the one a
        factory such as :func:`~earm_jax.core.algorithms.gradient` built).
    """

    init: Callable[..., SolverState]
    select: Callable[..., Array]
    observe: Callable[..., tuple[SolverState, StepInfo]]
    step: Callable[..., tuple[SolverState, StepInfo]]
    config: SolverConfig
    policy: Policy
    algorithm: SolverAlgorithm | None = None
    begin: Callable[..., Any] | None = None
    finish: Callable[..., tuple[SolverState, StepInfo]] | None = None


class InputError(Exception):
    """Base of the solver API's refusals of bad input: ``except InputError``
    catches both kinds below, and nothing that failed for another reason."""


class InputTypeError(InputError, TypeError):
    """An argument that is the wrong kind of object: ``select``'s arguments
    swapped, a ``dict`` or a Python list where a ``Query`` or an array goes, a
    policy part that is not a function.

    Only a ``TypeError``: ``except ValueError`` does not catch it (catch
    :class:`InputError`, or ``(TypeError, ValueError)``, for every refusal).
    """


class InputValueError(InputError, ValueError):
    """An argument of the right kind whose contents are wrong: a shape, a
    dtype, a config field, a candidate id outside the memories or listed twice
    in one pool, a non-finite similarity, an observed score outside [0, 1]."""


def _is_positive_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _exceeds(value: Any, bound: float, inclusive: bool) -> bool:
    try:
        return bool(value >= bound) if inclusive else bool(value > bound)
    except TypeError:  # None, a string: not a number at all
        return False


# What each checked SolverConfig field accepts, as (test, what the message says).
# The composed parts (LowRankModel, RowHistory, the algorithm factories) hold
# the same fields, so they share these rules and only name themselves.
FIELD_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    **{
        name: (_is_positive_int, "a positive int")
        for name in ("num_memories", "capacity", "pool_size", "max_budget")
    },
    **{
        name: (_is_count, "an int >= 0")
        for name in (
            "rank",
            "num_sweeps",
            "num_steps",
            "refresh_rows",
            "entry_capacity",
            "block_entries",
        )
    },
    "l2": (lambda value: _exceeds(value, 0, inclusive=False), "> 0"),
    "tolerance": (lambda value: _exceeds(value, 0, inclusive=True), ">= 0"),
    "learning_rate": (lambda value: _exceeds(value, 0, inclusive=False), "> 0"),
    "solver": (lambda value: isinstance(value, str), "a registered solver name"),
}


def check_field(field: str, value: Any, label: str | None = None) -> None:
    """Raises :class:`InputValueError` when ``value`` is not what the
    :class:`SolverConfig` field ``field`` accepts.

    Args:
      field: a key of :data:`FIELD_RULES`.
      value: the value to check.
      label: how the message names the field (``"RowHistory.capacity"``);
        ``None``: ``"SolverConfig.<field>"``.
    """
    accepts, requirement = FIELD_RULES[field]
    if not accepts(value):
        label = f"SolverConfig.{field}" if label is None else label
        raise InputValueError(f"{label} must be {requirement}, got {value!r}")


def validate_config(config: SolverConfig) -> None:
    """Raises :class:`InputValueError` naming the first bad field of ``config``."""
    for field in FIELD_RULES:
        check_field(field, getattr(config, field))
    if config.max_budget > config.pool_size:
        raise InputValueError(
            f"SolverConfig.max_budget={config.max_budget} exceeds "
            f"pool_size={config.pool_size}: a row can never hold more anchors than "
            "the pool has candidates"
        )
    if config.entry_capacity and config.solver != "incremental":
        raise InputValueError(
            f"SolverConfig.entry_capacity={config.entry_capacity} (the history as a "
            f"log) is supported by solver='incremental' only, got "
            f"solver={config.solver!r}; use entry_capacity=0 (rows)"
        )
    if config.entry_capacity and config.entry_capacity < config.max_budget:
        raise InputValueError(
            f"SolverConfig.entry_capacity={config.entry_capacity} is smaller than "
            f"max_budget={config.max_budget}: the log must hold one full query"
        )
    if config.block_entries and not config.entry_capacity:
        raise InputValueError(
            f"SolverConfig.block_entries={config.block_entries} needs the log "
            "layout (entry_capacity > 0)"
        )
    if config.block_entries and config.block_entries < 2 * config.max_budget:
        raise InputValueError(
            f"SolverConfig.block_entries={config.block_entries} is below "
            f"2 * max_budget={2 * config.max_budget}: a step must fit the new row "
            "and one earlier row, or the round robin could stall"
        )


def check_policy(config: SolverConfig, policy: Policy) -> None:
    """Raises :class:`InputValueError` when ``policy`` was built for another pool
    size or may pay more per query than the history stores,
    :class:`InputTypeError` when it or its parts are not what they must be."""
    check_policy_fits(
        policy,
        pool_size=config.pool_size,
        max_budget=config.max_budget,
        owner="SolverConfig",
    )


def check_policy_fits(
    policy: Policy, *, pool_size: int, max_budget: int, owner: str
) -> None:
    """:func:`check_policy` against a pool size and a row width given apart,
    naming them as fields of ``owner`` (``"RowHistory"`` for a composed
    solver, whose history holds them)."""
    if not isinstance(policy, Policy):
        raise InputTypeError(
            "policy must satisfy the earm_jax.Policy protocol (e.g. "
            "ej.paper_policy(), an ej.AnchorPolicy, best's adaptive_policy), got "
            f"{type(policy).__name__}"
        )
    if policy.max_calls is not None and policy.max_calls > max_budget:
        raise InputValueError(
            f"the policy may pay {policy.max_calls} calls per query but "
            f"{owner}.max_budget={max_budget}: paid answers would be "
            f"dropped from the history; use max_budget={policy.max_calls}"
        )
    if isinstance(policy, AnchorPolicy):
        check_anchor_parts(policy)
    if policy.pool_size is not None and policy.pool_size != pool_size:
        raise InputValueError(
            f"Policy.pool_size={policy.pool_size} (its budget schedule is fractions "
            f"of that pool) but {owner}.pool_size={pool_size}; build the "
            f"policy with pool_size={pool_size}"
        )


def check_anchor_parts(policy: AnchorPolicy) -> None:
    """Raises :class:`InputTypeError` when a one-round policy's budget or
    sampler is not a function."""
    for part in ("budget", "anchors"):
        if not callable(getattr(policy, part)):
            value = getattr(policy, part)
            raise InputTypeError(
                f"Policy.{part} must be a function, got {type(value).__name__} "
                f"{value!r}"
                + (
                    " (a fixed budget is constant_budget(k))"
                    if part == "budget"
                    else ""
                )
            )


def check_state(state: Any, function: str) -> None:
    """Raises :class:`InputTypeError` unless ``state`` is a ``SolverState``.

    Catches swapped arguments (``select(state, key, query)``) before tracing
    fails somewhere inside with an ``AttributeError``.
    """
    if not isinstance(state, SolverState):
        raise InputTypeError(
            f"{function}: state must be an earm_jax.SolverState, got "
            f"{type(state).__name__} (arguments in the wrong order? "
            f"select(key, state, query), observe(state, query, observation))"
        )


def check_key(key: Any, function: str) -> None:
    """Raises :class:`InputTypeError` unless ``key`` is a PRNG key array."""
    is_typed_key = isinstance(key, jax.Array) and jnp.issubdtype(
        key.dtype, jax.dtypes.prng_key
    )
    is_raw_key = (
        isinstance(key, jax.Array | np.ndarray)
        and key.dtype == np.uint32
        and key.shape[-1:] == (2,)
    )
    if not (is_typed_key or is_raw_key):
        raise InputTypeError(
            f"{function}: key must be a PRNG key (jax.random.key), got "
            f"{type(key).__name__} (arguments in the wrong order? "
            f"select(key, state, query))"
        )


def _host_values(leaf: Any) -> np.ndarray | None:
    """The leaf's values when the host knows them; ``None`` while tracing."""
    if isinstance(leaf, jax.core.Tracer):
        return None
    return np.asarray(leaf)


def _where(axes: tuple[str, ...], index: tuple[int, ...]) -> str:
    """``"stream 2, query 5: "`` for the leading ``index`` named by ``axes``."""
    if not axes:
        return ""
    return ", ".join(f"{axis} {i}" for axis, i in zip(axes, index, strict=True)) + ": "


def check_query_values(
    config: SolverConfig, query: Query, axes: tuple[str, ...] = ()
) -> None:
    """Raises :class:`InputValueError` when a valid candidate is not a memory
    id, appears twice in the pool, or has a NaN or infinite similarity.

    A value check: it runs where the values are known on the host (eager
    calls of ``select``, ``observe``, ``step``, :func:`~earm_jax.run` and
    :func:`~earm_jax.run_batch`, or by hand before a jitted call). Under
    ``jit`` an id outside ``[0, num_memories)`` is treated as unusable (never
    anchored, ``-inf`` in the scores); a repeated id or a non-finite
    similarity is not detected there, and its results are undefined: run the
    same checks traced with :func:`~earm_jax.checked`.

    Args:
      config: the solver's configuration.
      query: a :class:`~earm_jax.base.Query`; its fields may carry leading
        axes (a stream's ``[T, N]``, a batch's ``[S, T, N]``).
      axes: names of those leading axes, e.g. ``("stream", "query")``; the
        message starts with the failing index (``"stream 2, query 5: "``).
    """
    candidates, valid = _host_values(query.candidates), _host_values(query.valid)
    if candidates is None or valid is None:
        return
    valid = valid.astype(bool)
    outside = valid & ((candidates < 0) | (candidates >= config.num_memories))
    if outside.any():
        *row, position = (int(i) for i in np.argwhere(outside)[0])
        raise InputValueError(
            f"{_where(axes, tuple(row))}query.candidates[{position}]="
            f"{int(candidates[(*row, position)])} is not a memory id in "
            f"[0, num_memories={config.num_memories}); mark padding with "
            "query.valid=False"
        )
    # Padding gets distinct negative keys, so only valid ids can repeat.
    padding_keys = -1 - np.arange(candidates.shape[-1])
    keys = np.where(valid, candidates, padding_keys)
    ordered = np.sort(keys, axis=-1)
    repeats = (ordered[..., 1:] == ordered[..., :-1]).any(axis=-1)
    if repeats.any():
        row = tuple(int(i) for i in np.argwhere(repeats)[0]) if repeats.ndim else ()
        positions = np.flatnonzero(valid[row])
        ids = candidates[row][positions]
        unique, counts = np.unique(ids, return_counts=True)
        repeated = int(unique[counts > 1][0])
        where = positions[ids == repeated][:2].tolist()
        raise InputValueError(
            f"{_where(axes, row)}query.candidates holds memory {repeated} twice "
            f"(positions {where[0]} and {where[1]}): a pool lists each memory once"
        )
    similarity = _host_values(query.similarity)
    if similarity is None:
        return
    bad = valid & ~np.isfinite(similarity)
    if bad.any():
        *row, position = (int(i) for i in np.argwhere(bad)[0])
        raise InputValueError(
            f"{_where(axes, tuple(row))}query.similarity[{position}]="
            f"{float(similarity[(*row, position)])} is not finite; every valid "
            "candidate needs a finite similarity (mark padding with "
            "query.valid=False)"
        )


def check_observation_values(observation: Observation) -> None:
    """Raises :class:`InputValueError` when an observed score is NaN, infinite
    or outside [0, 1].

    Scores are refused rather than clipped: a score outside the scorer's range
    is a bug upstream, and clipping would hide it. Only entries under
    ``observation.mask`` are read (a failed pair is left out of the mask). Like
    :func:`check_query_values`, a host check; under ``jit`` a non-finite
    observed value is treated as unobserved and a finite one is used as given.
    """
    values, mask = _host_values(observation.values), _host_values(observation.mask)
    if values is None or mask is None:
        return
    observed = values[mask]
    bad = ~np.isfinite(observed) | (observed < 0.0) | (observed > 1.0)
    if bad.any():
        position = int(np.flatnonzero(mask)[np.flatnonzero(bad)[0]])
        raise InputValueError(
            f"observation.values[{position}]={float(values[position])!r} where "
            "observation.mask is True: an observed score must be finite and in "
            "[0, 1] (leave a failed pair out of the mask)"
        )


def check_query(config: SolverConfig, query: Query, name: str = "query") -> None:
    """Raises :class:`InputValueError` naming the field when ``query`` has the
    wrong shape or dtype (:class:`InputTypeError` when it is not a ``Query`` or
    a field is a Python list or tuple).

    Shapes and dtypes are static, so this works at trace time under ``jit``.
    """
    expected = {
        "candidates": ((config.pool_size,), jnp.integer),
        "similarity": ((config.pool_size,), jnp.floating),
        "valid": ((config.pool_size,), jnp.bool_),
    }
    _check_fields(query, expected, name, Query)


def check_observation(config: SolverConfig, observation: Observation) -> None:
    """Raises :class:`InputValueError` naming the field when ``observation``
    is malformed (:class:`InputTypeError` when it is not an ``Observation``)."""
    expected = {
        "values": ((config.pool_size,), jnp.floating),
        "mask": ((config.pool_size,), jnp.bool_),
    }
    _check_fields(observation, expected, "observation", Observation)


def _kind_name(kind) -> str:
    return "bool" if kind is jnp.bool_ else kind.__name__


def _check_fields(value: Any, expected: dict, name: str, kind: type) -> None:
    fields = getattr(value, "_fields", None)
    if (
        not isinstance(value, tuple)
        or fields is None
        or not set(expected) <= set(fields)
    ):
        raise InputTypeError(
            f"{name} must be an earm_jax.{kind.__name__}, "
            f"got {type(value).__name__}: {value!r}"
        )
    for field, (shape, kind) in expected.items():
        leaf = getattr(value, field)
        if isinstance(leaf, list | tuple):
            raise InputTypeError(
                f"{name}.{field} must be an array, got a Python "
                f"{type(leaf).__name__}; wrap it: jnp.asarray(..., dtype)"
            )
        leaf_shape = jnp.shape(leaf)
        leaf_dtype = jnp.result_type(leaf)
        if leaf_shape != shape:
            raise InputValueError(
                f"{name}.{field} must have shape {shape}, got {leaf_shape}"
            )
        if not jnp.issubdtype(leaf_dtype, kind):
            raise InputValueError(
                f"{name}.{field} must have a {_kind_name(kind)} dtype, got {leaf_dtype}"
            )


__all__ = [
    "FIELD_RULES",
    "InputError",
    "InputTypeError",
    "InputValueError",
    "OnlineSolver",
    "Parameters",
    "SolverConfig",
    "SolverState",
    "check_field",
    "check_key",
    "check_observation",
    "check_observation_values",
    "check_policy",
    "check_policy_fits",
    "check_query",
    "check_query_values",
    "check_state",
    "validate_config",
]
