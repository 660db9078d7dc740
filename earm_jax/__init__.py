"""earm_jax: experience-amortized LLM reranking for long-term agent memory, in JAX.

The core (this namespace) is pure JAX: no host I/O, no global JAX settings.
Host-side pieces live in submodules imported on demand: ``earm_jax.scoring``
(vLLM client), ``earm_jax.locomo`` (evaluation data), ``earm_jax.cli``.
"""

from earm_jax import policies as policies
from earm_jax.base import Observation as Observation
from earm_jax.base import Policy as Policy
from earm_jax.base import Query as Query
from earm_jax.base import StepInfo as StepInfo
from earm_jax.base import Stream as Stream
from earm_jax.policies import full_policy as full_policy
from earm_jax.policies import paper_policy as paper_policy
from earm_jax.policies import semantic_policy as semantic_policy
from earm_jax.policies import top_similarity_policy as top_similarity_policy
from earm_jax.run import run as run
from earm_jax.run import run_batch as run_batch
from earm_jax.solver import OnlineSolver as OnlineSolver
from earm_jax.solver import Parameters as Parameters
from earm_jax.solver import SolverConfig as SolverConfig
from earm_jax.solver import SolverState as SolverState
from earm_jax.solver import online_solver as online_solver

__version__ = "0.1.0"

__all__ = [
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
