"""The solver composed from its parts: a model, a history, an algorithm, a policy.

:class:`~earm_jax.core.config.SolverConfig` holds every field of every part in
one flat tuple. Here each part is its own small NamedTuple (or, for the
algorithm, a factory with its own arguments), and :func:`compose_solver` puts
them together into an ordinary :class:`~earm_jax.core.config.OnlineSolver`:
``run``, ``run_batch``, ``vmap`` and the policies work on it unchanged, and its
``config`` is the one flat config the parts describe.

>>> import jax
>>> import earm_jax as ej
>>> solver = ej.compose_solver(
...     model=ej.LowRankModel(num_memories=100, rank=4),
...     history=ej.RowHistory(capacity=64, pool_size=10),
...     algorithm=ej.als(l2=0.2, sweeps=2),
...     policy=ej.paper_policy(pool_size=10),
... )
>>> solver.config.solver, solver.config.l2, solver.config.num_sweeps
('als', 0.2, 2)
>>> solver.config.max_budget  # a row holds the whole pool by default
10
>>> int(solver.init(jax.random.key(0)).count)
0
"""

from __future__ import annotations

from typing import NamedTuple

from earm_jax.base import Policy
from earm_jax.core.algorithms import incremental
from earm_jax.core.config import (
    FIELD_RULES,
    InputTypeError,
    InputValueError,
    OnlineSolver,
    SolverConfig,
    check_field,
    check_policy_fits,
)
from earm_jax.core.online import online_solver
from earm_jax.core.solvers.base import SolverAlgorithm


class LowRankModel(NamedTuple):
    r"""The completion model :math:`\hat y = \mu + b_m + c_t + u_m \cdot v_t`.

    Attributes:
      num_memories: ``M``, rows of the experience matrix.
      rank: ``R``, latent dimension; 0 gives the bias-only model.
      init_scale: standard deviation of the random initial memory factors.
      clip_completions: clip completions into [0, 1] in the mixed scores, so
        no prediction outranks a direct score of 1.
    """

    num_memories: int
    rank: int = 8
    init_scale: float = 0.1
    clip_completions: bool = True


class RowHistory(NamedTuple):
    """The history as ``capacity`` rows of ``max_budget`` sparse entries.

    Attributes:
      capacity: ``Q``, how many queries the history holds.
      pool_size: ``N``, candidates per query.
      max_budget: ``K``, the most anchors one query may store
        (``<= pool_size``); ``None`` (default): ``pool_size``.
    """

    capacity: int
    pool_size: int
    max_budget: int | None = None


class LogHistory(NamedTuple):
    """The history as a log of at most ``entry_capacity`` observations, so its
    memory follows the calls paid (:mod:`earm_jax.core.entry_log`;
    :func:`~earm_jax.core.algorithms.incremental` only).

    Attributes:
      capacity: ``Q``, how many queries the history holds.
      pool_size: ``N``, candidates per query.
      entry_capacity: ``E``, the most observations stored (``>= max_budget``).
      max_budget: ``K``, the most anchors one query may store; ``None``
        (default): ``pool_size``.
    """

    capacity: int
    pool_size: int
    entry_capacity: int
    max_budget: int | None = None


def _check_types(
    model: LowRankModel, history: RowHistory | LogHistory, algorithm: SolverAlgorithm
) -> None:
    for name, value, kinds in (
        ("model", model, (LowRankModel,)),
        ("history", history, (RowHistory, LogHistory)),
        ("algorithm", algorithm, (SolverAlgorithm,)),
    ):
        if not isinstance(value, kinds):
            expected = " or ".join(kind.__name__ for kind in kinds)
            raise InputTypeError(
                f"compose_solver: {name} must be a {expected}, "
                f"got {type(value).__name__}"
            )


def _check_model(model: LowRankModel) -> None:
    # init_scale and clip_completions take any value SolverConfig takes.
    for field in ("num_memories", "rank"):
        check_field(field, getattr(model, field), f"LowRankModel.{field}")


