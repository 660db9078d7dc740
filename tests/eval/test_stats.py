"""Bootstrap confidence intervals: coverage, pairing, clustering, determinism."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from earm_jax.eval.stats import ConfidenceInterval, contrast_ci, gain_recovery, mean_ci


def coverage(make_sample, true_value, num_trials, **ci_kwargs):
    covered = 0
    for trial in range(num_trials):
        values, clusters = make_sample(np.random.default_rng(trial))
        ci = mean_ci(values, clusters=clusters, seed=trial, **ci_kwargs)
        covered += ci.low <= true_value <= ci.high
    return covered / num_trials


def iid_normal(rng):
    return rng.normal(0.3, 1.0, size=60), None


def clustered(rng, num_clusters=25, per_cluster=20, with_labels=True):
    effects = rng.normal(0.0, 1.0, size=(num_clusters, 1))
    values = effects + rng.normal(0.0, 0.5, size=(num_clusters, per_cluster))
    labels = np.arange(num_clusters)[:, None] if with_labels else None
    return values, labels


@pytest.mark.parametrize("method", ["percentile", "BCa"])
def test_iid_coverage_of_normal_mean(method):
    rate = coverage(iid_normal, 0.3, 300, num_resamples=999, method=method)
    assert 0.91 <= rate <= 0.98, rate


def test_cluster_bootstrap_covers_where_iid_does_not():
    cluster_rate = coverage(clustered, 0.0, 300, num_resamples=999)
    naive_rate = coverage(  # fewer trials: the gap is large
        lambda rng: clustered(rng, with_labels=False), 0.0, 150, num_resamples=499
    )
    assert 0.88 <= cluster_rate <= 0.98, cluster_rate
    assert naive_rate < 0.6, naive_rate


def test_cluster_and_iid_agree_on_iid_data():
    values = np.random.default_rng(0).normal(size=(40, 25))
    iid = mean_ci(values, seed=1)
    per_stream = mean_ci(values, clusters=np.arange(40)[:, None], seed=1)
    singletons = mean_ci(values, clusters=np.arange(values.size).reshape(values.shape))
    assert per_stream.num_units == 40 and singletons.num_units == values.size
    for other in (per_stream, singletons):
        assert other.estimate == pytest.approx(iid.estimate)
        assert other.high - other.low == pytest.approx(iid.high - iid.low, rel=0.2)


def test_contrast_is_paired():
    rng = np.random.default_rng(3)
    baseline = rng.uniform(size=500)  # large spread across queries
    treatment = baseline + 0.05 + rng.normal(0, 0.01, size=500)
    paired = contrast_ci(treatment, baseline, seed=0)
    assert paired.low <= 0.05 <= paired.high
    assert paired.high - paired.low < 0.01  # unpaired CIs would be ~0.1 wide
    # Same numbers as the mean CI of the per-query differences.
    assert paired == mean_ci(treatment - baseline, seed=0)
    clustered_ci = contrast_ci(
        treatment.reshape(10, 50),
        baseline.reshape(10, 50),
        clusters=np.arange(10)[:, None],
        seed=0,
    )
    assert clustered_ci.low <= 0.05 <= clustered_ci.high
    assert clustered_ci.num_units == 10


def test_gain_recovery():
    rng = np.random.default_rng(4)
    semantic = rng.uniform(size=(8, 50))
    full = semantic + rng.uniform(0.1, 0.5, size=semantic.shape)
    exact = gain_recovery(semantic, semantic + 0.5 * (full - semantic), full)
    # The ratio of means is 0.5 on every resample: a zero-width interval.
    assert exact.estimate == pytest.approx(0.5)
    assert exact.low == pytest.approx(0.5) and exact.high == pytest.approx(0.5)

    mixed = semantic + 0.3 * (full - semantic) + rng.normal(0, 0.05, semantic.shape)
    for clusters in (None, np.arange(8)[:, None]):
        ci = gain_recovery(semantic, mixed, full, clusters=clusters, seed=1)
        expected = (mixed.mean() - semantic.mean()) / (full.mean() - semantic.mean())
        assert ci.estimate == pytest.approx(expected)
        assert ci.low < ci.estimate < ci.high
        assert 0.2 < ci.low and ci.high < 0.4


def test_deterministic_by_seed():
    values = np.random.default_rng(5).normal(size=(6, 30))
    for clusters in (None, np.arange(6)[:, None]):
        a = mean_ci(values, clusters=clusters, seed=11)
        b = mean_ci(values, clusters=clusters, seed=11)
        c = mean_ci(values, clusters=clusters, seed=12)
        assert a == b and a != c
        assert isinstance(a, ConfidenceInterval)


def test_where_mask_and_degenerate_inputs():
    values = np.array([[1.0, np.nan, 3.0], [5.0, 7.0, np.nan]])
    where = np.isfinite(values)
    ci = mean_ci(values, where=where, clusters=np.arange(2)[:, None])
    assert ci.estimate == pytest.approx(4.0) and ci.num_queries == 4
    with pytest.raises(ValueError, match="finite"):
        mean_ci(values)
    with pytest.raises(ValueError, match="no queries"):
        mean_ci(values, where=np.zeros_like(where))
    constant = mean_ci(np.ones(20), method="BCa")
    assert (constant.low, constant.high, constant.standard_error) == (1.0, 1.0, 0.0)
    with pytest.raises(ValueError, match="percentile"):
        mean_ci(values, where=where, clusters=np.arange(2)[:, None], method="BCa")
    with pytest.raises(ValueError, match="shape"):
        contrast_ci(np.ones(3), np.ones(4))


def _scipy_interval(statistic, columns, method, seed, num_resamples=2000):
    """scipy.stats.bootstrap on the same columns, as the module called it
    before computing the resample sums itself."""
    import scipy.stats

    def vectorized(*samples, axis=-1):
        sums = np.stack([s.sum(axis=axis) for s in samples], -1)
        with np.errstate(divide="ignore", invalid="ignore"):
            return statistic(sums, np.asarray(samples[0].shape[axis]))

    num_queries, num_columns = columns.shape
    with np.errstate(divide="ignore", invalid="ignore"), warnings.catch_warnings():
        # A few queries give NaN recoveries on some resamples: scipy warns.
        warnings.simplefilter("ignore", scipy.stats.DegenerateDataWarning)
        result = scipy.stats.bootstrap(
            tuple(columns.T),
            vectorized,
            n_resamples=num_resamples,
            batch=max(1, (1 << 23) // (num_queries * num_columns)),
            vectorized=True,
            paired=True,
            method=method,
            rng=np.random.default_rng(seed),
        )
    interval = result.confidence_interval
    return interval.low, interval.high, result.standard_error


@pytest.mark.parametrize("method", ["percentile", "basic"])
@pytest.mark.parametrize("num_queries", [40, 1986, 5000])
def test_iid_interval_equals_scipy_bootstrap(method, num_queries):
    """The i.i.d. interval draws scipy's resamples (the same seed gives the
    same draws, across scipy's batches too: 5000 queries x 3 columns is two
    batches) and sums them as a product with their counts: equal to scipy's
    interval up to the order of the sums."""
    from earm_jax.eval import stats

    rng = np.random.default_rng(num_queries)
    semantic = rng.integers(0, 2, num_queries).astype(float)
    full = np.maximum(semantic, rng.integers(0, 2, num_queries))
    mixed = np.where(rng.uniform(size=num_queries) < 0.5, semantic, full)
    cases = [
        (stats._mean, mean_ci(mixed, method=method, seed=3), (mixed,)),
        (
            stats._recovery,
            gain_recovery(semantic, mixed, full, method=method, seed=3),
            (semantic, mixed, full),
        ),
    ]
    for statistic, ours, arrays in cases:
        low, high, spread = _scipy_interval(
            statistic, np.stack(arrays, -1), method, seed=3
        )
        close = {"rel": 1e-12, "abs": 1e-12, "nan_ok": True}
        assert ours.low == pytest.approx(low, **close)
        assert ours.high == pytest.approx(high, **close)
        assert ours.standard_error == pytest.approx(spread, rel=1e-9, nan_ok=True)


def test_iid_interval_is_the_same_when_drawn_again():
    """Kept resamples are never changed by a caller: a second interval over
    the same queries and seed is the first one."""
    values = np.random.default_rng(9).normal(size=300)
    first = mean_ci(values, seed=4)
    mean_ci(values * 2.0, seed=4)
    gain_recovery(values, values * 0.5, values * 2.0 + 1.0, seed=4)
    assert mean_ci(values, seed=4) == first
    with pytest.raises(ValueError, match="method"):
        mean_ci(values, method="studentized")
