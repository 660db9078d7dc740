"""Batched LAPACK calls that cannot stop a CPU program: a ``vmap`` of a
function that factors or solves, run one batch member at a time on CPU.

jaxlib's CPU LAPACK kernels (Cholesky, triangular and LU solves) split a
batch over XLA's intra-op thread pool and wait for the pieces on the pool
thread that called them. When one loop step makes two such batched calls,
every pool thread can end up in that wait with none left to run the pieces,
and the program stops for good, all threads asleep (docs/performance.md;
``experiments/cpu_lapack_hang.py`` measures it). An unbatched call has
nothing to split and waits for nothing.

:func:`one_at_a_time_on_cpu` wraps a function so that on CPU its ``vmap``
is a loop over the batch (``jax.custom_batching.sequential_vmap``), each
member's calls unbatched; on other platforms, whose kernels are the
vendor's, it stays the batched function. Unbatched, it is the function
itself on every platform.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar

from jax import lax
from jax.custom_batching import sequential_vmap

F = TypeVar("F", bound=Callable)


def one_at_a_time_on_cpu(fun: F) -> F:
    """``fun`` (positional array or pytree arguments only, nothing traced
    closed over), whose ``vmap`` runs the batch one member at a time on CPU
    and batched elsewhere."""
    sequential = sequential_vmap(fun)

    @functools.wraps(fun)
    def wrapped(*args):
        return lax.platform_dependent(*args, cpu=sequential, default=fun)

    return wrapped  # type: ignore[return-value]


__all__ = ["one_at_a_time_on_cpu"]
