"""The retriever's compiled functions: the solver's select/observe and the best
preset's round functions, jitted once per shape and shared by every retriever
of the process, and the dummy run that compiles them ahead of need."""

from __future__ import annotations

import threading
from typing import Any

import jax
import jax.numpy as jnp

from earm_jax.base import Observation, Query
from earm_jax.core.config import SolverConfig
from earm_jax.core.online import online_solver
from earm_jax.policies.adaptive import adaptive_policy
from earm_jax.retriever.config import RetrieverConfig

# Jitted select/observe per (solver shapes, policy): shared by every retriever
# of the process (tenants, reopenings), so nothing compiles twice.
_FUNCTIONS: dict[tuple, tuple[Any, Any]] = {}
_FUNCTIONS_LOCK = threading.Lock()


def functions_for(solver_config: SolverConfig, config: RetrieverConfig):
    key = (solver_config, policy_key(config))
    with _FUNCTIONS_LOCK:
        if key not in _FUNCTIONS:
            solver = online_solver(solver_config, build_policy(config))
            _FUNCTIONS[key] = (jax.jit(solver.select), jax.jit(solver.observe))
        return _FUNCTIONS[key]


def adaptive_for(config: RetrieverConfig):
    """The ``best`` preset's jitted round functions, or ``None`` (paper preset)."""
    adaptive_config = config.adaptive_config(config.pool_size)
    if adaptive_config is None:
        return None
    key = ("adaptive", adaptive_config)
    with _FUNCTIONS_LOCK:
        if key not in _FUNCTIONS:
            policy = adaptive_policy(adaptive_config)
            _FUNCTIONS[key] = (
                policy,
                jax.jit(policy.begin),
                jax.jit(policy.select_round),
                jax.jit(policy.observe_round),
                jax.jit(policy.finish),
            )
        return _FUNCTIONS[key]


def policy_key(config: RetrieverConfig) -> tuple:
    return (config.pool_size, tuple(sorted(config.earm_fields().items())))


def build_policy(config: RetrieverConfig):
    """The retriever's anchor policy: through the shared settings object."""
    return config.policy(config.pool_size)


def solver_config_of(config: RetrieverConfig, num_memories: int, capacity: int):
    return config.solver_config(num_memories, capacity, config.pool_size)


def run_dummy(state, solver_config: SolverConfig, config: RetrieverConfig, key) -> None:
    """Runs every compiled function of ``config`` once on an empty pool, so the
    shapes of ``state`` are compiled before a query needs them."""
    select, observe = functions_for(solver_config, config)
    size = config.pool_size
    query = Query(
        jnp.zeros(size, jnp.int32),
        jnp.zeros(size, jnp.float32),
        jnp.zeros(size, bool),
    )
    select(key, state, query)
    nothing = Observation(jnp.zeros(size), jnp.zeros(size, bool))
    observe(state, query, nothing)
    adaptive = adaptive_for(config)
    if adaptive is not None:  # the best preset's round functions too
        policy, begin, select_round, observe_round, finish = adaptive
        ledger = policy.init()
        progress = begin(ledger, query, query.valid, jnp.zeros(size))
        select_round(ledger, progress)
        progress = observe_round(ledger, progress, nothing, query.valid)
        finish(ledger, progress)


__all__ = [
    "adaptive_for",
    "build_policy",
    "functions_for",
    "run_dummy",
    "solver_config_of",
]
