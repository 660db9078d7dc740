"""Growing a solver state's fixed buffers (host side, outside jit).

Shapes are fixed inside jit, but a long-lived agent keeps adding memories and
queries. ``grow_state`` pads a state to a larger ``num_memories`` and/or
``capacity``; the grown state predicts, selects and fits exactly as before
(new memory rows are "not inserted yet", new query slots are empty). Growing
geometrically (e.g. doubling) keeps the number of recompiles logarithmic.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.incremental import IncrementalStats
from earm_jax.solver import Parameters, SolverConfig, SolverState
from earm_jax.types import PRNGKey

NOT_INSERTED = np.iinfo(np.int32).max
"""``insert_time`` of a memory row that holds no memory yet: never usable."""


def _pad(array: Any, length: int, axis: int = 0, value: Any = 0) -> jax.Array:
    array = jnp.asarray(array)
    extra = length - array.shape[axis]
    if extra == 0:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, extra)
    return jnp.pad(array, widths, constant_values=value)


def _pad_parameters_like(tree: Parameters, num_memories: int, capacity: int) -> Any:
    """Zero-pads a Parameters-shaped pytree (e.g. Adam moments)."""
    return Parameters(
        global_mean=tree.global_mean,
        memory_bias=_pad(tree.memory_bias, num_memories),
        memory_factors=_pad(tree.memory_factors, num_memories),
        query_bias=_pad(tree.query_bias, capacity),
        query_factors=_pad(tree.query_factors, capacity),
    )


def _grow_extras(extras: Any, solver: str, num_memories: int, capacity: int) -> Any:
    if solver == "als":
        return extras
    if solver == "incremental":
        # New memories have no history: zero statistics. The round-robin cursor
        # stays valid (it is taken modulo the number of stored rows).
        return IncrementalStats(
            gram=_pad(extras.gram, num_memories),
            rhs=_pad(extras.rhs, num_memories),
            cursor=extras.cursor,
        )
    if solver == "gradient":
        return jax.tree.map(
            lambda leaf: (
                _pad_parameters_like(leaf, num_memories, capacity)
                if isinstance(leaf, Parameters)
                else leaf
            ),
            extras,
            is_leaf=lambda leaf: isinstance(leaf, Parameters),
        )
    raise ValueError(f"grow_state does not support solver={solver!r} yet")


def grow_state(
    state: SolverState,
    config: SolverConfig,
    key: PRNGKey,
    num_memories: int | None = None,
    capacity: int | None = None,
) -> tuple[SolverState, SolverConfig]:
    """Pads ``state`` to ``num_memories`` memory rows and ``capacity`` query slots.

    Args:
      state: a state of ``config``'s shapes.
      config: its configuration.
      key: PRNG key for the random initial factors of the new memory rows.
      num_memories: new ``M`` (``>= config.num_memories``); ``None`` keeps it.
      capacity: new ``Q`` (``>= config.capacity``); ``None`` keeps it.

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
    extra = num_memories - config.num_memories
    new_factors = config.init_scale * jax.random.normal(
        key, (extra, config.rank), jnp.float32
    )
    grown = SolverState(
        global_mean=state.global_mean,
        memory_bias=_pad(state.memory_bias, num_memories),
        memory_factors=jnp.concatenate([state.memory_factors, new_factors]),
        query_bias=_pad(state.query_bias, capacity),
        query_factors=_pad(state.query_factors, capacity),
        insert_time=_pad(state.insert_time, num_memories, value=NOT_INSERTED),
        obs_index=_pad(state.obs_index, capacity),
        obs_value=_pad(state.obs_value, capacity),
        obs_mask=_pad(state.obs_mask, capacity, value=False),
        memory_count=_pad(state.memory_count, num_memories),
        count=state.count,
        solver_extras=_grow_extras(
            state.solver_extras, config.solver, num_memories, capacity
        ),
    )
    return grown, config._replace(num_memories=num_memories, capacity=capacity)


__all__ = ["NOT_INSERTED", "grow_state"]
