"""The ``best`` policy over a batch of streams, as the studies of its design
choices ran it (``benchmarks/adaptive_locomo.py``, ``experiments/``).

With the learned order of the unscored (``unscored_order="learned"``) it runs
beside a solver of Mixed's settings (:class:`~earm_jax.settings.EarmSettings`
at ``rank``, Top-similarity's schedule, rows as wide as the pool), with one key
per stream folded from key 0; otherwise the policy runs alone.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.base import Stream
from earm_jax.core.online import online_solver
from earm_jax.policies import adaptive as ad
from earm_jax.policies.adaptive_history import run_adaptive_with_history
from earm_jax.policies.paper import top_similarity_policy
from earm_jax.settings import EarmSettings
from earm_jax.types import ArrayLike


def run_best(
    policy: ad.AdaptivePolicy, streams: Stream, usable: ArrayLike, rank: int = 8
) -> tuple[ad.Ledger, ad.AdaptiveInfo]:
    """``best`` over every stream of ``streams`` (a ``vmap``; jit the caller).

    Args:
      policy: from :func:`~earm_jax.policies.adaptive.adaptive_policy`.
      streams: a :class:`~earm_jax.base.Stream` with a leading ``S`` axis.
      usable: ``bool[S, T, N]`` the candidates that may be scored.
      rank: the rank of the solver beside the learned order.

    Returns:
      ``(final ledgers, AdaptiveInfo)``, each leaf with leading ``S`` (and
      ``T``) axes.
    """
    if policy.config.unscored_order != "learned":
        return jax.vmap(lambda q, s, u: ad.run_adaptive(policy, q, s, u))(
            streams.queries, streams.scores, usable
        )
    num_streams, num_queries, pool = streams.scores.shape
    solver = online_solver(
        EarmSettings(rank=rank).solver_config(
            int(streams.insert_time.shape[1]), num_queries, pool
        ),
        top_similarity_policy(pool_size=pool),
    )
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(0), i))(
        jnp.arange(num_streams)
    )
    (ledger, _), info = jax.vmap(
        lambda k, q, s, t, u: run_adaptive_with_history(policy, solver, k, q, s, t, u)
    )(keys, streams.queries, streams.scores, streams.insert_time, usable)
    return ledger, info


__all__ = ["run_best"]
