"""earm_jax: experience-amortized LLM reranking for long-term agent memory, in JAX.

This namespace re-exports the pure-JAX core (no host I/O, no global JAX
settings changed at import). The layers, bottom up (README "Architecture"):
``types``/``base`` -> ``core`` -> ``policies`` -> ``settings`` -> ``eval`` ->
``store`` -> ``scoring`` -> ``retriever``/``locomo`` -> ``jobs`` -> ``cli``;
host-side layers are imported on demand, never by this module.
"""

from earm_jax import policies as policies
from earm_jax.base import NOT_INSERTED as NOT_INSERTED
from earm_jax.base import Observation as Observation
from earm_jax.base import Policy as Policy
from earm_jax.base import Query as Query
from earm_jax.base import StepInfo as StepInfo
from earm_jax.base import Stream as Stream
from earm_jax.core.config import InputTypeError as InputTypeError
from earm_jax.core.config import OnlineSolver as OnlineSolver
from earm_jax.core.config import Parameters as Parameters
from earm_jax.core.config import SolverConfig as SolverConfig
from earm_jax.core.config import SolverState as SolverState
from earm_jax.core.online import online_solver as online_solver
from earm_jax.core.run import run as run
from earm_jax.core.run import run_batch as run_batch
from earm_jax.core.solvers import SOLVERS as SOLVERS
from earm_jax.policies import full_policy as full_policy
from earm_jax.policies import paper_policy as paper_policy
from earm_jax.policies import semantic_policy as semantic_policy
from earm_jax.policies import top_similarity_policy as top_similarity_policy
from earm_jax.settings import EarmSettings as EarmSettings

__version__ = "0.1.0"

__all__ = [
    "NOT_INSERTED",
    "SOLVERS",
    "EarmSettings",
    "InputTypeError",
    "Observation",
    "OnlineSolver",
    "Parameters",
    "Policy",
    "Query",
    "SolverConfig",
    "SolverState",
    "StepInfo",
    "Stream",
    "full_policy",
    "online_solver",
    "paper_policy",
    "policies",
    "run",
    "run_batch",
    "semantic_policy",
    "top_similarity_policy",
]
