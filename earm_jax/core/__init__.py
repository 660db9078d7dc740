"""The pure-JAX core: configuration and state, the model, the solver algorithms,
the online solver, the drivers (``run`` / ``run_batch``), growth and sharding.

Imports only :mod:`earm_jax.types` and :mod:`earm_jax.base`; no host I/O.
"""

from earm_jax.core.config import OnlineSolver as OnlineSolver
from earm_jax.core.config import Parameters as Parameters
from earm_jax.core.config import SolverConfig as SolverConfig
from earm_jax.core.config import SolverState as SolverState
from earm_jax.core.online import online_solver as online_solver
from earm_jax.core.run import run as run
from earm_jax.core.run import run_batch as run_batch
from earm_jax.core.solvers import SOLVERS as SOLVERS
from earm_jax.core.solvers import SolverAlgorithm as SolverAlgorithm
from earm_jax.core.solvers import get_solver as get_solver

__all__ = [
    "SOLVERS",
    "OnlineSolver",
    "Parameters",
    "SolverAlgorithm",
    "SolverConfig",
    "SolverState",
    "get_solver",
    "online_solver",
    "run",
    "run_batch",
]
