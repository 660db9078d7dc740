"""Masked ridge regressions: the closed-form solves behind every ALS block.

Pure helpers without state. Every solve here is a small (r+1) x (r+1) system,
batched over queries or memories; masks select which observations count.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from earm_jax.types import Array, ArrayLike

# Small systems: full float32 precision is cheap, and TF32 matmuls on GPUs would
# otherwise cost ~3 decimal digits in the normal equations.
_PRECISION = jax.lax.Precision.HIGHEST


def with_intercept(factors: ArrayLike) -> Array:
    """Prepends a column of ones: ``[..., R] -> [..., R+1]`` (bias + factors)."""
    factors = jnp.asarray(factors)
    ones = jnp.ones(factors.shape[:-1] + (1,), factors.dtype)
    return jnp.concatenate([ones, factors], axis=-1)


def normal_equations(
    features: ArrayLike, targets: ArrayLike, mask: ArrayLike
) -> tuple[Array, Array]:
    r"""Masked normal equations of least squares, batched over leading axes.

    .. math:: G = \sum_k m_k x_k x_k^\top, \quad h = \sum_k m_k z_k x_k

    Args:
      features: ``[..., K, D]`` regressors ``x_k``.
      targets: ``[..., K]`` targets ``z_k``.
      mask: ``[..., K]`` which rows count.

    Returns:
      ``(gram [..., D, D], rhs [..., D])``.
    """
    weights = jnp.asarray(mask, jnp.float32)
    features = jnp.asarray(features) * weights[..., None]
    targets = jnp.where(jnp.asarray(mask), jnp.asarray(targets), 0.0)
    gram = jnp.einsum("...kd,...ke->...de", features, features, precision=_PRECISION)
    rhs = jnp.einsum("...kd,...k->...d", features, targets, precision=_PRECISION)
    return gram, rhs


def ridge_solve(gram: ArrayLike, rhs: ArrayLike, l2: float) -> Array:
    r"""Solves :math:`(G + \lambda I) w = h`, batched over leading axes.

    ``l2 > 0`` keeps every system positive definite, also with no observations
    (then ``w = 0``: the prior).
    """
    gram = jnp.asarray(gram)
    eye = jnp.eye(gram.shape[-1], dtype=gram.dtype)
    return jnp.linalg.solve(gram + l2 * eye, jnp.asarray(rhs)[..., None])[..., 0]


def segment_normal_equations(
    features: ArrayLike,
    targets: ArrayLike,
    mask: ArrayLike,
    segment_ids: ArrayLike,
    num_segments: int,
) -> tuple[Array, Array]:
    """Normal equations accumulated per segment (e.g. per memory) from flat rows.

    Args:
      features: ``[L, D]``; targets: ``[L]``; mask: ``[L]``;
      segment_ids: ``int32[L]`` which segment each row belongs to.
      num_segments: number of segments (static).

    Returns:
      ``(gram [num_segments, D, D], rhs [num_segments, D])``.
    """
    weights = jnp.asarray(mask, jnp.float32)
    features = jnp.asarray(features) * weights[:, None]
    targets = jnp.where(jnp.asarray(mask), jnp.asarray(targets), 0.0)
    outer = features[:, :, None] * features[:, None, :]
    gram = jax.ops.segment_sum(outer, segment_ids, num_segments=num_segments)
    rhs = jax.ops.segment_sum(
        features * targets[:, None], segment_ids, num_segments=num_segments
    )
    return gram, rhs
