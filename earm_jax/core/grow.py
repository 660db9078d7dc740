"""Growing a solver state's fixed buffers (host side, outside jit).

Shapes are fixed inside jit, but a long-lived agent keeps adding memories and
queries. ``grow_state`` pads a state to a larger ``num_memories`` and/or
``capacity``; the grown state predicts, selects and fits exactly as before
(new memory rows are "not inserted yet", new query slots are empty). Growing
geometrically (e.g. doubling) keeps the number of recompiles logarithmic.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.base import NOT_INSERTED
from earm_jax.core.config import SolverConfig, SolverState
from earm_jax.core.entry_log import EntryLog
from earm_jax.core.padding import pad
from earm_jax.core.solvers import get_solver
from earm_jax.types import PRNGKey


def grow_state(
    state: SolverState,
    config: SolverConfig,
    key: PRNGKey,
    num_memories: int | None = None,
    capacity: int | None = None,
    entry_capacity: int | None = None,
) -> tuple[SolverState, SolverConfig]:
    """Pads ``state`` to ``num_memories`` memory rows and ``capacity`` query slots.

    Args:
      state: a state of ``config``'s shapes.
      config: its configuration.
      key: PRNG key for the random initial factors of the new memory rows.
      num_memories: new ``M`` (``>= config.num_memories``); ``None`` keeps it.
      capacity: new ``Q`` (``>= config.capacity``); ``None`` keeps it.
      entry_capacity: new ``E`` of a log-layout history
        (``>= config.entry_capacity``); ``None`` keeps it.

    Returns:
      ``(grown state, grown config)``. Rebuild the solver with the new config.
    """
    num_memories = config.num_memories if num_memories is None else num_memories
    capacity = config.capacity if capacity is None else capacity
    if num_memories < config.num_memories:
        raise ValueError(
            f"num_memories={num_memories} is smaller than the state's "
            f"{config.num_memories}"
        )
    if capacity < config.capacity:
        raise ValueError(
            f"capacity={capacity} is smaller than the state's {config.capacity}"
        )
    entry_capacity = config.entry_capacity if entry_capacity is None else entry_capacity
    if entry_capacity < config.entry_capacity or (
        entry_capacity and not config.entry_capacity
    ):
        raise ValueError(
            f"entry_capacity={entry_capacity} cannot replace the state's "
            f"{config.entry_capacity} (a log only grows; rows stay rows)"
        )
    history_log = state.history_log
    if isinstance(history_log, EntryLog):
        size = entry_capacity + config.max_budget
        history_log = EntryLog(
            entry_memory=pad(history_log.entry_memory, size),
            entry_value=pad(history_log.entry_value, size),
            query_start=pad(history_log.query_start, capacity),
            query_length=pad(history_log.query_length, capacity),
            num_entries=history_log.num_entries,
        )
    extra = num_memories - config.num_memories
    new_factors = config.init_scale * jax.random.normal(
        key, (extra, config.rank), jnp.float32
    )
    grown = SolverState(
        global_mean=state.global_mean,
        memory_bias=pad(state.memory_bias, num_memories),
        memory_factors=jnp.concatenate([state.memory_factors, new_factors]),
        query_bias=pad(state.query_bias, capacity),
        query_factors=pad(state.query_factors, capacity),
        insert_time=pad(state.insert_time, num_memories, value=NOT_INSERTED),
        obs_index=pad(state.obs_index, capacity),
        obs_value=pad(state.obs_value, capacity),
        obs_mask=pad(state.obs_mask, capacity, value=False),
        memory_count=pad(state.memory_count, num_memories),
        count=state.count,
        solver_extras=get_solver(config.solver).grow_extras(
            state.solver_extras, num_memories, capacity
        ),
        history_log=history_log,
        policy_state=state.policy_state,
    )
    return grown, config._replace(
        num_memories=num_memories, capacity=capacity, entry_capacity=entry_capacity
    )


__all__ = ["NOT_INSERTED", "grow_state"]
