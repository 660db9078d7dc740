"""earm_jax: experience-amortized LLM reranking for long-term agent memory, in JAX.

This namespace re-exports the pure-JAX core (no host I/O, no global JAX
settings changed at import). The layers, bottom up (docs/architecture.md):
``types``/``base`` -> ``core`` -> ``policies`` -> ``settings`` -> ``eval`` ->
``store`` -> ``scoring`` -> ``retriever``/``locomo`` -> ``jobs`` -> ``cli``;
host-side layers are imported on demand, never by this module.
"""

from earm_jax import policies as policies
from earm_jax.base import NOT_INSERTED as NOT_INSERTED
from earm_jax.base import AnchorPolicy as AnchorPolicy
from earm_jax.base import Decision as Decision
from earm_jax.base import Observation as Observation
from earm_jax.base import Policy as Policy
from earm_jax.base import Query as Query
from earm_jax.base import QueryContext as QueryContext
from earm_jax.base import SideInputs as SideInputs
from earm_jax.base import StepInfo as StepInfo
from earm_jax.base import Stream as Stream
from earm_jax.core.algorithms import als as als
from earm_jax.core.algorithms import gradient as gradient
from earm_jax.core.algorithms import incremental as incremental
from earm_jax.core.checked import checked as checked
from earm_jax.core.compose import LogHistory as LogHistory
from earm_jax.core.compose import LowRankModel as LowRankModel
from earm_jax.core.compose import RowHistory as RowHistory
from earm_jax.core.compose import compose_solver as compose_solver
from earm_jax.core.config import InputError as InputError
from earm_jax.core.config import InputTypeError as InputTypeError
from earm_jax.core.config import InputValueError as InputValueError
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
from earm_jax.policies import full_policy as full_policy
from earm_jax.policies import paper_policy as paper_policy
from earm_jax.policies import semantic_policy as semantic_policy
from earm_jax.policies import top_similarity_policy as top_similarity_policy
from earm_jax.settings import EarmSettings as EarmSettings

__version__ = "0.1.0"

__all__ = [
    "STREAM_AXIS",
    "NOT_INSERTED",
    "SOLVERS",
    "AnchorPolicy",
    "Decision",
    "EarmSettings",
    "InputError",
    "InputTypeError",
    "InputValueError",
    "LogHistory",
    "LowRankModel",
    "Observation",
    "OnlineSolver",
    "Parameters",
    "Policy",
    "Query",
    "QueryContext",
    "RowHistory",
    "SideInputs",
    "SolverAlgorithm",
    "SolverConfig",
    "SolverState",
    "StepInfo",
    "Stream",
    "als",
    "checked",
    "compose_solver",
    "full_policy",
    "gradient",
    "incremental",
    "online_solver",
    "paper_policy",
    "policies",
    "run",
    "run_batch",
    "semantic_policy",
    "top_similarity_policy",
]
