"""Figures of policy results and benchmarks (matplotlib, host side, PNG).

Every figure has a title, axis labels with units, a legend, and 95% CIs where
the data has them. Policies take the README's names, order and one colour
each (:mod:`earm_jax.eval.labels`); a policy the labels do not know is drawn
too, after the known ones.

- :func:`policy_figure`: ``earm simulate --plot`` / ``earm locomo --plot``:
  per-stage curves and quality vs calls, from per-query arrays.
- :func:`benchmark_figures`: ``earm plots``: every figure the README shows,
  from the result JSONs in ``benchmarks/results``.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from earm_jax.eval import labels

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "h", "<", ">")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def policy_style(policy: str) -> dict[str, Any]:
    """Colour and marker of a policy, the same in every figure."""
    import matplotlib

    index = labels.policy_rank(policy)
    if index >= len(labels.POLICY_LABELS):  # unknown policy: stable by name
        index = len(labels.POLICY_LABELS) + sum(map(ord, policy)) % 3
    colours = matplotlib.colormaps["tab10"].colors
    return {"color": colours[index % 10], "marker": _MARKERS[index % len(_MARKERS)]}


def _save(figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    _pyplot().close(figure)
    return path


def _title(text: str, width: int = 110) -> str:
    return "\n".join(textwrap.wrap(text, width)) if text else ""


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


def quality_vs_calls(axis, results: Mapping[str, Any], metric: str) -> None:
    """Every policy's ``metric`` (mean, 95% CI) against its calls per query.

    Policies at (nearly) equal calls are drawn a little apart, in README order,
    and labelled beside the group with a leader line each, so none hides
    another; the x axis starts at 0 calls (Semantic).
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
        step = 0.012 * span
        offsets = [(k - (len(group) - 1) / 2) * step for k in range(len(group))]
        heights = _spread([means[i] for i in group], 0.055 * height)
        right = max(calls[i] for i in group) + offsets[-1]
        for index, offset, label_y in zip(group, offsets, heights, strict=True):
            policy, x, mean = policies[index], calls[index] + offset, means[index]
            low, high = lows[index], highs[index]
            style = policy_style(policy)
            handles[policy] = axis.errorbar(
                x,
                mean,
                yerr=[[mean - low], [high - mean]] if low is not None else None,
                fmt=style["marker"],
                color=style["color"],
                capsize=3,
                ms=6,
                label=f"{labels.policy_label(policy)} ({calls[index]:.0f} calls)",
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
        "direct-scoring calls per query (mean; equal calls drawn side by side)"
    )
    axis.set_ylabel(metric)
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
    plt = _pyplot()
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
    spacing = (xs[1] - xs[0]) * 0.025 if len(xs) > 1 else 0.05
    for position, policy in enumerate(policies):
        values = np.asarray(metrics[policy][metric]).reshape(has_relevant.shape)
        rows = np.array(
            [_normal_ci(values[has_relevant & (positions == x)]) for x in xs]
        )
        style = policy_style(policy)
        by_query.errorbar(
            xs + (position - (len(policies) - 1) / 2) * spacing,
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
    by_query.set_xlabel(position_label)
    by_query.set_ylabel(metric)
    by_query.set_title(f"{metric} along the stream (95% CI, normal approx.)")
    by_query.grid(alpha=0.3)
    by_query.legend(fontsize=7)
    quality_vs_calls(by_calls, summary["results"], metric)
    by_calls.set_title(f"{metric} vs calls (95% paired-bootstrap CI)")
    if title:
        figure.suptitle(_title(title), fontsize=10)
    figure.tight_layout()
    return _save(figure, path)


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
    ``per_stage``; the x ticks name each stage's anchors per query."""
    plt = _pyplot()
    stages = _stage_results(payload["per_stage"])
    keys = sorted(stages)
    figure, axis = plt.subplots(figsize=(8, 5))
    policies = labels.ordered({p for s in stages.values() for p in s})
    for position, policy in enumerate(policies):
        style = policy_style(policy)
        xs, means, lows, highs = [], [], [], []
        for stage in keys:
            row = stages[stage].get(policy)
            if row is None or row[metric]["mean"] is None:
                continue
            xs.append(stage + (position - len(policies) / 2) * 0.03)
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
    axis.set_xlabel("budget stage (anchored policies' calls per query)")
    axis.set_ylabel(metric)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=7, ncol=2)
    axis.set_title(_title(title, 80), fontsize=10)
    figure.tight_layout()
    return _save(figure, path)


