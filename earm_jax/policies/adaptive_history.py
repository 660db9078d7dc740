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

from earm_jax.base import Query, SideInputs
from earm_jax.core.config import OnlineSolver, SolverState
from earm_jax.core.online import online_solver
from earm_jax.core.rounds import play_rounds
from earm_jax.policies.adaptive import AdaptiveInfo, AdaptivePolicy, Ledger
from earm_jax.types import ArrayLike, PRNGKey


def with_adaptive_policy(policy: AdaptivePolicy, solver: OnlineSolver) -> OnlineSolver:
    """``solver``'s settings and algorithm with ``policy`` choosing the calls.

    Raises :class:`~earm_jax.InputValueError` when the solver's history rows
    are narrower than what the policy may pay for one query.
    """
    return online_solver(solver.config, policy, solver.algorithm)


def run_adaptive_with_history(
    policy: AdaptivePolicy,
    solver: OnlineSolver,
    key: PRNGKey,
    queries: Query,
    scores: ArrayLike,
    insert_time: ArrayLike,
    usable: ArrayLike | None = None,
    call_budget: ArrayLike | None = None,
    query_embeddings: ArrayLike | None = None,
    memory_embeddings: ArrayLike | None = None,
) -> tuple[tuple[Ledger, SolverState], AdaptiveInfo]:
    """The adaptive policy and the solver over one stream (``lax.scan``;
    jit-able): :func:`~earm_jax.run` of ``online_solver(solver.config,
    policy)``, keeping the policy's own per-query info.

    Args:
      policy: from :func:`~earm_jax.policies.adaptive.adaptive_policy`.
      solver: from :func:`~earm_jax.core.online.online_solver`: its settings
        and algorithm (its policy is replaced by ``policy``).
      key: initialises the solver's factors.
      queries: :class:`Query` with a leading ``T`` axis.
      scores: ``float32[T, N]`` the scorer's answers (read only where paid).
      insert_time: ``int32[M]`` when each memory appears.
      usable: ``bool[T, N]`` optional further restriction.
      call_budget: overrides ``policy.config.call_budget`` (may be traced).
      query_embeddings: ``float32[T, D]`` unit rows, with ``memory_embeddings``
        ``float32[M, D]``: the :class:`~earm_jax.base.SideInputs` of each query
        (the embedding call orders read them).

    Returns:
      ``((final ledger, final solver state), AdaptiveInfo with a leading T axis)``.
    """
    solver = with_adaptive_policy(policy, solver)
    scores = jnp.asarray(scores, jnp.float32)
    if usable is not None:
        queries = queries._replace(valid=queries.valid & jnp.asarray(usable, bool))
    state = solver.init(key, insert_time)
    state = state._replace(policy_state=policy.init(key, call_budget))

    if (query_embeddings is None) != (memory_embeddings is None):
        raise ValueError("pass query_embeddings and memory_embeddings together")
    if query_embeddings is not None:
        query_embeddings = jnp.asarray(query_embeddings, jnp.float32)
        memory_embeddings = jnp.asarray(memory_embeddings, jnp.float32)

    def one_query(state, inputs):
        query, row, embedding = inputs
        side = None
        if embedding is not None:
            side = SideInputs(embedding, memory_embeddings[query.candidates])
        progress = play_rounds(
            policy, state.policy_state, solver.begin(key, state, query, side), row
        )
        # The policy's own info beside the solver's; XLA computes the shared
        # finish once.
        _, info = policy.finish(state.policy_state, progress)
        state, _ = solver.finish(state, query, progress, row)
        return state, info

    state, info = jax.lax.scan(one_query, state, (queries, scores, query_embeddings))
    return (state.policy_state, state), info
