r"""The adaptive policy with the experience matrix beside it.

The adaptive policy (:mod:`earm_jax.policies.adaptive`) decides which
candidates to pay for; the causal online solver (:mod:`earm_jax.core.online`)
keeps every paid score in the query × memory matrix. Run together, each query
``t``:

1. reads the memory biases :math:`b_m` the solver fitted on queries ``< t``
   (nothing of query ``t`` or later);
2. scores its rounds with the adaptive policy, whose learned order ranks the
   unscored candidates by similarity *and* those biases;
3. hands its paid scores to the solver, which adds them to the history.

Pure and shape-static: one ``lax.scan`` over queries, ``vmap`` over streams.
The solver's ``max_budget`` must hold the most the policy may pay for one query
(its ``per_query_cap``), or paid scores would be dropped from the history.

>>> import jax, jax.numpy as jnp
>>> import earm_jax as ej
>>> from earm_jax.policies import adaptive as ad
>>> from earm_jax.policies.adaptive_history import run_adaptive_with_history
>>> cfg = ej.SolverConfig(num_memories=8, capacity=3, pool_size=8, max_budget=8,
...                       rank=0)
>>> solver = ej.online_solver(cfg, ej.top_similarity_policy(pool_size=8))
>>> policy = ad.adaptive_policy(ad.AdaptiveConfig(pool_size=8, round_sizes=(2, 2)))
>>> queries = ej.Query(jnp.tile(jnp.arange(8, dtype=jnp.int32), (3, 1)),
...                    jnp.tile(jnp.linspace(1, 0, 8), (3, 1)), jnp.ones((3, 8), bool))
>>> scores = jnp.zeros((3, 8)).at[:, 1].set(1.0)
>>> (ledger, state), info = run_adaptive_with_history(
...     policy, solver, jax.random.key(0), queries, scores, jnp.zeros(8, jnp.int32))
>>> info.calls.tolist(), int(state.count)
([2, 2, 2], 3)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.base import Observation, Query
from earm_jax.core.config import OnlineSolver, SolverState
from earm_jax.core.online import usable_candidates
from earm_jax.policies.adaptive import AdaptiveInfo, AdaptivePolicy, Ledger
from earm_jax.types import ArrayLike, PRNGKey


def check_history_room(policy: AdaptivePolicy, solver: OnlineSolver) -> None:
    """Raises ``ValueError`` when the solver's history rows are narrower than
    what the policy may pay for one query."""
    cap = policy.config.per_query_cap
    if solver.config.max_budget < cap:
        raise ValueError(
            f"solver max_budget={solver.config.max_budget} is below the adaptive "
            f"policy's per_query_cap={cap}: paid scores would be dropped"
        )


def adaptive_history_step(
    policy: AdaptivePolicy,
    solver: OnlineSolver,
    ledger: Ledger,
    state: SolverState,
    query: Query,
    scores_row: ArrayLike,
    usable: ArrayLike | None = None,
) -> tuple[tuple[Ledger, SolverState], AdaptiveInfo]:
    """One query: the policy's rounds (with the history's memory biases), then
    the solver observes what was paid. ``usable`` also excludes candidates the
    solver does not know yet."""
    usable_now = usable_candidates(state, query)
    if usable is not None:
        usable_now = usable_now & jnp.asarray(usable, bool)
    memory_bias = state.memory_bias[query.candidates]
    ledger, info = policy.step(ledger, query, scores_row, usable_now, memory_bias)
    state, _ = solver.observe(
        state, query, Observation(jnp.asarray(scores_row, jnp.float32), info.anchors)
    )
    return (ledger, state), info


def run_adaptive_with_history(
    policy: AdaptivePolicy,
    solver: OnlineSolver,
    key: PRNGKey,
    queries: Query,
    scores: ArrayLike,
    insert_time: ArrayLike,
    usable: ArrayLike | None = None,
    call_budget: ArrayLike | None = None,
) -> tuple[tuple[Ledger, SolverState], AdaptiveInfo]:
    """The adaptive policy and the solver over one stream (``lax.scan``; jit-able).

    Args:
      policy: from :func:`~earm_jax.policies.adaptive.adaptive_policy`.
      solver: from :func:`~earm_jax.core.online.online_solver` (its anchor
        policy is not used: the adaptive policy chooses the anchors).
      key: initialises the solver's factors.
      queries: :class:`Query` with a leading ``T`` axis.
      scores: ``float32[T, N]`` the scorer's answers (read only where paid).
      insert_time: ``int32[M]`` when each memory appears.
      usable: ``bool[T, N]`` optional further restriction.
      call_budget: overrides ``policy.config.call_budget`` (may be traced).

    Returns:
      ``((final ledger, final solver state), AdaptiveInfo with a leading T axis)``.
    """
    check_history_room(policy, solver)
    scores = jnp.asarray(scores, jnp.float32)
    state = solver.init(key, insert_time)
    if usable is None:
        usable = jnp.ones(scores.shape, bool)

    def one_query(carry, inputs):
        ledger, state = carry
        query, row, use = inputs
        return adaptive_history_step(policy, solver, ledger, state, query, row, use)

    return jax.lax.scan(
        one_query, (policy.init(call_budget), state), (queries, scores, usable)
    )


__all__ = ["adaptive_history_step", "check_history_room", "run_adaptive_with_history"]