def calls_figure(
    payload: Mapping[str, Any], path: str | Path, metric: str, title: str
) -> Path:
    """Quality vs calls of every policy in a result JSON (95% CIs)."""
    plt = _pyplot()
    figure, axis = plt.subplots(figsize=(8, 5))
    quality_vs_calls(axis, payload["results"], metric)
    axis.set_title(_title(title, 80), fontsize=10)
    figure.tight_layout()
    return _save(figure, path)


def locomo_grid_figure(
    payload: Mapping[str, Any], path: str | Path, metric: str = "recall@10"
) -> Path:
    """``metric`` (95% CI over questions) of every policy at every grid point
    of an ``earm locomo`` JSON (memory setting x noise x rank)."""
    plt = _pyplot()
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
    axis.set_ylabel(metric)
    axis.grid(alpha=0.3, axis="y")
    axis.legend(fontsize=7, ncol=4, loc="lower right")
    axis.set_title(
        f"LoCoMo, evidence stand-in scorer (not an LLM): {metric} per grid point "
        "(95% CI over questions)",
        fontsize=10,
    )
    figure.tight_layout()
    return _save(figure, path)


def _load_note(meta: Mapping[str, Any]) -> str:
    load = meta.get("load_average_1_5_15") or (meta.get("machine") or {}).get(
        "load_average_1_5_15"
    )
    cpus = meta.get("cpu_count") or (meta.get("machine") or {}).get("cpu_count")
    if not load:
        return ""
    # The load says whether other jobs shared the cores (a run alone on 2
    # cores shows about its own 2).
    return f"{cpus} CPU cores, load average {load[0]:.1f} at the start"


def latency_figure(payload: Mapping[str, Any], path: str | Path) -> Path:
    """One online step's latency (p50, p10–p90 range) against the history size
    ``t``, per solver, from a ``bench_solver --sections latency`` JSON."""
    plt = _pyplot()
    rows = payload["latency"]["rows"]
    figure, axis = plt.subplots(figsize=(7, 5))
    for index, solver in enumerate(sorted({r["solver"] for r in rows}, reverse=True)):
        mine = sorted((r for r in rows if r["solver"] == solver), key=lambda r: r["t"])
        ts = [r["t"] for r in mine]
        p50 = [r["p50_ms"] for r in mine]
        axis.plot(ts, p50, marker=_MARKERS[index], label=f"{solver} (p50)")
        axis.fill_between(
            ts,
            [r["min_ms"] for r in mine],
            [r["p90_ms"] for r in mine],
            alpha=0.15,
            label=f"{solver} (min–p90)",
        )
        axis.annotate(
            f"p50 {p50[-1] / p50[0]:.2f}x that at t={ts[0]}",
            (ts[-1], p50[-1]),
            textcoords="offset points",
            xytext=(-110, 8),
            fontsize=8,
        )
    axis.set_xscale("log")
    axis.set_yscale("log")
    axis.set_xlabel("history: queries already stored (t)")
    axis.set_ylabel("one online step (select + observe), ms")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    note = _load_note(payload.get("meta", payload))
    axis.set_title(
        _title(f"Latency vs history (M=1,000, N=200, r=8; {note})", 70), fontsize=10
    )
    figure.tight_layout()
    return _save(figure, path)


# bench_solver's row names for the variants of the current step.
_SOLVER_LABELS = {
    "incremental_chunked": "incremental, run_batch in chunks of {chunk} streams",
    "incremental_c45063e": "incremental of commit c45063e",
}


