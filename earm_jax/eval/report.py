"""Summaries of per-query policy metrics: means, paired contrasts, gain recovery.

Host side (NumPy): takes the per-query arrays that :mod:`earm_jax.eval.compare`
produces (any leading shape, e.g. ``[S, T]`` streams x queries or the queries of
all conversations concatenated) and returns plain dicts ready for JSON.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from earm_jax.eval import stats

CONTRASTS = (
    ("mixed", "observed_backfill"),
    ("mixed", "observed"),
    ("observed", "semantic"),
    ("observed_backfill", "semantic"),
    ("mixed", "semantic"),
    ("full", "mixed"),
    ("mixed", "bias_only"),
    ("mixed", "top_similarity"),
    ("top_similarity", "semantic"),
    ("best", "top_similarity"),
    ("best", "mixed"),
    ("best", "semantic"),
    ("mixed_expand", "mixed"),
    ("mixed_expand", "top_similarity"),
    ("mixed_side", "mixed"),
    ("mixed_side", "bias_only"),
    ("mixed_fused", "mixed"),
    ("mixed_fused", "semantic"),
    ("mixed_fused", "top_similarity"),
    ("best_side", "best"),
    ("best_side", "top_similarity"),
    ("learned_calls", "top_similarity"),
    ("learned_calls", "best"),
)
"""Paired contrasts reported, as (treatment, baseline). docs/policies.md: anchor
contribution = observed - semantic; completion contribution = mixed - observed
(and mixed - observed_backfill)."""


EXPANSION_ROWS = ("slots_filled", "slots_relevant", "missed_relevant", "slots_recall")
"""Per-query rows of ``mixed_expand`` that are counts, not ranking metrics
(besides ``expanded@K`` and ``expanded_relevant@K``)."""


def _is_metric(name: str) -> bool:
    return name not in ("calls", "rounds", *EXPANSION_ROWS) and not name.startswith(
        "expanded"
    )


def metric_names(metrics: Mapping[str, Mapping[str, np.ndarray]]) -> list[str]:
    """Ranking metric names (everything but ``calls``, ``rounds`` and the
    expansion counts), in a stable order."""
    first = metrics.get("semantic", next(iter(metrics.values())))
    return [name for name in first if _is_metric(name)]


def expansion_summary(
    metrics: Mapping[str, Mapping[str, np.ndarray]],
    has_relevant: np.ndarray,
    *,
    policy: str = "mixed_expand",
    clusters: np.ndarray | None = None,
    num_resamples: int = 2000,
    seed: int = 0,
) -> dict | None:
    """How search expansion behaved (docs/design-notes.md), over the labelled queries.

    For every cut-off ``K`` of the policy's ``expanded@K`` rows:
    ``expanded_per_query`` (expansion memories in the top K, mean per query),
    ``queries_with_expanded`` (share of queries with at least one),
    ``precision`` (relevant ones among them, summed over queries: a ratio of
    sums) and ``relevant_per_query``. Besides: ``slots_filled`` (eligible
    memories per query, at most ``E``), ``slot_recall`` (relevant memories in
    the slots over relevant memories the pool missed: the room expansion can
    reach), ``slots_recall_bound`` (relevant memories in the slots over all
    relevant ones, per query: the most Recall@K the slots could add for
    ``K >= E``, were they ranked perfectly) and ``missed_relevant_per_query``.
    Each ``{"mean", "ci"}`` with a bootstrap CI over queries (or
    ``clusters``). ``None`` without ``policy``.
    """
    if policy not in metrics:
        return None
    row = metrics[policy]
    where = np.asarray(has_relevant, bool)
    kwargs = dict(
        where=where, clusters=clusters, num_resamples=num_resamples, seed=seed
    )
    out: dict = {"policy": policy, "queries": int(where.sum())}
    cutoffs = sorted(
        int(name.split("@")[1]) for name in row if name.startswith("expanded@")
    )
    for k in cutoffs:
        entered = np.asarray(row[f"expanded@{k}"], float)
        relevant = np.asarray(row[f"expanded_relevant@{k}"], float)
        entry = {
            "expanded_per_query": _interval(stats.mean_ci(entered, **kwargs)),
            "queries_with_expanded": _interval(
                stats.mean_ci((entered > 0).astype(float), **kwargs)
            ),
            "relevant_per_query": _interval(stats.mean_ci(relevant, **kwargs)),
            "expanded_total": int(entered[where].sum()),
            "relevant_total": int(relevant[where].sum()),
        }
        entry["precision"] = (
            _interval(stats.ratio_ci(relevant, entered, **kwargs))
            if entry["expanded_total"]
            else {"mean": None, "ci": [None, None]}
        )
        out[f"@{k}"] = entry
    filled = np.asarray(row["slots_filled"], float)
    slot_relevant = np.asarray(row["slots_relevant"], float)
    missed = np.asarray(row["missed_relevant"], float)
    out["slots_filled_per_query"] = _interval(stats.mean_ci(filled, **kwargs))
    out["slots_recall_bound"] = _interval(
        stats.mean_ci(np.asarray(row["slots_recall"], float), **kwargs)
    )
    out["missed_relevant_per_query"] = _interval(stats.mean_ci(missed, **kwargs))
    out["slot_recall"] = (
        _interval(stats.ratio_ci(slot_relevant, missed, **kwargs))
        if missed[where].sum() > 0
        else {"mean": None, "ci": [None, None]}
    )
    out["slot_precision"] = (
        _interval(stats.ratio_ci(slot_relevant, filled, **kwargs))
        if filled[where].sum() > 0
        else {"mean": None, "ci": [None, None]}
    )
    return out


def _finite_or_none(value: float) -> float | None:
    """JSON has no NaN: an undefined value (e.g. a recovery ratio whose
    denominator vanishes) is written as null."""
    return float(value) if np.isfinite(value) else None


def _interval(ci: stats.ConfidenceInterval) -> dict:
    return {
        "mean": _finite_or_none(ci.estimate),
        "ci": [_finite_or_none(ci.low), _finite_or_none(ci.high)],
    }


def summarize(
    metrics: Mapping[str, Mapping[str, np.ndarray]],
    has_relevant: np.ndarray,
    *,
    clusters: np.ndarray | None = None,
    num_resamples: int = 2000,
    seed: int = 0,
    contrasts: Sequence[tuple[str, str]] = CONTRASTS,
) -> dict:
    """Means with 95% CIs per policy, paired contrasts and gain recovery.

    Args:
      metrics: ``{policy: {metric: float[...]}}`` per-query values, incl. ``calls``.
      has_relevant: ``bool[...]`` queries that count for the ranking metrics
        (queries without a relevant memory still cost calls).
      clusters: optional label per query (e.g. stream or conversation): the CIs
        then resample whole clusters. ``None``: i.i.d. queries.
      num_resamples, seed: bootstrap settings.

    Returns:
      ``{"results": {policy: {"calls": int, "calls_per_query": float,
      metric: {"mean", "ci"}}}, "contrasts": {"a-b": {metric: {...}}},
      "gain_recovery": {metric: {...}}, "gain_recovery_by_policy": {...},
      "num_queries": int, "num_scored_queries": int}``.
    """
    has_relevant = np.asarray(has_relevant, bool)
    names = metric_names(metrics)
    kwargs = dict(clusters=clusters, num_resamples=num_resamples, seed=seed)
    results: dict = {}
    for policy, row in metrics.items():
        calls = np.asarray(row["calls"])
        entry: dict = {
            "calls": int(round(float(calls.sum()))),
            "calls_per_query": float(calls.mean()),
        }
        if "rounds" in row:
            rounds = np.asarray(row["rounds"], float)
            entry["rounds"] = {
                "mean": float(rounds.mean()),
                "p95": float(np.percentile(rounds, 95)),
                "max": float(rounds.max()),
            }
        for name in names:
            entry[name] = _interval(
                stats.mean_ci(np.asarray(row[name]), where=has_relevant, **kwargs)
            )
        results[policy] = entry
    contrast_table: dict = {}
    for treatment, baseline in contrasts:
        if treatment not in metrics or baseline not in metrics:
            continue
        contrast_table[f"{treatment}-{baseline}"] = {
            name: _interval(
                stats.contrast_ci(
                    np.asarray(metrics[treatment][name]),
                    np.asarray(metrics[baseline][name]),
                    where=has_relevant,
                    **kwargs,
                )
            )
            for name in names
        }
    recovery_by_policy: dict = {}
    if "semantic" in metrics and "full" in metrics:
        for policy in metrics:
            if policy in ("semantic", "full"):
                continue
            recovery_by_policy[policy] = {
                name: _interval(
                    stats.gain_recovery(
                        np.asarray(metrics["semantic"][name]),
                        np.asarray(metrics[policy][name]),
                        np.asarray(metrics["full"][name]),
                        where=has_relevant,
                        **kwargs,
                    )
                )
                for name in names
            }
    full_calls = results.get("full", {}).get("calls", 0)
    mixed_calls = results.get("mixed", {}).get("calls", 0)
    return {
        "results": results,
        "contrasts": contrast_table,
        "gain_recovery": recovery_by_policy.get("mixed", {}),
        "gain_recovery_by_policy": recovery_by_policy,
        "call_saving": (1.0 - mixed_calls / full_calls) if full_calls else None,
        "num_queries": int(has_relevant.size),
        "num_scored_queries": int(has_relevant.sum()),
    }


def add_cluster_cis(summary: dict, clustered: dict, label: str) -> None:
    """Copies the CIs of a cluster-bootstrap summary into ``summary`` as ``label``.

    Both come from :func:`summarize` on the same data (e.g. ``clusters=None``
    and ``clusters=stream ids``); every ``{"mean", "ci"}`` entry of ``summary``
    gains ``label: [low, high]`` from ``clustered``.
    """
    for section in ("results", "contrasts", "gain_recovery_by_policy"):
        for name, row in summary[section].items():
            for metric, value in row.items():
                if isinstance(value, dict) and "ci" in value:
                    value[label] = clustered[section][name][metric]["ci"]


def per_group(
    metrics: Mapping[str, Mapping[str, np.ndarray]],
    has_relevant: np.ndarray,
    groups: np.ndarray,
    *,
    clusters: np.ndarray | None = None,
    **kwargs,
) -> dict:
    """:func:`summarize` restricted to each group (e.g. category id, stage).

    Returns ``{group: {"count": n_scored, **summarize(...)}}``; groups without a
    scored query get only their counts.
    """
    groups = np.asarray(groups)
    has_relevant = np.asarray(has_relevant, bool)
    out: dict = {}
    for group in np.unique(groups):
        selected = groups == group
        scored = has_relevant & selected
        key = str(group.item() if isinstance(group, np.generic) else group)
        if not scored.any():
            out[key] = {"count": 0, "num_queries": int(selected.sum())}
            continue
        sub = {
            policy: {name: np.asarray(values)[selected] for name, values in row.items()}
            for policy, row in metrics.items()
        }
        summary = summarize(
            sub,
            has_relevant[selected],
            clusters=None
            if clusters is None
            else np.broadcast_to(clusters, groups.shape)[selected],
            **kwargs,
        )
        out[key] = {"count": int(scored.sum()), **summary}
    return out


__all__ = [
    "CONTRASTS",
    "EXPANSION_ROWS",
    "add_cluster_cis",
    "expansion_summary",
    "metric_names",
    "per_group",
    "summarize",
]
