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
  its memory and to its query (one-way random-effects ICCs);
* ``relevant_rank_quantiles[c, b, :]``: for relevant candidates at bucket
  ``b`` of a pool holding one (``c = 0``) or several (``c = 1``) relevant
  candidates, the quantiles of their *standing* -- the share of their own
  question's non-relevant answers below them (ties count half).

Answers are drawn as :math:`y = Q_{r,b}(\Phi(z))` with
:math:`z = \sqrt{\rho_m}\,a_m + \sqrt{\rho_q}\,c_t + \sqrt{1-\rho_m-\rho_q}\,
\varepsilon_{m,t}`, all standard normal: the marginal of each cell is the
measured one, and a memory (or query) keeps its tendency across pairs.

Marginals alone do not keep what decides a ranking. A relevant memory deep in
the pool competes with its own question's non-relevant answers, and the real
model lifts a few of them above nearly all of those; answers drawn cell by
cell put them above 99% of their question's non-relevant answers about half as
often, which removes the room above scoring the top of the similarity order.
So a profile with ``relevant_rank_quantiles`` places each relevant answer
after the non-relevant ones are drawn: its standing is drawn from its bucket's
measured quantiles (at the same latent ``z``), and its answer is the one drawn
from its cell when that already stands there, else the midpoint of the two
non-relevant answers it falls between. Standings are measured apart for pools
with one relevant candidate and with several: deep in the pool a question's
only evidence stands far higher (on LoCoMo turns, at similarity ranks 50-100,
above 95% of its question's non-relevant answers 52% of the time against 30%
with two or three), and a single-evidence question's Recall@10 rests on it
alone.
What this leaves out: errors tied to a memory *and* a topic together, and how
a question's relevant memories stand relative to one another.

Fitting is host NumPy (:func:`fit_scorer_profile`); drawing is pure JAX
(:func:`profile_answers`), jit- and vmap-able.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from earm_jax.types import Array, ArrayLike, PRNGKey

PROFILE_FORMAT = "earm-scorer-profile-v2"
# Profiles written before standings were measured; read, drawn cell by cell.
PROFILE_FORMAT_V1 = "earm-scorer-profile-v1"
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
      relevant_rank_quantiles: ``float32[2, B, L]`` quantiles of a relevant
        answer's standing among its question's non-relevant answers, for
        pools with one relevant candidate and with several, per bucket;
        ``None`` (a v1 profile): relevant answers are drawn from their cells
        alone.
    """

    rank_edges: Array
    quantiles: Array
    memory_correlation: Array
    query_correlation: Array
    relevant_rank_quantiles: Array | None = None


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


def standings(
    scores: np.ndarray, relevant: np.ndarray, usable: np.ndarray
) -> np.ndarray:
    """``float[T, N]``: each usable relevant answer's share of its row's usable
    non-relevant answers below it, ties counting half (NaN elsewhere, and in a
    row with no non-relevant answer)."""
    out = np.full(scores.shape, np.nan)
    negatives = usable & ~relevant
    for t in np.flatnonzero((usable & relevant).any(axis=1) & negatives.any(axis=1)):
        below = np.sort(scores[t][negatives[t]])
        mine = usable[t] & relevant[t]
        values = scores[t][mine]
        lower = np.searchsorted(below, values, side="left")
        upper = np.searchsorted(below, values, side="right")
        out[t, mine] = (lower + 0.5 * (upper - lower)) / below.size
    return out


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
      ``(profile, counts)``: counts holds the pairs per cell, the ICC inputs
      and the relevant pairs whose standing was measured, per bucket.

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
    if not ((usable & relevant).any(axis=1) & (usable & ~relevant).any(axis=1)).any():
        raise ValueError(
            "a profile needs a question with relevant and non-relevant scored pairs"
        )
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
    standing = standings(scores, relevant, usable)
    ranked = np.isfinite(standing)
    several = np.broadcast_to(
        (relevant & np.asarray(valid, bool)).sum(axis=1, keepdims=True) > 1,
        scores.shape,
    )
    rank_table = np.zeros((2, num_buckets, levels))
    rank_cells = np.zeros((2, num_buckets), np.int64)
    for c in (0, 1):
        group = ranked & (several == bool(c))
        for b in range(num_buckets):
            inside = group & (bucket == b)
            rank_cells[c, b] = int(inside.sum())
            # A thin cell borrows its bucket's other group, then every bucket.
            if rank_cells[c, b] >= levels:
                source = inside
            elif (ranked & (bucket == b)).sum() >= levels:
                source = ranked & (bucket == b)
            else:
                source = ranked
            rank_table[c, b] = np.quantile(standing[source], grid)
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
        relevant_rank_quantiles=jnp.asarray(rank_table, jnp.float32),
    )
    return profile, {
        "pairs_per_cell": cells.tolist(),
        "pairs": int(done.sum()),
        "ranked_relevant_per_cell": rank_cells.tolist(),
    }


def profile_answers(
    key: PRNGKey,
    profile: ScorerProfile,
    relevant: ArrayLike,
    memory_ids: ArrayLike,
    num_memories: int,
    valid: ArrayLike | None = None,
) -> Array:
    """Draws answers for one stream's pools from ``profile`` (pure JAX).

    Args:
      key: PRNG key.
      profile: the measured profile.
      relevant: ``bool[T, N]`` which candidates are relevant; position in the
        pool is the similarity rank.
      memory_ids: ``int32[T, N]`` memory rows (for the memory effect).
      num_memories: ``M`` (static).
      valid: ``bool[T, N]`` real candidates (default: all); a relevant
        answer's standing is among its row's valid non-relevant answers.

    Returns:
      ``float32[T, N]`` answers in [0, 1] (at invalid positions: drawn, not
      meaningful).
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
    at_level = jax.vmap(jax.vmap(lambda u, q: jnp.interp(u, grid, q)))
    answer = jnp.clip(at_level(level, rows), 0.0, 1.0)
    if profile.relevant_rank_quantiles is not None:
        valid = jnp.ones_like(relevant) if valid is None else jnp.asarray(valid, bool)
        several = (relevant & valid).sum(axis=-1) > 1  # [T]
        standing_rows = profile.relevant_rank_quantiles[
            several.astype(jnp.int32)[:, None], bucket[None, :]
        ]  # [T, N, L]
        standing = at_level(level, standing_rows)
        answer = _placed(answer, relevant & valid, valid & ~relevant, standing)
    return answer.astype(jnp.float32)


