r"""Bootstrap confidence intervals for per-query metrics (host side, NumPy).

Every function takes per-query values (any shape; flattened), optionally a
``where`` mask of the queries to use (e.g. ``RankingMetrics.has_relevant``) and
optionally ``clusters``: a label per query (e.g. the stream index). Without
``clusters`` the queries are resampled i.i.d. as :func:`scipy.stats.bootstrap`
resamples them (the same draws for the same seed; percentile by default, basic
or BCa on request), each resample's sums one product with its draw counts.
With ``clusters`` whole clusters are resampled with replacement (all their
queries come along) and the statistic is recomputed from the resampled
cluster sums: the honest interval when queries of one stream are correlated
(same memories, recurring needs). It is a percentile interval.

Contrasts are *paired*: both policies are evaluated on the same resampled
queries (or streams), so the interval is for the mean of the per-query
differences. The docs/policies.md derived quantities map as follows:

* anchor contribution = ``contrast_ci(observed_only, semantic)``
* completion contribution = ``contrast_ci(mixed, observed_only)``
* gain recovery = ``gain_recovery(semantic, mixed, full)``

Example:
  >>> import numpy as np
  >>> values = np.random.default_rng(0).normal(1.0, 1.0, size=(8, 50))  # [S, T]
  >>> iid = mean_ci(values, seed=0)
  >>> by_stream = mean_ci(values, clusters=np.arange(8)[:, None], seed=0)
  >>> bool(iid.low < 1.0 < iid.high), by_stream.num_units
  (True, 8)
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple, TypedDict, Unpack

import numpy as np
import scipy.stats
from numpy.typing import ArrayLike

_MAX_RESAMPLE_ELEMENTS = 1 << 23  # per vectorized chunk (64 MiB of float64)
_MAX_CACHED_COUNTS = 1 << 23  # resample counts kept between calls (64 MiB)


class ConfidenceInterval(NamedTuple):
    """A point estimate with a bootstrap confidence interval.

    Attributes:
      estimate: the statistic on the full sample.
      low: lower end of the interval.
      high: upper end of the interval.
      standard_error: standard deviation of the bootstrap distribution.
      num_queries: queries used (after ``where``).
      num_units: resampled units: queries (i.i.d.) or non-empty clusters.
    """

    estimate: float
    low: float
    high: float
    standard_error: float
    num_queries: int
    num_units: int


class BootstrapOptions(TypedDict, total=False):
    """The keyword options every interval of this module takes.

    Attributes:
      where: ``bool[...]`` queries to use (broadcast to the values); default all.
      clusters: labels broadcast to the values (e.g. ``np.arange(S)[:, None]``):
        resample whole clusters instead of queries. Default: i.i.d. queries.
      confidence: the interval's coverage (default 0.95).
      num_resamples: bootstrap resamples (default 2000).
      method: ``"percentile"`` (default), ``"basic"`` or ``"BCa"`` (i.i.d. only;
        scipy's).
      seed: NumPy seed (default 0); the same seed gives the same interval.
    """

    where: ArrayLike | None
    clusters: ArrayLike | None
    confidence: float
    num_resamples: int
    method: str
    seed: int


def _prepare(
    arrays: tuple[ArrayLike, ...],
    where: ArrayLike | None,
    clusters: ArrayLike | None,
) -> tuple[np.ndarray, np.ndarray | None]:
    """Returns ``float64[Q, P]`` columns and ``int[Q]`` cluster codes (or None)."""
    shape = np.shape(arrays[0])
    for array in arrays[1:]:
        if np.shape(array) != shape:
            raise ValueError(
                f"paired inputs must share a shape: {shape} vs {np.shape(array)}"
            )
    columns = np.stack(
        [np.asarray(a, dtype=np.float64).reshape(-1) for a in arrays], -1
    )
    mask = np.ones(columns.shape[0], dtype=bool)
    if where is not None:
        mask = np.broadcast_to(np.asarray(where, dtype=bool), shape).reshape(-1)
    codes = None
    if clusters is not None:
        labels = np.broadcast_to(np.asarray(clusters), shape).reshape(-1)[mask]
        _, codes = np.unique(labels, return_inverse=True)
    columns = columns[mask]
    if not np.all(np.isfinite(columns)):
        raise ValueError("values must be finite where selected (mask NaN queries out)")
    if columns.shape[0] == 0:
        raise ValueError("no queries selected")
    return columns, codes


def _percentiles(draws: np.ndarray, confidence: float) -> tuple[float, float, float]:
    alpha = 1.0 - confidence
    with np.errstate(invalid="ignore"):
        low, high = np.percentile(draws, [100 * alpha / 2, 100 * (1 - alpha / 2)])
        spread = float(np.std(draws, ddof=1)) if draws.size > 1 else 0.0
    return float(low), float(high), spread


def _bootstrap(
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    arrays: tuple[ArrayLike, ...],
    *,
    where: ArrayLike | None = None,
    clusters: ArrayLike | None = None,
    confidence: float = 0.95,
    num_resamples: int = 2000,
    method: str = "percentile",
    seed: int = 0,
) -> ConfidenceInterval:
    """Bootstraps ``statistic(sums[..., P], counts[...])`` of the column sums of
    the paired ``arrays`` (selected and clustered as :func:`_prepare` does).

    Every statistic here is a function of the column sums and the query count of
    a (re)sample, so the i.i.d. and the cluster bootstrap share one definition.
    """
    columns, codes = _prepare(arrays, where, clusters)
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if num_resamples < 2:
        raise ValueError(f"num_resamples must be >= 2, got {num_resamples}")
    num_queries, num_columns = columns.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        estimate = float(statistic(columns.sum(0), np.asarray(num_queries)))
    if codes is None:
        num_units = num_queries
        if num_queries < 2 or np.all(columns == columns[0]):
            # Every resample equals the sample: a zero-width interval (scipy
            # would warn about degenerate data).
            return ConfidenceInterval(
                estimate, estimate, estimate, 0.0, num_queries, num_queries
            )
        if method.lower() == "bca":
            low, high, spread = _scipy_bca(
                statistic, columns, num_resamples, confidence, seed
            )
        else:
            low, high, spread = _iid_interval(
                statistic, columns, estimate, num_resamples, confidence, method, seed
            )
    else:
        if method != "percentile":
            raise ValueError(
                f"the cluster bootstrap supports method='percentile', got {method!r}"
            )
        num_units = int(codes.max()) + 1
        cluster_sums = np.zeros((num_units, num_columns))
        np.add.at(cluster_sums, codes, columns)
        cluster_counts = np.bincount(codes, minlength=num_units).astype(np.float64)
        rng = np.random.default_rng(seed)
        chunk = max(1, _MAX_RESAMPLE_ELEMENTS // (num_units * num_columns))
        draws = []
        for start in range(0, num_resamples, chunk):
            size = min(chunk, num_resamples - start)
            picks = rng.integers(0, num_units, size=(size, num_units))
            with np.errstate(divide="ignore", invalid="ignore"):
                draws.append(
                    statistic(
                        cluster_sums[picks].sum(axis=1),
                        cluster_counts[picks].sum(axis=1),
                    )
                )
        low, high, spread = _percentiles(np.concatenate(draws), confidence)
    return ConfidenceInterval(estimate, low, high, spread, num_queries, num_units)


def _batch_size(num_queries: int, num_columns: int) -> int:
    """Resamples per vectorized chunk (scipy's ``batch``, the same bound)."""
    return max(1, _MAX_RESAMPLE_ELEMENTS // (num_queries * num_columns))


def _count_blocks(
    num_queries: int, num_resamples: int, batch: int, seed: int
) -> Iterator[np.ndarray]:
    """``float64[b, Q]`` how often each query is drawn in each resample, in
    chunks of ``batch`` resamples: the very draws :func:`scipy.stats.bootstrap`
    makes with ``paired=True``, ``batch`` and ``rng=default_rng(seed)``.

    A resample's column sums are then one matrix product with these counts
    instead of a gather of ``Q`` values per resample and column."""
    rng = np.random.default_rng(seed)
    for start in range(0, num_resamples, batch):
        size = min(batch, num_resamples - start)
        picks = rng.integers(0, num_queries, (size, num_queries))
        flat = picks + (np.arange(size) * num_queries)[:, None]
        counts = np.bincount(flat.reshape(-1), minlength=size * num_queries)
        yield counts.reshape(size, num_queries).astype(np.float64)


@functools.lru_cache(maxsize=4)
def _cached_counts(
    num_queries: int, num_resamples: int, batch: int, seed: int
) -> tuple[np.ndarray, ...]:
    blocks = tuple(_count_blocks(num_queries, num_resamples, batch, seed))
    for block in blocks:
        block.flags.writeable = False
    return blocks


def _resample_counts(
    num_queries: int, num_resamples: int, batch: int, seed: int
) -> Iterable[np.ndarray]:
    """The count blocks; kept between calls when small. A report bootstraps
    every policy, metric and contrast over the same queries with the same
    seed, so they all share one set of resamples, drawn once."""
    if num_queries * num_resamples <= _MAX_CACHED_COUNTS:
        return _cached_counts(num_queries, num_resamples, batch, seed)
    return _count_blocks(num_queries, num_resamples, batch, seed)


def _iid_interval(
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    columns: np.ndarray,
    estimate: float,
    num_resamples: int,
    confidence: float,
    method: str,
    seed: int,
) -> tuple[float, float, float]:
    """The i.i.d. percentile or basic interval, equal to
    :func:`scipy.stats.bootstrap`'s with the same seed (same resamples, same
    quantiles, up to the order of floating-point sums)."""
    if method.lower() not in ("percentile", "basic"):
        raise ValueError(
            f"method must be 'percentile', 'basic' or 'BCa', got {method!r}"
        )
    num_queries, num_columns = columns.shape
    batch = _batch_size(num_queries, num_columns)
    size = np.asarray(num_queries)
    with np.errstate(divide="ignore", invalid="ignore"):
        draws = np.concatenate(
            [
                statistic(counts @ columns, size)
                for counts in _resample_counts(num_queries, num_resamples, batch, seed)
            ]
        )
    # Infinite or NaN draws (a ratio whose denominator vanishes on some
    # resamples) give an infinite or NaN interval: the honest answer.
    low, high, spread = _percentiles(draws, confidence)
    if method.lower() == "basic":
        low, high = 2.0 * estimate - high, 2.0 * estimate - low
    return low, high, spread


def _scipy_bca(
    statistic: Callable[[np.ndarray, np.ndarray], np.ndarray],
    columns: np.ndarray,
    num_resamples: int,
    confidence: float,
    seed: int,
) -> tuple[float, float, float]:
    """The BCa interval, from :func:`scipy.stats.bootstrap` itself (its
    jackknife needs the per-query statistic)."""
    num_queries, num_columns = columns.shape

    def vectorized(*samples: np.ndarray, axis: int = -1) -> np.ndarray:
        sums = np.stack([s.sum(axis=axis) for s in samples], -1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return statistic(sums, np.asarray(samples[0].shape[axis]))

    # A resample distribution that is constant or NaN (e.g. a gain recovery
    # whose denominator vanishes on some resamples) makes scipy warn; the
    # interval it returns (zero-width or NaN) is the honest answer.
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", scipy.stats.DegenerateDataWarning)
        result = scipy.stats.bootstrap(
            tuple(columns.T),
            vectorized,
            n_resamples=num_resamples,
            batch=_batch_size(num_queries, num_columns),
            vectorized=True,
            paired=True,
            confidence_level=confidence,
            method="BCa",
            rng=np.random.default_rng(seed),
        )
    return (
        float(result.confidence_interval.low),
        float(result.confidence_interval.high),
        float(result.standard_error),
    )


def _mean(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    return sums[..., 0] / counts


def _recovery(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    del counts  # the query counts cancel in the ratio of means
    semantic, mixed, full = sums[..., 0], sums[..., 1], sums[..., 2]
    return (mixed - semantic) / (full - semantic)


def _ratio(sums: np.ndarray, counts: np.ndarray) -> np.ndarray:
    del counts  # a ratio of sums
    return sums[..., 0] / sums[..., 1]


def mean_ci(
    values: ArrayLike,
    **options: Unpack[BootstrapOptions],
) -> ConfidenceInterval:
    """Bootstrap CI for the mean of a per-query metric.

    Args:
      values: ``float[...]`` one value per query (e.g. ``[S, T]`` Recall@10).
      **options: ``where``, ``clusters``, ``confidence``, ``num_resamples``,
        ``method``, ``seed`` (:class:`BootstrapOptions`).

    Returns:
      :class:`ConfidenceInterval`.

    Raises:
      ValueError: no query selected, non-finite selected values, bad arguments.
    """
    return _bootstrap(_mean, (values,), **options)


def contrast_ci(
    treatment: ArrayLike,
    baseline: ArrayLike,
    **options: Unpack[BootstrapOptions],
) -> ConfidenceInterval:
    """Paired bootstrap CI for ``mean(treatment) - mean(baseline)``.

    Both arrays hold the same queries in the same order (two policies on the same
    streams); each resample draws queries (or clusters) once for both.

    Args:
      treatment: ``float[...]`` per-query metric of one policy.
      baseline: ``float[...]`` the same metric of the other policy.
      **options: as for :func:`mean_ci` (:class:`BootstrapOptions`).

    Returns:
      :class:`ConfidenceInterval` of the mean difference.
    """
    difference = np.asarray(treatment, dtype=np.float64) - np.asarray(
        baseline, dtype=np.float64
    )
    if np.shape(treatment) != np.shape(baseline):
        raise ValueError(
            f"paired inputs must share a shape: {np.shape(treatment)} vs "
            f"{np.shape(baseline)}"
        )
    return mean_ci(difference, **options)


def gain_recovery(
    semantic: ArrayLike,
    mixed: ArrayLike,
    full: ArrayLike,
    **options: Unpack[BootstrapOptions],
) -> ConfidenceInterval:
    r"""Share of Full's gain over Semantic that a policy recovers, with a CI.

    .. math::
       \mathrm{recovery} = \frac{\overline{\mathrm{mixed}} -
       \overline{\mathrm{semantic}}}{\overline{\mathrm{full}} -
       \overline{\mathrm{semantic}}}

    a ratio of means, recomputed on every paired resample. It is NaN / infinite
    where Full does not beat Semantic on a resample; the interval is then wide or
    NaN, which is the honest answer.

    Args:
      semantic: ``float[...]`` per-query metric of the Semantic policy.
      mixed: ``float[...]`` the same metric of the policy under study.
      full: ``float[...]`` the same metric of Full reranking.
      **options: as for :func:`mean_ci` (:class:`BootstrapOptions`).

    Returns:
      :class:`ConfidenceInterval` of the recovery ratio.
    """
    return _bootstrap(_recovery, (semantic, mixed, full), **options)


def ratio_ci(
    numerator: ArrayLike,
    denominator: ArrayLike,
    **options: Unpack[BootstrapOptions],
) -> ConfidenceInterval:
    r"""Bootstrap CI for a ratio of sums, :math:`\sum num / \sum den` (e.g. a
    micro-averaged precision: relevant items over items, summed over queries).

    NaN where the resampled denominator is 0 (the interval is then NaN: the
    honest answer). Arguments as for :func:`mean_ci`, with the two per-query
    arrays paired.

    >>> ci = ratio_ci(np.array([1.0, 0.0, 2.0]), np.array([1.0, 1.0, 2.0]), seed=0)
    >>> round(ci.estimate, 2)
    0.75
    """
    return _bootstrap(_ratio, (numerator, denominator), **options)


__all__ = [
    "BootstrapOptions",
    "ConfidenceInterval",
    "contrast_ci",
    "gain_recovery",
    "mean_ci",
    "ratio_ci",
]
