r"""The learned order of the unscored candidates.

Among themselves, the unscored candidates are ordered by a relevance model
learned online: the ridge regression of the scored candidates' posterior
relevance on (1, standardised similarity, standardised memory bias), where the
memory bias :math:`b_m` comes from the experience matrix of earlier queries
(:mod:`earm_jax.policies.adaptive_history` runs the solver beside the policy).
Where history says a memory is often evidence, it rises among the unscored;
where it says little, the fit leans on similarity. Without a memory bias the
order is by similarity (or its reverse, should the data say so). The ledger
carries the regression's normal equations (``order_gram``, ``order_rhs``).
"""

from __future__ import annotations

import jax.numpy as jnp

from earm_jax.core.model import standardised_similarity
from earm_jax.policies.adaptive.config import AdaptiveConfig
from earm_jax.policies.adaptive.state import Ledger, RoundState
from earm_jax.types import Array, ArrayLike


def order_features(
    similarity: ArrayLike, usable: ArrayLike, memory_bias: ArrayLike | None = None
) -> Array:
    """``float32[N, 3]``: (1, similarity, memory bias), both z-scored over the
    usable candidates; rows of unusable candidates are 0, and so is the bias
    column when no memory bias is given (or it has no spread)."""
    usable = jnp.asarray(usable, bool)
    similarity_z = standardised_similarity(similarity, usable)
    if memory_bias is None:
        bias_z = jnp.zeros_like(similarity_z)
    else:
        bias_z = standardised_similarity(memory_bias, usable)
    ones = usable.astype(jnp.float32)
    return jnp.stack([ones, similarity_z, bias_z], axis=-1)


def order_weights(gram: ArrayLike, rhs: ArrayLike, ridge: float) -> Array:
    """``float32[3]``: the ridge solution of the learned order's regression."""
    gram = jnp.asarray(gram, jnp.float32)
    return jnp.linalg.solve(
        gram + ridge * jnp.eye(gram.shape[-1], dtype=gram.dtype),
        jnp.asarray(rhs, jnp.float32),
    )


def unscored_tier(config: AdaptiveConfig, ledger: Ledger, rs: RoundState) -> Array:
    """``float32[N]``: the unscored candidates' place among themselves, in
    (0.5, 1.5): by similarity rank, or (``unscored_order="learned"``) by the
    order learned from earlier queries' answers, ties by similarity rank."""
    rank = rs.rank.astype(jnp.float32)
    if config.unscored_order != "learned":
        return 1.0 - 1e-3 * rank
    weights = order_weights(ledger.order_gram, ledger.order_rhs, config.order_ridge)
    # Scale-free: only the direction of the weights orders candidates.
    direction = weights[1:] / (jnp.sum(jnp.abs(weights[1:])) + 1e-6)
    learned = rs.features[:, 1:] @ direction
    return 1.0 + 0.45 * jnp.tanh(learned) - 1e-7 * rank


__all__ = ["order_features", "order_weights", "unscored_tier"]
