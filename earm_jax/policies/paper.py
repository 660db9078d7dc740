"""Ready-made policies: the paper's, and the baselines of docs/policies.md."""

from __future__ import annotations

import numbers
from collections.abc import Sequence

from earm_jax.base import AnchorFn, AnchorPolicy, BudgetFn
from earm_jax.core.config import InputTypeError, InputValueError
from earm_jax.policies.anchors import stratified_anchors, top_similarity_anchors
from earm_jax.policies.budget import PAPER_STAGE_RATIOS, constant_budget, stage_schedule


def paper_policy(
    pool_size: int = 200,
    high_fraction: float = 0.1,
    block_size: int = 10,
    stage_ratios: Sequence[float] = PAPER_STAGE_RATIOS,
    budget: BudgetFn | int | None = None,
) -> AnchorPolicy:
    """The paper's policy: the stage schedule and stratified anchor sampling.

    Args:
      pool_size: candidates per query ``N``; the stage budgets are fractions of it.
      high_fraction: size of the high-similarity stratum (default 0.1, docs/method.md).
      block_size: queries per stage of the stage schedule (paper: 10).
      stage_ratios: each stage's budget as a fraction of the pool (paper:
        200/80/50/40/35 of 200).
      budget: any other schedule instead of the stage schedule (then the
        policy does not record ``pool_size``: the schedule is the caller's),
        or an int (a NumPy integer too): that many anchors every query,
        converted to ``constant_budget(budget)``; an int above ``pool_size``
        (or below 0) raises :class:`~earm_jax.core.config.InputValueError`.
        A schedule's budget is not refused but clipped per query, by the
        solver, to ``[0, SolverConfig.max_budget]`` (``StepInfo.budget``
        reports the clipped value) and then to the candidates usable at that
        query, so a schedule above the pool pays for the whole pool, as Full
        does.

    Raises:
      InputValueError: an int ``budget`` outside ``[0, pool_size]``, or a bad
        stage argument.
      InputTypeError: a ``budget`` that is neither a schedule nor an int.
    """
    return _staged(
        pool_size, block_size, stage_ratios, budget, stratified_anchors(high_fraction)
    )


def top_similarity_policy(
    pool_size: int = 200,
    block_size: int = 10,
    stage_ratios: Sequence[float] = PAPER_STAGE_RATIOS,
    budget: BudgetFn | int | None = None,
) -> AnchorPolicy:
    """Scores the ``B_t`` most similar candidates (the strong equal-calls baseline)."""
    return _staged(
        pool_size, block_size, stage_ratios, budget, top_similarity_anchors()
    )


def _staged(
    pool_size: int,
    block_size: int,
    stage_ratios: Sequence[float],
    budget: BudgetFn | int | None,
    anchors: AnchorFn,
) -> AnchorPolicy:
    """``anchors`` under the stage schedule, or under ``budget`` when one is
    given (then the policy does not record ``pool_size``); an int budget is
    :func:`constant_budget` of it, refused above the pool."""
    if isinstance(budget, numbers.Integral) and not isinstance(budget, bool):
        budget = int(budget)  # a NumPy integer too, e.g. read from an array
        if not 0 <= budget <= pool_size:
            raise InputValueError(
                f"budget must be in [0, pool_size={pool_size}], got {budget} (a "
                "query never pays for more than its pool)"
            )
        return AnchorPolicy(
            budget=constant_budget(budget), anchors=anchors, pool_size=pool_size
        )
    if budget is not None:
        if not callable(budget):
            raise InputTypeError(
                f"budget must be a schedule (count -> int32[]) or an int, got "
                f"{type(budget).__name__} {budget!r}"
            )
        return AnchorPolicy(budget=budget, anchors=anchors, pool_size=None)
    schedule = stage_schedule(pool_size, block_size, stage_ratios)
    return AnchorPolicy(budget=schedule, anchors=anchors, pool_size=pool_size)


def full_policy(pool_size: int = 200) -> AnchorPolicy:
    """Scores every candidate (``N`` calls per query)."""
    return AnchorPolicy(
        budget=constant_budget(pool_size),
        anchors=top_similarity_anchors(),
        pool_size=pool_size,
    )


def semantic_policy() -> AnchorPolicy:
    """Scores nothing: similarity order (0 calls)."""
    return AnchorPolicy(budget=constant_budget(0), anchors=top_similarity_anchors())


__all__ = ["full_policy", "paper_policy", "semantic_policy", "top_similarity_policy"]
