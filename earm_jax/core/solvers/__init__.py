"""The solver registry: one line per algorithm, the only place that maps names.

Adding a solver: write ``earm_jax/core/solvers/<name>.py`` exposing
``ALGORITHM = SolverAlgorithm(...)`` and add it to ``SOLVERS`` below.
"""

from __future__ import annotations

from earm_jax.core.config import InputValueError
from earm_jax.core.solvers import als, gradient, incremental
from earm_jax.core.solvers.base import SolverAlgorithm as SolverAlgorithm

SOLVERS: dict[str, SolverAlgorithm] = {
    als.ALGORITHM.name: als.ALGORITHM,
    gradient.ALGORITHM.name: gradient.ALGORITHM,
    incremental.ALGORITHM.name: incremental.ALGORITHM,
}


def get_solver(name: str) -> SolverAlgorithm:
    """The registered algorithm called ``name``
    (:class:`~earm_jax.core.config.InputValueError` naming the choices)."""
    try:
        return SOLVERS[name]
    except (KeyError, TypeError):
        raise InputValueError(
            f"SolverConfig.solver must be one of {tuple(SOLVERS)}, got {name!r}"
        ) from None


__all__ = ["SOLVERS", "SolverAlgorithm", "get_solver"]