def throughput_figure(payload: Mapping[str, Any], path: str | Path) -> Path:
    """``run_batch`` stream-queries per second against the number of streams
    ``S``, per solver, from a ``bench_solver --sections throughput`` JSON."""
    plt = _pyplot()
    rows = [r for r in payload["throughput"]["rows"] if r.get("sweep", "S") == "S"]
    figure, axis = plt.subplots(figsize=(7, 5))
    for index, solver in enumerate(sorted({r["solver"] for r in rows}, reverse=True)):
        mine = sorted((r for r in rows if r["solver"] == solver), key=lambda r: r["S"])
        axis.plot(
            [r["S"] for r in mine],
            [r["stream_queries_per_s"] for r in mine],
            marker=_MARKERS[index],
            label=_SOLVER_LABELS.get(solver, solver).format(
                chunk=payload.get("config", {}).get("streams_per_chunk")
            ),
        )
        for r in mine:
            axis.annotate(
                f"{r['stream_queries_per_s']:,.0f}",
                (r["S"], r["stream_queries_per_s"]),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=8,
            )
    axis.set_xscale("log", base=2)
    axis.set_yscale("log")
    sizes = sorted({r["S"] for r in rows})
    axis.set_xticks(sizes, [str(size) for size in sizes])
    axis.xaxis.set_minor_locator(_pyplot().NullLocator())
    axis.set_xlabel("streams S (vmapped in one run_batch call)")
    axis.set_ylabel("stream-queries per second (median, compile excluded)")
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    note = _load_note(payload.get("meta", payload))
    axis.set_title(
        _title(f"Throughput vs streams (M=1,000, N=200, r=8, T=40; {note})", 70),
        fontsize=10,
    )
    figure.tight_layout()
    return _save(figure, path)


def solver_quality_figure(
    simulated: Mapping[str, Any] | None,
    conversations: Mapping[str, Any] | None,
    path: str | Path,
) -> Path:
    """``incremental`` − ``als`` quality (same anchors, 95% CIs): on simulated
    streams by the number of history rows refreshed per query, and on LoCoMo
    per metric; run times in the labels."""
    plt = _pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    if simulated is not None:
        rows = simulated["results"]
        als = next(r for r in rows if r["solver"] == "als")
        others = [r for r in rows if r["solver"].startswith("incremental")]
        refresh = [int(r["solver"].rsplit("_r", 1)[-1]) for r in others]
        for offset, (metric, marker) in enumerate((("recall", "o"), ("ndcg", "s"))):
            key = f"{metric}_minus_als"
            means = [r[key]["estimate"] for r in others]
            errors = [
                [m - r[key]["low"] for m, r in zip(means, others, strict=True)],
                [r[key]["high"] - m for m, r in zip(means, others, strict=True)],
            ]
            xs = [i + (offset - 0.5) * 0.12 for i in range(len(others))]
            left.errorbar(
                xs,
                means,
                yerr=errors,
                fmt=marker,
                capsize=3,
                label=f"{metric} (incremental − als)",
            )
        left.set_xticks(
            range(len(others)),
            [
                f"{k} rows\n{r['seconds_incl_compile']:.0f} s"
                for k, r in zip(refresh, others, strict=True)
            ],
        )
        left.axhline(0, color="grey", lw=0.8)
        left.set_xlabel(
            f"history rows refreshed per query (incremental; als: "
            f"{als['seconds_incl_compile']:.0f} s)"
        )
        left.set_ylabel("difference, 95% CI")
        left.grid(alpha=0.3)
        left.legend(fontsize=8)
        left.set_title(
            f"Simulated: {simulated['config'].get('num_streams', '?')} streams",
            fontsize=10,
        )
    if conversations is not None:
        mixed = conversations["mixed"]
        names = list(mixed)
        means = [mixed[m]["incremental-als"]["mean"] for m in names]
        lows = [
            m - mixed[n]["incremental-als"]["ci"][0]
            for m, n in zip(means, names, strict=True)
        ]
        highs = [
            mixed[n]["incremental-als"]["ci"][1] - m
            for m, n in zip(means, names, strict=True)
        ]
        right.errorbar(range(len(names)), means, yerr=[lows, highs], fmt="o", capsize=3)
        right.set_xticks(range(len(names)), names)
        right.axhline(0, color="grey", lw=0.8)
        right.set_ylabel("Mixed: incremental − als, 95% CI over questions")
        right.grid(alpha=0.3)
        seconds = conversations.get("seconds_per_solver", {})
        right.set_title(
            f"LoCoMo turns ({conversations.get('num_labelled_queries', '?')} labelled "
            f"questions): incremental {seconds.get('incremental', 0):.0f} s vs als "
            f"{seconds.get('als', 0):.0f} s",
            fontsize=10,
        )
    figure.suptitle(
        "incremental (constant cost per query) vs als (full refit): quality at the "
        "same anchors (evidence / simulated scorers, not an LLM)",
        fontsize=10,
    )
    figure.tight_layout()
    return _save(figure, path)


