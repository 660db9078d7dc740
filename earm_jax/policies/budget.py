"""Budget schedules: ``count -> int32[]`` direct-scoring calls for query ``count``.

Written like optax schedules: validated at construction, a pure jnp body.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import jax.numpy as jnp

from earm_jax.base import BudgetFn
from earm_jax.core.config import InputValueError
from earm_jax.types import Array, ArrayLike

PAPER_STAGE_RATIOS = (1.0, 0.4, 0.25, 0.2, 0.175)
"""The paper's stages as fractions of a 200-candidate pool: 200, 80, 50, 40, 35."""


def stage_schedule(
    pool_size: int,
    block_size: int = 10,
    stage_ratios: Sequence[float] = PAPER_STAGE_RATIOS,
) -> BudgetFn:
    """Blocks of ``block_size`` queries; block ``i`` gets ``stage_ratios[i]`` of N.

    The last ratio holds for good. With ``pool_size=200`` and the defaults this is
    the paper's schedule: 200, 80, 50, 40, then 35 anchors per query.

    Examples:
      >>> schedule = stage_schedule(pool_size=200)
      >>> [int(schedule(t)) for t in (0, 9, 10, 20, 30, 40, 1000)]
      [200, 200, 80, 50, 40, 35, 35]
    """
    if not isinstance(pool_size, int) or pool_size < 1:
        raise InputValueError(f"pool_size must be a positive int, got {pool_size!r}")
    if not isinstance(block_size, int) or block_size < 1:
        raise InputValueError(f"block_size must be a positive int, got {block_size!r}")
    ratios = [float(r) for r in stage_ratios]
    if not ratios or any(not 0.0 <= r <= 1.0 for r in ratios):
        raise InputValueError(
            f"stage_ratios must be a non-empty list in [0, 1], got {stage_ratios!r}"
        )
    budgets = jnp.asarray([round(r * pool_size) for r in ratios], jnp.int32)

    def schedule(count: ArrayLike) -> Array:
        stage = jnp.minimum(
            jnp.asarray(count, jnp.int32) // block_size, len(ratios) - 1
        )
        return budgets[stage]

    return schedule


def constant_budget(budget: int) -> BudgetFn:
    """The same budget for every query (``0``: Semantic; the pool size: Full).

    The schedule does not know the pool: a budget above
    ``SolverConfig.max_budget`` is clipped to it by the solver at every query
    (``StepInfo.budget`` reports the clipped value), and the anchors are
    further limited to the candidates usable at that query. ``paper_policy``
    and ``top_similarity_policy`` refuse an int budget above their
    ``pool_size``.

    >>> int(constant_budget(35)(123))
    35
    """
    if (
        isinstance(budget, bool)
        or not isinstance(budget, numbers.Integral)
        or budget < 0
    ):
        raise InputValueError(f"budget must be an int >= 0, got {budget!r}")
    budget = int(budget)

    def schedule(count: ArrayLike) -> Array:
        return jnp.full(jnp.shape(count), budget, jnp.int32)

    return schedule


def scaled_schedule(schedule: BudgetFn, scale: ArrayLike, pool_size: int) -> BudgetFn:
    """``schedule`` times ``scale``, rounded and clipped to ``[0, pool_size]``.

    ``scale`` may be a traced value (a budget sweep then reuses one compiled
    program); a concrete negative scale is refused here.

    >>> int(scaled_schedule(stage_schedule(200), 0.5, 200)(40))
    18
    """
    if isinstance(scale, int | float) and scale < 0:
        raise InputValueError(f"scale must be >= 0, got {scale!r}")

    def scaled(count: ArrayLike) -> Array:
        budget = jnp.round(schedule(count).astype(jnp.float32) * scale)
        return jnp.clip(budget, 0, pool_size).astype(jnp.int32)

    return scaled


__all__ = ["PAPER_STAGE_RATIOS", "constant_budget", "scaled_schedule", "stage_schedule"]
