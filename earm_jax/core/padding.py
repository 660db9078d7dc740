"""Zero-padding of state arrays to larger buffers (used when a state grows)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.core.config import Parameters


def pad(array: Any, length: int, axis: int = 0, value: Any = 0) -> jax.Array:
    """``array`` padded with ``value`` along ``axis`` to ``length``.

    Outside a trace the padding is done by NumPy: ``jnp.pad`` on concrete
    arrays compiles one XLA executable per shape, and each is kept for the
    life of the process, so a state that keeps growing kept adding them.
    """
    array = jnp.asarray(array)
    extra = length - array.shape[axis]
    if extra == 0:
        return array
    widths = [(0, 0)] * array.ndim
    widths[axis] = (0, extra)
    if isinstance(array, jax.core.Tracer):
        return jnp.pad(array, widths, constant_values=value)
    padded = np.pad(np.asarray(array), widths, constant_values=value)
    return jnp.asarray(padded, dtype=array.dtype)


def pad_parameters_like(tree: Parameters, num_memories: int, capacity: int) -> Any:
    """Zero-pads a Parameters-shaped pytree (e.g. Adam moments)."""
    return Parameters(
        global_mean=tree.global_mean,
        memory_bias=pad(tree.memory_bias, num_memories),
        memory_factors=pad(tree.memory_factors, num_memories),
        query_bias=pad(tree.query_bias, capacity),
        query_factors=pad(tree.query_factors, capacity),
    )


__all__ = ["pad", "pad_parameters_like"]
