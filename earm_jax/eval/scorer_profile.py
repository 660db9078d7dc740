r"""A measured scorer's answers as a simulator input: a *scorer profile*.

The simulator's default scorer is truth plus independent noise. A trained
model errs differently: its answers are graded, depend on how similar a
candidate looks (on-topic non-evidence scores high), and are wrong in
correlated ways (a memory that fools it for one question fools it for the
next). A profile keeps what was measured on labelled pools:

* ``quantiles[r, b, :]``: the answer's quantiles at ``levels`` for relevant
  (``r = 1``) and non-relevant (``r = 0``) candidates at pool positions
  ``rank_edges[b] <= position < rank_edges[b + 1]`` (the pool is in similarity
  order, so position is the similarity rank);
* ``memory_correlation`` and ``query_correlation``: the shares of an answer's
  variation, on the probit scale of its within-cell quantile, that belong to
  its memory and to its query (one-way random-effects ICCs).

Answers are drawn as :math:`y = Q_{r,b}(\Phi(z))` with
:math:`z = \sqrt{\rho_m}\,a_m + \sqrt{\rho_q}\,c_t + \sqrt{1-\rho_m-\rho_q}\,
\varepsilon_{m,t}`, all standard normal: the marginal of each cell is the
measured one, and a memory (or query) keeps its tendency across pairs.
What this leaves out: errors tied to a memory *and* a topic together.

Fitting is host NumPy (:func:`fit_scorer_profile`); drawing is pure JAX
(:func:`profile_answers`), jit- and vmap-able.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.types import Array, ArrayLike, PRNGKey

PROFILE_FORMAT = "earm-scorer-profile-v1"
DEFAULT_RANK_EDGES = (0, 5, 20, 50, 100, 200)
DEFAULT_LEVELS = 21


class ScorerProfile(NamedTuple):
    """A scorer's measured answer distributions (arrays; a pytree).

    Attributes:
      rank_edges: ``int32[B + 1]`` pool-position bucket edges, increasing; a
        position at or past the last edge falls in the last bucket.
      quantiles: ``float32[2, B, L]`` answer quantiles (non-relevant, relevant)
        per bucket at ``L`` evenly spaced levels from 0 to 1.
      memory_correlation: ``float32[]`` memory share of the probit variance.
      query_correlation: ``float32[]`` query share of the probit variance.
    """

    rank_edges: Array
    quantiles: Array
    memory_correlation: Array
    query_correlation: Array


def _icc(groups: np.ndarray, values: np.ndarray) -> float:
    """One-way random-effects ICC(1) of ``values`` grouped by ``groups``."""
    _, inverse, counts = np.unique(groups, return_inverse=True, return_counts=True)
    if counts.size < 2 or values.size <= counts.size:
        return 0.0
    means = np.bincount(inverse, weights=values) / counts
    grand = values.mean()
    between = float(np.sum(counts * (means - grand) ** 2) / (counts.size - 1))
    within = float(np.sum((values - means[inverse]) ** 2) / (values.size - counts.size))
    size = (values.size - np.sum(counts**2) / values.size) / (counts.size - 1)
    denominator = between + (size - 1) * within
    return (
        float(np.clip((between - within) / denominator, 0.0, 0.95))
        if denominator > 0
        else 0.0
    )


def _probit(u: np.ndarray) -> np.ndarray:
    from statistics import NormalDist

    inverse = np.vectorize(NormalDist().inv_cdf)
    return inverse(np.clip(u, 1e-4, 1 - 1e-4))


def fit_scorer_profile(
    scores: np.ndarray,
    relevant: np.ndarray,
    valid: np.ndarray,
    memory_ids: np.ndarray,
    query_ids: np.ndarray,
    rank_edges: tuple[int, ...] = DEFAULT_RANK_EDGES,
    levels: int = DEFAULT_LEVELS,
) -> tuple[ScorerProfile, dict[str, Any]]:
    """Measures a profile from labelled pools.

    Args:
      scores: ``float[T, N]`` answers in [0, 1] (NaN: failed, left out).
      relevant: ``bool[T, N]`` gold labels.
      valid: ``bool[T, N]`` real candidates; the pool is in similarity order.
      memory_ids: ``[T, N]`` hashable memory identities (unique across
        conversations, e.g. ``"26:14"``).
      query_ids: ``[T]`` query identities.
      rank_edges: bucket edges of pool positions.
      levels: quantile levels.

    Returns:
      ``(profile, counts)``: counts holds the pairs per cell and the ICC inputs.

    Raises:
      ValueError: no relevant or no non-relevant pair.
    """
    scores = np.asarray(scores, np.float64)
    relevant = np.asarray(relevant, bool)
    usable = np.asarray(valid, bool) & np.isfinite(scores)
    edges = np.asarray(rank_edges, np.int64)
    if (
        edges.ndim != 1
        or edges.size < 2
        or np.any(np.diff(edges) <= 0)
        or edges[0] != 0
    ):
        raise ValueError(f"rank_edges must start at 0 and increase, got {rank_edges}")
    if not (usable & relevant).any() or not (usable & ~relevant).any():
        raise ValueError("a profile needs relevant and non-relevant scored pairs")
    num_buckets = edges.size - 1
    positions = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    bucket = np.clip(
        np.searchsorted(edges, positions, side="right") - 1, 0, num_buckets - 1
    )
    grid = np.linspace(0.0, 1.0, levels)
    table = np.zeros((2, num_buckets, levels))
    cells = np.zeros((2, num_buckets), np.int64)
    probit = np.full(scores.shape, np.nan)
    for r in (0, 1):
        label = usable & (relevant == bool(r))
        for b in range(num_buckets):
            inside = label & (bucket == b)
            cells[r, b] = int(inside.sum())
            source = inside if cells[r, b] >= levels else label
            values = scores[source]
            table[r, b] = np.quantile(values, grid)
            if cells[r, b]:
                ranks = np.argsort(np.argsort(scores[inside], kind="stable")) + 0.5
                probit[inside] = _probit(ranks / cells[r, b])
    done = np.isfinite(probit)
    memory = np.broadcast_to(np.asarray(memory_ids), scores.shape)[done]
    query = np.broadcast_to(np.asarray(query_ids)[:, None], scores.shape)[done]
    values = probit[done]
    memory_share = _icc(memory, values)
    query_share = _icc(query, values)
    if memory_share + query_share > 0.95:
        total = memory_share + query_share
        memory_share, query_share = (
            0.95 * memory_share / total,
            0.95 * query_share / total,
        )
    profile = ScorerProfile(
        rank_edges=jnp.asarray(edges, jnp.int32),
        quantiles=jnp.asarray(table, jnp.float32),
        memory_correlation=jnp.asarray(memory_share, jnp.float32),
        query_correlation=jnp.asarray(query_share, jnp.float32),
    )
    return profile, {"pairs_per_cell": cells.tolist(), "pairs": int(done.sum())}


def profile_answers(
    key: PRNGKey,
    profile: ScorerProfile,
    relevant: ArrayLike,
    memory_ids: ArrayLike,
    num_memories: int,
) -> Array:
    """Draws answers for one stream's pools from ``profile`` (pure JAX).

    Args:
      key: PRNG key.
      profile: the measured profile.
      relevant: ``bool[T, N]`` which candidates are relevant; position in the
        pool is the similarity rank.
      memory_ids: ``int32[T, N]`` memory rows (for the memory effect).
      num_memories: ``M`` (static).

    Returns:
      ``float32[T, N]`` answers in [0, 1].
    """
    relevant = jnp.asarray(relevant, bool)
    num_queries, pool = relevant.shape
    memory_key, query_key, pair_key = jax.random.split(key, 3)
    memory_effect = jax.random.normal(memory_key, (num_memories,))
    query_effect = jax.random.normal(query_key, (num_queries,))
    pair_noise = jax.random.normal(pair_key, (num_queries, pool))
    rho_m = jnp.clip(profile.memory_correlation, 0.0, 0.95)
    rho_q = jnp.clip(profile.query_correlation, 0.0, 0.95 - rho_m)
    latent = (
        jnp.sqrt(rho_m) * memory_effect[jnp.asarray(memory_ids)]
        + jnp.sqrt(rho_q) * query_effect[:, None]
        + jnp.sqrt(1.0 - rho_m - rho_q) * pair_noise
    )
    level = jax.scipy.stats.norm.cdf(latent)
    num_buckets = profile.quantiles.shape[1]
    positions = jnp.arange(pool)
    bucket = jnp.clip(
        jnp.searchsorted(profile.rank_edges, positions, side="right") - 1,
        0,
        num_buckets - 1,
    )
    rows = profile.quantiles[relevant.astype(jnp.int32), bucket[None, :]]  # [T, N, L]
    grid = jnp.linspace(0.0, 1.0, profile.quantiles.shape[-1])
    answer = jax.vmap(jax.vmap(lambda u, q: jnp.interp(u, grid, q)))(level, rows)
    return jnp.clip(answer, 0.0, 1.0).astype(jnp.float32)


def profile_to_json(profile: ScorerProfile, source: dict[str, Any]) -> dict[str, Any]:
    """The profile as a JSON-ready dict, with where it was measured."""
    quantiles = np.asarray(profile.quantiles)
    return {
        "format": PROFILE_FORMAT,
        "rank_edges": np.asarray(profile.rank_edges).tolist(),
        "levels": np.linspace(0.0, 1.0, quantiles.shape[-1]).tolist(),
        "quantiles": {
            "not_relevant": quantiles[0].tolist(),
            "relevant": quantiles[1].tolist(),
        },
        "memory_correlation": float(profile.memory_correlation),
        "query_correlation": float(profile.query_correlation),
        "source": source,
    }


def profile_from_json(data: dict[str, Any]) -> ScorerProfile:
    """Reads :func:`profile_to_json`'s dict back.

    Raises:
      ValueError: not a profile, or inconsistent shapes (naming the field).
    """
    if not isinstance(data, dict) or data.get("format") != PROFILE_FORMAT:
        raise ValueError(f"not a scorer profile (format must be {PROFILE_FORMAT!r})")
    edges = np.asarray(data.get("rank_edges"), np.int64)
    if (
        edges.ndim != 1
        or edges.size < 2
        or edges[0] != 0
        or np.any(np.diff(edges) <= 0)
    ):
        raise ValueError("rank_edges must be a list starting at 0 and increasing")
    try:
        table = np.stack(
            [
                np.asarray(data["quantiles"]["not_relevant"], np.float64),
                np.asarray(data["quantiles"]["relevant"], np.float64),
            ]
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(
            f"quantiles must hold not_relevant and relevant tables: {error}"
        ) from error
    if table.ndim != 3 or table.shape[1] != edges.size - 1 or table.shape[2] < 2:
        raise ValueError(
            f"quantiles must be [bucket][level] with {edges.size - 1} buckets, got "
            f"shape {table.shape[1:]}"
        )
    if not np.all(np.isfinite(table)) or np.any(np.diff(table, axis=-1) < 0):
        raise ValueError("quantiles must be finite and non-decreasing along levels")
    shares = []
    for name in ("memory_correlation", "query_correlation"):
        value = float(data.get(name, 0.0))
        if not 0.0 <= value < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {value}")
        shares.append(value)
    return ScorerProfile(
        rank_edges=jnp.asarray(edges, jnp.int32),
        quantiles=jnp.asarray(np.clip(table, 0.0, 1.0), jnp.float32),
        memory_correlation=jnp.asarray(shares[0], jnp.float32),
        query_correlation=jnp.asarray(shares[1], jnp.float32),
    )


__all__ = [
    "DEFAULT_RANK_EDGES",
    "PROFILE_FORMAT",
    "ScorerProfile",
    "fit_scorer_profile",
    "profile_answers",
    "profile_from_json",
    "profile_to_json",
]
