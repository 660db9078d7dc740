"""The protocol every solver algorithm implements (one algorithm per module).

An algorithm decides how the shared parameters (:math:`\\mu, b, U` and the past
queries' :math:`c_s, v_s`) track the history; the fold-in of the new query, the
completion and the storage of its anchors are common to all
(:mod:`earm_jax.core.online`). Each algorithm carries its own typed extras
NamedTuple in ``SolverState.solver_extras`` (a pytree: persistence and growth
treat it generically).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from earm_jax.core.config import Parameters, SolverConfig, SolverState


class SolverAlgorithm(NamedTuple):
    """One solver algorithm: four pure functions and its registry name.

    Attributes:
      name: the ``SolverConfig.solver`` value that selects it.
      init_extras: ``(config, params) -> extras``: the carry of a fresh state.
      refit: ``(params, extras, state, config) -> (params, extras)``: fit on the
        history of queries ``< state.count``, before the new query is folded in.
      update: ``(state, config) -> state``: runs after the new query's row was
        stored (``count`` already incremented); e.g. an incremental sweep.
      grow_extras: ``(extras, num_memories, capacity) -> extras``: pads the
        extras when the state's buffers grow (host side, outside jit).
      extras_from_history: ``(state, config) -> extras``: extras consistent with
        a state whose parameters and history were set from outside (a history
        synthesised by a benchmark, or a state another solver produced).
      hyperparameters: the :class:`SolverConfig` fields the algorithm binds, as
        ``(field, value)`` pairs. Empty for the registered algorithms, which
        read their hyperparameters from the config; a factory
        (:mod:`earm_jax.core.algorithms`) binds its own arguments here, and
        :func:`~earm_jax.core.online.online_solver` writes them into the
        config it reports, so the config and the algorithm never disagree.
    """

    name: str
    init_extras: Callable[[SolverConfig, Parameters], Any]
    refit: Callable[
        [Parameters, Any, SolverState, SolverConfig], tuple[Parameters, Any]
    ]
    update: Callable[[SolverState, SolverConfig], SolverState]
    grow_extras: Callable[[Any, int, int], Any]
    extras_from_history: Callable[[SolverState, SolverConfig], Any]
    hyperparameters: tuple[tuple[str, Any], ...] = ()


def no_refit(
    params: Parameters, extras: Any, state: SolverState, config: SolverConfig
) -> tuple[Parameters, Any]:
    """For algorithms whose parameters are already current after ``update``."""
    return params, extras


def no_update(state: SolverState, config: SolverConfig) -> SolverState:
    """For algorithms that fit only in ``refit``."""
    return state


__all__ = ["SolverAlgorithm", "no_refit", "no_update"]