def _placed(answer: Array, relevant: Array, negative: Array, standing: Array) -> Array:
    """``answer`` with each relevant one moved to stand above (nearest) the
    share ``standing`` of its row's non-relevant answers: kept when it already
    stands between the two it should, else their midpoint (0 and 1 past the
    ends)."""
    count = negative.sum(axis=-1, keepdims=True)
    below = jnp.sort(jnp.where(negative, answer, jnp.inf), axis=-1)
    # Between the k-th and (k+1)-th lowest, an answer's standing is k / count:
    # the nearest such k to the drawn standing.
    k = jnp.clip(jnp.round(standing * count).astype(jnp.int32), 0, count)
    low = jnp.where(
        k >= 1,
        jnp.take_along_axis(below, jnp.maximum(k - 1, 0), axis=-1),
        0.0,
    )
    high = jnp.where(
        k < count,
        jnp.take_along_axis(below, jnp.minimum(k, below.shape[-1] - 1), axis=-1),
        1.0,
    )
    inside = (answer > low) & (answer < high)
    moved = jnp.where(inside, answer, 0.5 * (low + high))
    return jnp.where(relevant & (count > 0), moved, answer)


def profile_to_json(profile: ScorerProfile, source: dict[str, Any]) -> dict[str, Any]:
    """The profile as a JSON-ready dict, with where it was measured."""
    quantiles = np.asarray(profile.quantiles)
    data = {
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
    if profile.relevant_rank_quantiles is None:
        data["format"] = PROFILE_FORMAT_V1
    else:
        standing = np.asarray(profile.relevant_rank_quantiles)
        data["relevant_rank_quantiles"] = {
            "one_in_pool": standing[0].tolist(),
            "several_in_pool": standing[1].tolist(),
        }
    return data


def profile_from_json(data: dict[str, Any]) -> ScorerProfile:
    """Reads :func:`profile_to_json`'s dict back.

    Raises:
      ValueError: not a profile, or inconsistent shapes (naming the field).
    """
    formats = (PROFILE_FORMAT, PROFILE_FORMAT_V1)
    if not isinstance(data, dict) or data.get("format") not in formats:
        raise ValueError(f"not a scorer profile (format must be one of {formats})")
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
    standing = None
    if data["format"] == PROFILE_FORMAT:
        try:
            standing = np.stack(
                [
                    np.asarray(data["relevant_rank_quantiles"][name], np.float64)
                    for name in ("one_in_pool", "several_in_pool")
                ]
            )
        except (KeyError, TypeError, ValueError) as error:
            raise ValueError(
                "relevant_rank_quantiles must hold one_in_pool and several_in_pool "
                f"tables: {error}"
            ) from error
        if standing.shape != table.shape:
            raise ValueError(
                f"relevant_rank_quantiles must be [bucket][level] tables of shape "
                f"{table.shape[1:]}, got {standing.shape[1:]}"
            )
        if (
            not np.all(np.isfinite(standing))
            or np.any(standing < 0)
            or np.any(standing > 1)
            or np.any(np.diff(standing, axis=-1) < 0)
        ):
            raise ValueError(
                "relevant_rank_quantiles must lie in [0, 1] and be non-decreasing "
                "along levels"
            )
        standing = jnp.asarray(standing, jnp.float32)
    return ScorerProfile(
        rank_edges=jnp.asarray(edges, jnp.int32),
        quantiles=jnp.asarray(np.clip(table, 0.0, 1.0), jnp.float32),
        memory_correlation=jnp.asarray(shares[0], jnp.float32),
        query_correlation=jnp.asarray(shares[1], jnp.float32),
        relevant_rank_quantiles=standing,
    )


__all__ = [
    "DEFAULT_RANK_EDGES",
    "PROFILE_FORMAT",
    "PROFILE_FORMAT_V1",
    "ScorerProfile",
    "fit_scorer_profile",
    "profile_answers",
    "profile_from_json",
    "profile_to_json",
    "standings",
]
