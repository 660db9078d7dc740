"""Figures of policy results: quality per stage and against calls, from
per-query arrays (``earm simulate --plot``, ``earm locomo --plot``) or from a
result JSON (``earm plots``).

Every figure has a title, axis labels with units, a legend, and 95% CIs where
the data has them. Policies take the README's names, order and one colour
each (:mod:`earm_jax.eval.labels`); a policy the labels do not know is drawn
too, after the known ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from earm_jax.eval import labels
from earm_jax.jobs.plot_style import policy_style, pyplot, save_figure, wrap_title

STAGE_NOTE = (
    "a later stage is also later in each stream, with more history: "
    "differences across stages are not the budget's alone"
)
"""What every per-stage axis says: stage is budget and position at once."""


def _dodge(count: int, width: float) -> list[float]:
    """Offsets of ``count`` series centred on 0, ``width`` apart (categorical
    axes only: the axis label says the points are dodged)."""
    return [(k - (count - 1) / 2) * width for k in range(count)]


def _groups(calls: list[float], span: float) -> list[list[int]]:
    """Indices of policies whose calls are within 2% of the axis of each other."""
    order = sorted(range(len(calls)), key=lambda i: calls[i])
    groups: list[list[int]] = []
    for index in order:
        if groups and calls[index] - calls[groups[-1][-1]] <= 0.02 * span:
            groups[-1].append(index)
        else:
            groups.append([index])
    return groups


def _spread(values: list[float], gap: float) -> list[float]:
    """Label heights near ``values`` (same order), at least ``gap`` apart."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    placed = [0.0] * len(values)
    previous = -np.inf
    for index in order:
        placed[index] = max(values[index], previous + gap)
        previous = placed[index]
    shift = (np.mean(placed) - np.mean(values)) if values else 0.0
    return [p - shift for p in placed]


def _calls_text(calls: float) -> str:
    """``58`` or ``49.2``: whole numbers without a decimal."""
    return f"{calls:.0f}" if abs(calls - round(calls)) < 0.05 else f"{calls:.1f}"


def quality_vs_calls(axis, results: Mapping[str, Any], metric: str) -> None:
    """Every policy's ``metric`` (mean, 95% CI) against its calls per query.

    Each point sits at its policy's true mean calls per query. Policies at
    (nearly) equal calls overlap there: they keep apart by hollow markers of
    their own shape, caps of their own width (nested CIs) and a label each,
    placed beside the group with a leader line. The x axis starts at 0 calls
    (Semantic).
    """
    policies = [
        p for p in labels.ordered(results) if results[p][metric]["mean"] is not None
    ]
    calls = [float(results[p]["calls_per_query"]) for p in policies]
    means = [results[p][metric]["mean"] for p in policies]
    span = max(max(calls, default=1.0), 1.0)
    lows = [results[p][metric]["ci"][0] for p in policies]
    highs = [results[p][metric]["ci"][1] for p in policies]
    bottom = min(v for v in lows + means if v is not None)
    top = max(v for v in highs + means if v is not None)
    height = max(top - bottom, 1e-3)
    handles: dict[str, Any] = {}
    for group in _groups(calls, span):
        heights = _spread([means[i] for i in group], 0.055 * height)
        right = max(calls[i] for i in group)
        for rank, (index, label_y) in enumerate(zip(group, heights, strict=True)):
            policy, x, mean = policies[index], calls[index], means[index]
            low, high = lows[index], highs[index]
            style = policy_style(policy)
            handles[policy] = axis.errorbar(
                x,
                mean,
                yerr=[[mean - low], [high - mean]] if low is not None else None,
                fmt=style["marker"],
                color=style["color"],
                markerfacecolor="none" if len(group) > 1 else style["color"],
                markeredgewidth=1.3,
                capsize=3 + 1.2 * rank,
                elinewidth=1.0,
                ms=5 + 1.2 * (len(group) - 1 - rank),
                zorder=2 + rank,
                label=f"{labels.policy_label(policy)} ({_calls_text(x)} calls)",
            )
            axis.annotate(
                f"{labels.policy_label(policy, short=True)} {mean:.3f}",
                (x, mean),
                xytext=(right + 0.05 * span, label_y),
                textcoords="data",
                fontsize=7,
                color=style["color"],
                va="center",
                arrowprops={"arrowstyle": "-", "color": style["color"], "lw": 0.5},
            )
    axis.set_xlim(-0.06 * span, span * 1.3)
    axis.set_ylim(bottom - 0.08 * height, top + 0.08 * height)
    axis.set_xlabel(
        "direct-scoring calls per query (mean; each point at its own calls, "
        "equal calls overlap)"
    )
    axis.set_ylabel(f"{metric} (mean, 95% CI)")
    axis.grid(alpha=0.3)
    axis.legend(
        handles=[handles[p] for p in policies if p in handles],
        fontsize=7,
        loc="lower right",
    )