def _check_history(history: RowHistory | LogHistory) -> int:
    """Checks ``history``'s fields, naming it; returns its ``max_budget``."""
    name = type(history).__name__
    for field in ("capacity", "pool_size"):
        check_field(field, getattr(history, field), f"{name}.{field}")
    if history.max_budget is None:
        max_budget = history.pool_size
    else:
        max_budget = history.max_budget
        check_field("max_budget", max_budget, f"{name}.max_budget")
    if max_budget > history.pool_size:
        raise InputValueError(
            f"{name}.max_budget={max_budget} exceeds pool_size={history.pool_size}: "
            "a row can never hold more anchors than the pool has candidates"
        )
    if isinstance(history, LogHistory):
        # Not only >= 0 as in SolverConfig, where 0 means rows: a log holds at
        # least one full query.
        check_field("entry_capacity", history.entry_capacity, f"{name}.entry_capacity")
        if history.entry_capacity < max_budget:
            raise InputValueError(
                f"{name}.entry_capacity={history.entry_capacity} is smaller than "
                f"max_budget={max_budget}: the log must hold one full query"
            )
    return max_budget


def _check_algorithm(
    algorithm: SolverAlgorithm, history: RowHistory | LogHistory, max_budget: int
) -> None:
    """Checks the algorithm's bound values (the factories check their own
    arguments; :func:`~earm_jax.core.algorithms.bind` does not) and that it
    suits the history."""
    bound = dict(algorithm.hyperparameters)
    for field, value in bound.items():
        if field in FIELD_RULES:
            check_field(field, value, f"{algorithm.name}: {field}")
    block_entries = bound.get("block_entries", 0)
    if isinstance(history, LogHistory):
        if algorithm.name != "incremental":
            raise InputValueError(
                "LogHistory (the history as a log) is supported by incremental() "
                f"only, got {algorithm.name}(); use a RowHistory"
            )
        if block_entries and block_entries < 2 * max_budget:
            raise InputValueError(
                f"incremental(block_entries={block_entries}) is below "
                f"2 * LogHistory.max_budget={2 * max_budget}: a step must fit the "
                "new row and one earlier row, or the round robin could stall"
            )
    elif block_entries:
        raise InputValueError(
            "incremental(block_entries=...) bounds a step's entries of a "
            "LogHistory; with a RowHistory leave block_entries=0"
        )


def compose_solver(
    *,
    model: LowRankModel,
    history: RowHistory | LogHistory,
    policy: Policy,
    algorithm: SolverAlgorithm | None = None,
) -> OnlineSolver:
    """Builds the online solver from a model, a history, an algorithm and a policy.

    Args:
      model: :class:`LowRankModel`, the shapes and options of the model.
      history: :class:`RowHistory` or :class:`LogHistory`, how the anchors
        of past queries are kept.
      policy: budget schedule and anchor sampler (e.g.
        :func:`~earm_jax.policies.paper_policy` with the history's
        ``pool_size``).
      algorithm: from :func:`~earm_jax.core.algorithms.als`,
        :func:`~earm_jax.core.algorithms.incremental` or
        :func:`~earm_jax.core.algorithms.gradient`; ``None``:
        ``incremental()``.

    Returns:
      An :class:`~earm_jax.core.config.OnlineSolver`, exactly the one
      ``online_solver(solver.config, policy, algorithm)`` builds; its
      ``config`` holds the parts' values and the algorithm's arguments.

    Raises:
      InputValueError: naming the part and field that is wrong.
      InputTypeError: naming a part of the wrong type.
    """
    if algorithm is None:
        algorithm = incremental()
    _check_types(model, history, algorithm)
    # Every part is checked here, naming itself, before the flat config exists:
    # online_solver's checks would name SolverConfig's fields instead.
    _check_model(model)
    max_budget = _check_history(history)
    _check_algorithm(algorithm, history, max_budget)
    check_policy_fits(
        policy,
        pool_size=history.pool_size,
        max_budget=max_budget,
        owner=type(history).__name__,
    )
    uses_log = isinstance(history, LogHistory)
    config = SolverConfig(
        num_memories=model.num_memories,
        capacity=history.capacity,
        pool_size=history.pool_size,
        max_budget=max_budget,
        rank=model.rank,
        init_scale=model.init_scale,
        clip_completions=model.clip_completions,
        entry_capacity=history.entry_capacity if uses_log else 0,
    )
    return online_solver(config, policy, algorithm)


__all__ = ["LogHistory", "LowRankModel", "RowHistory", "compose_solver"]
