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
    positions: np.ndarray | None = None,
    position_label: str = "",
) -> Path:
    """Two panels: ``metric`` per block of queries (the budget stages) per policy,
    and ``metric`` against direct-scoring calls per query, with 95% CIs.

    Args:
      metrics: ``{policy: {metric: float[..., T]}}`` per-query values.
      has_relevant: ``bool[..., T]`` queries that count.
      summary: :func:`earm_jax.eval.report.summarize` output (for the CIs).
      path: PNG file to write.
      block_size: queries per point of the left panel (by query index).
      positions: optional ``[..., T]`` x value per query for the left panel
        (e.g. the budget stage); replaces query-index blocks.
      position_label: x label for ``positions``.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    has_relevant = np.asarray(has_relevant, bool)
    if positions is None:
        index = np.broadcast_to(np.arange(has_relevant.shape[-1]), has_relevant.shape)
        positions = (index // block_size) * block_size + block_size / 2
        position_label = f"query index (mean over blocks of {block_size})"
    positions = np.broadcast_to(np.asarray(positions), has_relevant.shape)
    xs = np.unique(positions)
    figure, (by_query, by_calls) = plt.subplots(1, 2, figsize=(12, 4.5))
    for policy, row in metrics.items():
        values = np.asarray(row[metric]).reshape(has_relevant.shape)
        means = [
            values[has_relevant & (positions == x)].mean()
            if (has_relevant & (positions == x)).any()
            else np.nan
            for x in xs
        ]
        by_query.plot(xs, means, marker="o", ms=3, label=policy)
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
    by_query.set_xlabel(position_label)
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
