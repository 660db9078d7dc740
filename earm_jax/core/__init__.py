"""The pure-JAX core: configuration and state, the model, the solver algorithms,
the online solver, its composition from parts, the drivers (``run`` /
``run_batch``), the debug checks, growth and sharding.

Imports only :mod:`earm_jax.types` and :mod:`earm_jax.base`; no host I/O.
"""

from earm_jax.core.algorithms import als as als
from earm_jax.core.algorithms import gradient as gradient
from earm_jax.core.algorithms import incremental as incremental
from earm_jax.core.checked import checked as checked
from earm_jax.core.compose import LogHistory as LogHistory
from earm_jax.core.compose import LowRankModel as LowRankModel
from earm_jax.core.compose import RowHistory as RowHistory
from earm_jax.core.compose import compose_solver as compose_solver
from earm_jax.core.config import OnlineSolver as OnlineSolver
from earm_jax.core.config import Parameters as Parameters
from earm_jax.core.config import SolverConfig as SolverConfig
from earm_jax.core.config import SolverState as SolverState
from earm_jax.core.online import online_solver as online_solver
from earm_jax.core.run import STREAM_AXIS as STREAM_AXIS
from earm_jax.core.run import run as run
from earm_jax.core.run import run_batch as run_batch
from earm_jax.core.solvers import SOLVERS as SOLVERS
from earm_jax.core.solvers import SolverAlgorithm as SolverAlgorithm
from earm_jax.core.solvers import get_solver as get_solver

__all__ = [
    "STREAM_AXIS",
    "SOLVERS",
    "LogHistory",
    "LowRankModel",
    "OnlineSolver",
    "Parameters",
    "RowHistory",
    "SolverAlgorithm",
    "SolverConfig",
    "SolverState",
    "als",
    "checked",
    "compose_solver",
    "get_solver",
    "gradient",
    "incremental",
    "online_solver",
    "run",
    "run_batch",
]
