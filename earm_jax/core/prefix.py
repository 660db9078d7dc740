"""Running counts of boolean masks as one matrix product.

``jnp.cumsum`` of a ``[S, N]`` mask compiles on CPU into a blocked scan of
several operations (``reduce-window``, pads, slices), and the step ran five
of them per query. A running count is also the product with an
upper-triangular matrix of ones: one ``dot``, exact in float32 (every partial
sum is an integer below ``2**24``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.types import Array, ArrayLike

# The N x N matrix grows as N^2 (4 MB at 1,024, twice the pool sizes in use);
# longer masks keep the scan. Only N = 200 was timed.
_MAX_DOT_LENGTH = 1024


def running_count(mask: ArrayLike) -> Array:
    """``int32[..., N]``: the number of ``True`` in ``mask[..., :i + 1]``.

    Equal to ``jnp.cumsum(mask, axis=-1, dtype=jnp.int32)``.
    """
    mask = jnp.asarray(mask, bool)
    length = mask.shape[-1]
    if length > _MAX_DOT_LENGTH:
        return jnp.cumsum(mask, axis=-1, dtype=jnp.int32)
    # upper[j, i] = 1 where j <= i: column i sums positions 0..i.
    upper = jnp.triu(jnp.ones((length, length), jnp.float32))
    counts = jnp.matmul(
        mask.astype(jnp.float32), upper, precision=jax.lax.Precision.HIGHEST
    )
    return counts.astype(jnp.int32)


__all__ = ["running_count"]
