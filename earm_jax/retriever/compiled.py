"""The retriever's compiled functions: the solver's select/observe and the best
preset's round functions, jitted once per shape and shared by every retriever
of the process, and the dummy run that compiles them ahead of need."""

from __future__ import annotations

import functools
import threading
import weakref
from typing import Any

import jax
import jax.numpy as jnp

from earm_jax.base import Observation, Query, QueryContext, SideInputs
from earm_jax.core.config import SolverConfig
from earm_jax.core.online import online_solver
from earm_jax.policies.adaptive import adaptive_policy
from earm_jax.policies.learned_calls import learned_calls_policy
from earm_jax.retriever.config import RetrieverConfig

# Jitted select/observe per (solver shapes, policy): shared by every retriever
# of the process (tenants, reopenings), so nothing compiles twice.
_FUNCTIONS: dict[tuple, tuple[Any, Any]] = {}
_FUNCTIONS_LOCK = threading.Lock()
# The experiences of the process's retrievers (open or not: a closed one holds
# no shape), so a shape is dropped only when none holds it or could still grow
# into it.
_HOLDERS: weakref.WeakSet = weakref.WeakSet()


def functions_for(solver_config: SolverConfig, config: RetrieverConfig):
    key = (solver_config, policy_key(config))
    with _FUNCTIONS_LOCK:
        if key not in _FUNCTIONS:
            solver = online_solver(solver_config, build_policy(config))
            _FUNCTIONS[key] = (jax.jit(solver.select), jax.jit(solver.observe))
        return _FUNCTIONS[key]


def track(holder) -> None:
    """Counts ``holder`` (a retriever's experience: its ``solver_config``,
    ``config`` and ``active``) among the holders of compiled shapes until it
    is closed or collected."""
    with _FUNCTIONS_LOCK:
        _HOLDERS.add(holder)


def left_behind(solver_config: SolverConfig, config: RetrieverConfig) -> int:
    """After a retriever grew out of ``solver_config``: drops the compiled
    functions of every shape of its kind that no open retriever holds or may
    still grow into (the shape just left; a shape compiled ahead that growth
    went past, e.g. doubled memory rows no add needed), except the initial
    shape, where every new folder starts; returns how many. Each compiled
    executable keeps its memory until it is dropped.
    """
    initial = solver_config_of(config, config.initial_memories, config.initial_queries)
    policy = policy_key(config)

    def reachable(shape: SolverConfig, held: SolverConfig) -> bool:
        same_kind = (
            held._replace(num_memories=shape.num_memories, capacity=shape.capacity)
            == shape
        )
        return (
            same_kind
            and held.num_memories <= shape.num_memories
            and held.capacity <= shape.capacity
        )

    with _FUNCTIONS_LOCK:
        held = [
            other.solver_config
            for other in list(_HOLDERS)
            if other.active
            and isinstance(other.solver_config, SolverConfig)
            and policy_key(other.config) == policy
        ]
        stale = [
            key
            for key in _FUNCTIONS
            if isinstance(key[0], SolverConfig)
            and key[1] == policy
            and key[0] != initial
            and key[0]._replace(
                num_memories=solver_config.num_memories,
                capacity=solver_config.capacity,
            )
            == solver_config
            and not any(reachable(key[0], shape) for shape in held)
        ]
        for key in stale:
            del _FUNCTIONS[key]
    return len(stale)


def adaptive_for(config: RetrieverConfig, embedding_dim: int = 0):
    """The jitted round functions of a preset that pays in rounds (``best``,
    ``learned_calls``: the policy, ``begin``, ``select``, ``observe``,
    ``finish``), or ``None`` (``paper``, ``top_similarity``).
    ``embedding_dim``: the width of the embeddings the calls read
    (``learned_calls``, or ``best`` with an embedding call order)."""
    if config.preset == "learned_calls":
        policy_of = functools.partial(
            learned_calls_policy,
            embedding_dim,
            config.pool_size,
            budget=config.policy(config.pool_size).budget,
        )
        key = ("learned_calls", config.pool_size, config.call_budget, embedding_dim)
    else:
        adaptive_config = config.adaptive_config(config.pool_size)
        if adaptive_config is None:
            return None
        if config.reads_embeddings:
            adaptive_config = adaptive_config._replace(embedding_dim=embedding_dim)
        policy_of = functools.partial(adaptive_policy, adaptive_config)
        key = ("adaptive", adaptive_config)
    with _FUNCTIONS_LOCK:
        if key not in _FUNCTIONS:
            policy = policy_of()
            _FUNCTIONS[key] = (
                policy,
                jax.jit(policy.begin),
                jax.jit(policy.select),
                jax.jit(policy.observe),
                jax.jit(policy.finish),
            )
        return _FUNCTIONS[key]


def round_context(
    usable, count: int, room: int, memory_bias=None, side: SideInputs | None = None
) -> QueryContext:
    """A round preset's :class:`~earm_jax.base.QueryContext`, typed the same
    way at every query so its round functions compile once."""
    usable = jnp.asarray(usable, bool)
    if memory_bias is None:
        memory_bias = jnp.zeros(usable.shape, jnp.float32)
    if side is not None:
        side = SideInputs(
            jnp.asarray(side.query_embedding, jnp.float32),
            jnp.asarray(side.candidate_embeddings, jnp.float32),
        )
    return QueryContext(
        usable,
        jnp.asarray(count, jnp.int32),
        jnp.asarray(room, jnp.int32),
        jnp.asarray(memory_bias, jnp.float32),
        side,
    )


def policy_key(config: RetrieverConfig) -> tuple:
    return (config.pool_size, tuple(sorted(config.earm_fields().items())))


def build_policy(config: RetrieverConfig):
    """The retriever's anchor policy: through the shared settings object."""
    return config.policy(config.pool_size)


def solver_config_of(config: RetrieverConfig, num_memories: int, capacity: int):
    return config.solver_config(num_memories, capacity, config.pool_size)


def run_dummy(
    state,
    solver_config: SolverConfig,
    config: RetrieverConfig,
    key,
    embedding_dim: int = 0,
) -> None:
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
    if config.reads_embeddings and not embedding_dim:
        return  # no memory yet: the width the regression compiles for is unknown
    adaptive = adaptive_for(config, embedding_dim)
    if adaptive is not None:  # the round preset's functions too
        policy, begin, select_round, observe_round, finish = adaptive
        ledger = policy.init()
        side = None
        if config.reads_embeddings:
            side = SideInputs(
                jnp.zeros(embedding_dim), jnp.zeros((size, embedding_dim))
            )
        context = round_context(query.valid, 0, size, side=side)
        progress = begin(None, ledger, query, context)
        select_round(ledger, progress)
        progress = observe_round(ledger, progress, query.valid, nothing)
        finish(ledger, progress)


__all__ = [
    "adaptive_for",
    "build_policy",
    "functions_for",
    "left_behind",
    "round_context",
    "run_dummy",
    "solver_config_of",
    "track",
]
