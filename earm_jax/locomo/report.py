"""LoCoMo result summaries: overall, per category, per conversation, per stage."""

from __future__ import annotations

from typing import Any

import numpy as np

from earm_jax.eval import report
from earm_jax.locomo.evaluate import PerQuery

CONTRASTS_BY_GROUP = (
    ("mixed", "observed"),
    ("mixed", "observed_backfill"),
    ("mixed", "top_similarity"),
    ("mixed", "semantic"),
    ("mixed_expand", "mixed"),
)


def _group_table(
    per_query: PerQuery, groups: np.ndarray, num_resamples: int, seed: int
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, summary in report.per_group(
        per_query.metrics,
        per_query.has_relevant,
        groups,
        num_resamples=num_resamples,
        seed=seed,
        contrasts=CONTRASTS_BY_GROUP,
    ).items():
        selected = groups.astype(str) == key
        entry: dict[str, Any] = {
            "count": summary["count"],
            "num_queries": int(selected.sum()),
            "num_unlabelled": int((selected & ~per_query.has_relevant).sum()),
        }
        entry.update(summary.get("results", {}))
        if "contrasts" in summary:
            entry["contrasts"] = summary["contrasts"]
        out[key] = entry
    return out


def locomo_summary(
    per_query: PerQuery, num_resamples: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """The ``earm simulate`` JSON shape plus per-category/conversation/stage tables.

    CIs: paired bootstrap over queries (``ci``) and over conversations
    (``ci_conversations``, whole conversations resampled).
    """
    has_relevant = per_query.has_relevant
    summary = report.summarize(
        per_query.metrics, has_relevant, num_resamples=num_resamples, seed=seed
    )
    codes = np.unique(per_query.conversation, return_inverse=True)[1]
    by_conversation = report.summarize(
        per_query.metrics,
        has_relevant,
        clusters=codes,
        num_resamples=num_resamples,
        seed=seed,
    )
    report.add_cluster_cis(summary, by_conversation, "ci_conversations")
    summary["num_unlabelled_queries"] = int((~has_relevant).sum())
    expansion = report.expansion_summary(
        per_query.metrics, has_relevant, num_resamples=num_resamples, seed=seed
    )
    if expansion is not None:
        summary["expansion"] = expansion
    summary["per_category"] = _group_table(
        per_query, per_query.category, num_resamples, seed
    )
    summary["per_conversation"] = _group_table(
        per_query, per_query.conversation, num_resamples, seed
    )
    summary["per_stage"] = _group_table(per_query, per_query.stage, num_resamples, seed)
    return summary


__all__ = ["locomo_summary"]