FIGURES = (
    ("simulate_default.json", "simulate_quality_vs_calls.png", "calls"),
    ("simulate_default.json", "simulate_per_stage.png", "stages"),
    ("conversations_evidence_grid.json", "conversations_quality_vs_calls.png", "calls"),
    ("conversations_evidence_grid.json", "conversations_per_stage.png", "stages"),
    ("conversations_evidence_grid.json", "conversations_grid.png", "grid"),
    (
        "conversations_best_turns_noise01.json",
        "conversations_best_vs_calls.png",
        "calls",
    ),
    ("solver_latency_cpu.json", "latency_vs_history.png", "latency"),
    ("solver_cpu_after_inplace.json", "throughput_vs_streams.png", "throughput"),
    ("quality_incremental_cpu.json", "incremental_vs_als.png", "solvers"),
    # Issue 12: the new incremental step against c45063e's, paired in one run.
    (
        "solver_cpu_paired_divide.json",
        "throughput_vs_streams_paired.png",
        "throughput",
    ),
    ("solver_cpu_paired_divide.json", "latency_vs_history_paired.png", "latency"),
)
"""(result JSON, figure, kind) drawn by :func:`benchmark_figures`."""


def _describe(payload: Mapping[str, Any], name: str) -> str:
    if "runs" in payload:
        run = payload["runs"][0]
        return (
            f"LoCoMo {run['setting']}, evidence noise {run['noise']}, rank "
            f"{run['rank']} ({payload.get('num_scored_queries', '?')} labelled "
            "questions; evidence stand-in scorer, not an LLM)"
        )
    config = payload.get("config", {})
    return (
        f"Simulated streams: {config.get('streams')} x {config.get('queries')} "
        f"queries, rank {config.get('rank')} (simulated scorer, not an LLM)"
    )


def benchmark_figures(
    results_dir: str | Path, out_dir: str | Path, metric: str = "recall@10"
) -> list[Path]:
    """Draws every figure of :data:`FIGURES` whose JSON exists.

    Returns:
      The PNG paths written, in :data:`FIGURES` order.
    """
    results_dir, out_dir = Path(results_dir), Path(out_dir)
    written = []
    for source, name, kind in FIGURES:
        file = results_dir / source
        if not file.is_file():
            continue
        payload = json.loads(file.read_text())
        target = out_dir / name
        if kind == "calls":
            title = f"{metric} vs calls — {_describe(payload, source)}"
            written.append(calls_figure(payload, target, metric, title))
        elif kind == "stages":
            first = payload["runs"][0] if "runs" in payload else payload
            title = f"{metric} per budget stage — {_describe(payload, source)}"
            written.append(per_stage_figure(first, target, metric, title))
        elif kind == "grid":
            written.append(locomo_grid_figure(payload, target, metric))
        elif kind == "latency":
            written.append(latency_figure(payload, target))
        elif kind == "throughput":
            written.append(throughput_figure(payload, target))
        elif kind == "solvers":
            other = results_dir / "quality_incremental_conversations.json"
            locomo = json.loads(other.read_text()) if other.is_file() else None
            written.append(solver_quality_figure(payload, locomo, target))
    return written


__all__ = [
    "FIGURES",
    "benchmark_figures",
    "calls_figure",
    "latency_figure",
    "locomo_grid_figure",
    "per_stage_figure",
    "policy_figure",
    "policy_style",
    "quality_vs_calls",
    "solver_quality_figure",
    "throughput_figure",
]