def _normal_ci(values: np.ndarray) -> tuple[float, float, float]:
    if values.size == 0:
        return (np.nan, np.nan, np.nan)
    mean = float(values.mean())
    half = (
        1.96 * float(values.std(ddof=1)) / np.sqrt(values.size)
        if values.size > 1
        else 0.0
    )
    return mean, mean - half, mean + half


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
    """Two panels: ``metric`` per block of queries (the budget stages) per
    policy with 95% CI bands, and ``metric`` against direct-scoring calls per
    query with paired-bootstrap 95% CIs (from ``summary``).

    Args:
      metrics: ``{policy: {metric: float[..., T]}}`` per-query values.
      has_relevant: ``bool[..., T]`` queries that count.
      summary: :func:`earm_jax.eval.report.summarize` output (for the CIs).
      path: PNG file to write.
      block_size: queries per point of the left panel (by query index).
      positions: optional integer ``[..., T]`` x value per query for the left
        panel (e.g. the budget stage); replaces query-index blocks.
      position_label: x label for ``positions``.
    """
    plt = pyplot()
    has_relevant = np.asarray(has_relevant, bool)
    integer_axis = positions is not None
    if positions is None:
        index = np.broadcast_to(np.arange(has_relevant.shape[-1]), has_relevant.shape)
        positions = (index // block_size) * block_size + block_size / 2
        position_label = f"query index (mean over blocks of {block_size})"
    positions = np.broadcast_to(np.asarray(positions), has_relevant.shape)
    xs = np.unique(positions)
    figure, (by_query, by_calls) = plt.subplots(1, 2, figsize=(13, 5))
    policies = labels.ordered(metrics)
    # Stages are categories: policies are dodged around each (and the label
    # says so); query blocks are positions: every point stays at its block.
    offsets = _dodge(len(policies), 0.06) if integer_axis else [0.0] * len(policies)
    if integer_axis:
        position_label = (
            f"{position_label}; policies dodged around each stage\n{STAGE_NOTE}"
        )
    for offset, policy in zip(offsets, policies, strict=True):
        values = np.asarray(metrics[policy][metric]).reshape(has_relevant.shape)
        rows = np.array(
            [_normal_ci(values[has_relevant & (positions == x)]) for x in xs]
        )
        style = policy_style(policy)
        by_query.errorbar(
            xs + offset,
            rows[:, 0],
            yerr=[rows[:, 0] - rows[:, 1], rows[:, 2] - rows[:, 0]],
            marker=style["marker"],
            ms=4,
            capsize=2,
            elinewidth=0.8,
            color=style["color"],
            label=labels.policy_label(policy),
        )
    if integer_axis:
        by_query.set_xticks(xs)
    by_query.set_xlabel(position_label, fontsize=9)
    by_query.set_ylabel(f"{metric} (mean, 95% CI)")
    by_query.set_title(f"{metric} along the stream (95% CI, normal approx.)")
    by_query.grid(alpha=0.3)
    by_query.legend(fontsize=7)
    quality_vs_calls(by_calls, summary["results"], metric)
    by_calls.set_title(f"{metric} vs calls (95% paired-bootstrap CI)")
    if title:
        figure.suptitle(wrap_title(title), fontsize=10)
    figure.tight_layout()
    return save_figure(figure, path)


def _stage_results(per_stage: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """``{stage: {policy: row}}`` from a simulate or a LoCoMo JSON."""
    out = {}
    for key, value in per_stage.items():
        rows = value.get("results", value)
        out[int(key)] = {
            p: r
            for p, r in rows.items()
            if isinstance(r, dict) and "calls_per_query" in r
        }
    return out


def per_stage_figure(
    payload: Mapping[str, Any], path: str | Path, metric: str, title: str
) -> Path:
    """``metric`` per budget stage for every policy (95% CI), from a result JSON's
    ``per_stage``; the x ticks name each stage's anchors per query and the
    axis says what else changes with the stage (:data:`STAGE_NOTE`)."""
    plt = pyplot()
    stages = _stage_results(payload["per_stage"])
    keys = sorted(stages)
    figure, axis = plt.subplots(figsize=(8, 5))
    policies = labels.ordered({p for s in stages.values() for p in s})
    for offset, policy in zip(_dodge(len(policies), 0.06), policies, strict=True):
        style = policy_style(policy)
        xs, means, lows, highs = [], [], [], []
        for stage in keys:
            row = stages[stage].get(policy)
            if row is None or row[metric]["mean"] is None:
                continue
            xs.append(stage + offset)
            means.append(row[metric]["mean"])
            lows.append(row[metric]["mean"] - row[metric]["ci"][0])
            highs.append(row[metric]["ci"][1] - row[metric]["mean"])
        axis.errorbar(
            xs,
            means,
            yerr=[lows, highs],
            marker=style["marker"],
            color=style["color"],
            capsize=2,
            ms=4,
            label=labels.policy_label(policy),
        )
    anchors = {s: stages[s].get("mixed", {}).get("calls_per_query") for s in keys}
    axis.set_xticks(keys)
    axis.set_xticklabels(
        [
            f"{s}\n({anchors[s]:.0f} calls)" if anchors[s] is not None else str(s)
            for s in keys
        ]
    )
    axis.set_xlabel(
        "budget stage (anchored policies' calls per query); policies dodged "
        f"around each stage\n{STAGE_NOTE}",
        fontsize=9,
    )
    axis.set_ylabel(f"{metric} (mean, 95% CI)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, ncol=2)
    axis.set_title(wrap_title(title, 80), fontsize=10)
    figure.tight_layout()
    return save_figure(figure, path)


def calls_figure(
    payload: Mapping[str, Any], path: str | Path, metric: str, title: str
) -> Path:
    """Quality vs calls of every policy in a result JSON (95% CIs)."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(8, 5))
    quality_vs_calls(axis, payload["results"], metric)
    axis.set_title(wrap_title(title, 80), fontsize=10)
    figure.tight_layout()
    return save_figure(figure, path)


def locomo_grid_figure(
    payload: Mapping[str, Any], path: str | Path, metric: str = "recall@10"
) -> Path:
    """``metric`` (95% CI over questions) of every policy at every grid point
    of an ``earm locomo`` JSON (memory setting x noise x rank)."""
    plt = pyplot()
    runs = payload["runs"]
    policies = labels.ordered({p for run in runs for p in run["results"]})
    figure, axis = plt.subplots(figsize=(11, 5))
    width = 0.8 / max(len(policies), 1)
    for position, policy in enumerate(policies):
        style = policy_style(policy)
        xs, means, errors = [], [], [[], []]
        for index, run in enumerate(runs):
            entry = run["results"].get(policy, {}).get(metric)
            if not entry or entry["mean"] is None:
                continue
            xs.append(index + (position - (len(policies) - 1) / 2) * width)
            means.append(entry["mean"])
            errors[0].append(entry["mean"] - entry["ci"][0])
            errors[1].append(entry["ci"][1] - entry["mean"])
        axis.errorbar(
            xs,
            means,
            yerr=errors,
            fmt=style["marker"],
            color=style["color"],
            capsize=2,
            ms=5,
            label=labels.policy_label(policy),
        )
    axis.set_xticks(range(len(runs)))
    axis.set_xticklabels(
        [f"{r['setting']}\nnoise {r['noise']}\nrank {r['rank']}" for r in runs],
        fontsize=8,
    )
    axis.set_xlabel(
        "grid point: memory setting, evidence noise, rank (policies side by side "
        "at each point)"
    )
    axis.set_ylabel(f"{metric} (mean, 95% CI)")
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize=7, ncol=4, loc="lower right")
    axis.set_title(
        f"LoCoMo, evidence stand-in scorer (not an LLM): {metric} per grid point "
        "(95% CI over questions)",
        fontsize=10,
    )
    figure.tight_layout()
    return save_figure(figure, path)


__all__ = [
    "STAGE_NOTE",
    "calls_figure",
    "locomo_grid_figure",
    "per_stage_figure",
    "policy_figure",
    "quality_vs_calls",
]
