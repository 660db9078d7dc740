"""Figures of policy results (matplotlib, host side, written to PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np


def policy_figure(
    metrics: dict[str, dict[str, np.ndarray]],
    has_relevant: np.ndarray,
    summary: dict[str, Any],
    path: Path,
    metric: str = "recall@10",
    block_size: int = 10,
    title: str = "",
) -> Path:
    """Two panels: ``metric`` per block of queries (the budget stages) per policy,
    and ``metric`` against direct-scoring calls per query, with 95% CIs.

    Args:
      metrics: ``{policy: {metric: float[..., T]}}`` per-query values.
      has_relevant: ``bool[..., T]`` queries that count.
      summary: :func:`earm_jax.report.summarize` output (for the CIs).
      path: PNG file to write.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_relevant = np.asarray(has_relevant, bool).reshape(-1, has_relevant.shape[-1])
    num_queries = has_relevant.shape[-1]
    blocks = np.arange(0, num_queries, block_size)
    figure, (by_query, by_calls) = plt.subplots(1, 2, figsize=(12, 4.5))
    for policy, row in metrics.items():
        values = np.asarray(row[metric]).reshape(has_relevant.shape)
        means = []
        for start in blocks:
            window = has_relevant[:, start : start + block_size]
            chunk = values[:, start : start + block_size]
            means.append(chunk[window].mean() if window.any() else np.nan)
        by_query.plot(blocks + block_size / 2, means, marker="o", ms=3, label=policy)
        entry = summary["results"][policy]
        low, high = entry[metric]["ci"]
        mean = entry[metric]["mean"]
        by_calls.errorbar(
            entry["calls_per_query"],
            mean,
            yerr=[[mean - low], [high - mean]],
            fmt="o",
            capsize=3,
            label=policy,
        )
    by_query.set_xlabel(f"query index (mean over blocks of {block_size})")
    by_query.set_ylabel(metric)
    by_query.set_title(f"{metric} along the stream")
    by_calls.set_xlabel("direct-scoring calls per query")
    by_calls.set_ylabel(metric)
    by_calls.set_title(f"{metric} vs calls (95% CI)")
    by_calls.legend(fontsize=8)
    if title:
        figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


__all__ = ["policy_figure"]
