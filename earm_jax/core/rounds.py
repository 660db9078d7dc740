"""A policy's rounds for one query (the :class:`~earm_jax.base.Policy`
protocol's loop): traced over a row of known answers, or on the host with a
live scorer between rounds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.base import (
    Decision,
    Observation,
    Policy,
    Query,
    QueryContext,
    SideInputs,
)
from earm_jax.types import ArrayLike, PRNGKey


def traced_rounds(
    policy: Policy,
    key: PRNGKey,
    carry: Any,
    query: Query,
    context: QueryContext,
    answers: ArrayLike,
) -> tuple[Any, Decision]:
    """One query's rounds with the scorer's answers known up front (a
    simulation or recorded answers): each round reveals ``answers`` only
    where it asks. Jit-able.

    Returns:
      ``(carry for the next query, the query's decision)``.
    """
    progress = policy.begin(key, carry, query, context)
    return policy.finish(carry, play_rounds(policy, carry, progress, answers))


def play_rounds(policy: Policy, carry: Any, progress: Any, answers: ArrayLike) -> Any:
    """The rounds from ``progress`` on, each revealing ``answers`` where it
    asks; a one-round policy runs without a loop. Returns the final progress."""
    answers = jnp.asarray(answers, jnp.float32)

    def one_round(progress):
        requested = policy.select(carry, progress)
        return policy.observe(
            carry, progress, requested, Observation(answers, requested)
        )

    if policy.num_rounds == 1:
        return one_round(progress)
    return jax.lax.fori_loop(0, policy.num_rounds, lambda _, p: one_round(p), progress)


Pay = Callable[[np.ndarray], tuple[ArrayLike, ArrayLike]]
"""``pay(positions) -> (values, ok)``: answers one round's calls (pool
positions); ``ok`` marks the answers that came back."""


def host_rounds(
    policy: Policy, carry: Any, progress: Any, pay: Pay, size: int
) -> tuple[Any, np.ndarray]:
    """The rounds from ``progress`` on, on the host: ``pay`` is called once
    per round that asks for anything (one batched scorer request each), and
    the loop stops as soon as a round asks for nothing.

    Returns:
      ``(final progress, float32[N] the answers that came back, 0 elsewhere)``.
    """
    answers = np.zeros(size, np.float32)
    for _ in range(policy.num_rounds):
        requested = np.asarray(policy.select(carry, progress), bool)
        if not requested.any():
            break
        positions = np.flatnonzero(requested)
        values, ok = pay(positions)
        ok = np.asarray(ok, bool)
        mask = np.zeros(size, bool)
        mask[positions] = ok
        answers[positions] = np.where(ok, np.asarray(values, np.float32), 0.0)
        progress = policy.observe(
            carry,
            progress,
            jnp.asarray(requested),
            Observation(jnp.asarray(answers), jnp.asarray(mask)),
        )
    return progress, answers


def pay_rounds(
    policy: Policy,
    key: PRNGKey,
    carry: Any,
    query: Query,
    context: QueryContext,
    pay: Pay,
) -> tuple[Any, Decision]:
    """One query's rounds on the host: ``pay`` is called once per round that
    asks for anything (one batched scorer request each), and the loop stops
    as soon as a round asks for nothing.

    Returns:
      ``(carry for the next query, the query's decision)``.
    """
    progress = policy.begin(key, carry, query, context)
    size = int(np.shape(query.candidates)[-1])
    progress, _ = host_rounds(policy, carry, progress, pay, size)
    return policy.finish(carry, progress)


def pay_query(
    solver: Any,
    key: PRNGKey,
    state: Any,
    query: Query,
    pay: Pay,
    side: SideInputs | None = None,
) -> tuple[Any, Any]:
    """One query through an :class:`~earm_jax.OnlineSolver` with a live
    scorer: the policy's rounds on the host (``pay`` once per round that asks
    for anything), then the solver stores what came back.

    Equal to ``solver.step`` given the same answers (tested), for every
    policy; the scorer is paid only for what the rounds ask.

    Returns:
      ``(state after the query, StepInfo)``.
    """
    progress = solver.begin(key, state, query, side)
    size = int(np.shape(query.candidates)[-1])
    progress, answers = host_rounds(
        solver.policy, state.policy_state, progress, pay, size
    )
    return solver.finish(state, query, progress, jnp.asarray(answers))


__all__ = [
    "Pay",
    "host_rounds",
    "pay_query",
    "pay_rounds",
    "play_rounds",
    "traced_rounds",
]
