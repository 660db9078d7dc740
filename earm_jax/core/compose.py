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

import re
from typing import NamedTuple

from earm_jax.base import Policy
from earm_jax.core.algorithms import incremental
from earm_jax.core.config import (
    InputTypeError,
    InputValueError,
    OnlineSolver,
    SolverConfig,
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


def _owner_names(
    model: LowRankModel, history: RowHistory | LogHistory, algorithm: SolverAlgorithm
) -> dict[str, str]:
    """Which part each config field came from, to name it in errors."""
    history_name = type(history).__name__
    owners = {field: f"LowRankModel.{field}" for field in LowRankModel._fields}
    owners |= {field: f"{history_name}.{field}" for field in history._fields}
    bound = dict(algorithm.hyperparameters)
    owners |= {field: f"{algorithm.name}(...) {field}" for field in bound}
    return owners


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
    uses_log = isinstance(history, LogHistory)
    if dict(algorithm.hyperparameters).get("block_entries") and not uses_log:
        raise InputValueError(
            "incremental(block_entries=...) bounds a step's entries of a "
            "LogHistory; with a RowHistory leave block_entries=0"
        )
    max_budget = history.pool_size if history.max_budget is None else history.max_budget
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
    try:
        return online_solver(config, policy, algorithm)
    except ValueError as error:
        owners = _owner_names(model, history, algorithm)
        message = re.sub(
            r"SolverConfig\.(\w+)",
            lambda match: owners.get(match.group(1), match.group(0)),
            str(error),
        )
        raise InputValueError(message) from None


__all__ = ["LogHistory", "LowRankModel", "RowHistory", "compose_solver"]
