"""The README's benchmark figures (``earm plots``): latency and throughput of
the solver step, the incremental solver's quality against ``als``, and the
policy figures of the committed results.

Which result JSON becomes which figure is data, not code: the results folder's
``figures.json`` lists ``{"source", "figure", "kind"}`` entries (and ``with``,
a second JSON, for kind ``solvers``); :func:`benchmark_figures` draws each
whose JSON exists.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

from earm_jax.eval.labels import policy_label
from earm_jax.jobs.plot_style import (
    load_note,
    policy_style,
    pyplot,
    save_figure,
    wrap_title,
)
from earm_jax.jobs.policy_plots import (
    calls_figure,
    locomo_grid_figure,
    per_stage_figure,
)

FIGURE_LIST = "figures.json"
"""The name of the figure list in a results folder."""

SOLVER_STYLES: dict[str, tuple[str, str]] = {
    "incremental": ("tab:blue", "o"),
    "als": ("tab:orange", "s"),
    "incremental_chunked": ("tab:cyan", "D"),
    "incremental_older_step": ("tab:gray", "^"),
    "incremental_superseded": ("tab:brown", "v"),
}
"""Colour and marker of each solver series, the same in every latency and
throughput figure; a series not listed (e.g. a superseded step the figure list
renames) takes one of the remaining colours, fixed by its name."""

_OTHER_STYLES = (("tab:purple", "P"), ("tab:olive", "X"), ("tab:pink", "*"))


def solver_style(series: str) -> dict[str, str]:
    """``{"color", "marker"}`` of a solver series (:data:`SOLVER_STYLES`)."""
    colour, marker = SOLVER_STYLES.get(
        series, _OTHER_STYLES[sum(map(ord, series)) % len(_OTHER_STYLES)]
    )
    return {"color": colour, "marker": marker}


class Series(NamedTuple):
    """How a figure names the solvers of its JSON: ``rename`` maps a row's
    solver to the series it is drawn as (its colour and marker), ``labels`` a
    series to its legend text (``{chunk}``: the run's streams per chunk), and
    ``note`` is added to the title (e.g. that the run is superseded)."""

    rename: Mapping[str, str] | None = None
    labels: Mapping[str, str] | None = None
    note: str | None = None

    def name(self, solver: str) -> str:
        return (self.rename or {}).get(solver, solver)

    def label(self, series: str, payload: Mapping[str, Any], suffix: str = "") -> str:
        text = (self.labels or {}).get(series, series)
        chunk = payload.get("config", {}).get("streams_per_chunk")
        return text.format(chunk=chunk) + suffix

    def title(self, text: str) -> str:
        return f"{text} — {self.note}" if self.note else text


def _solver_order(solver: str) -> tuple[int, str]:
    """Legend order: the listed solvers in :data:`SOLVER_STYLES` order, then
    the rest by name."""
    order = list(SOLVER_STYLES)
    return (order.index(solver) if solver in order else len(order), solver)


def _finish(
    figure, axis, payload, name: str, sizes: str, path: str | Path, series: Series
) -> Path:
    """Grid, legend and the title ``name (sizes; the run's note)`` of a benchmark
    figure (with the series' note, :meth:`Series.title`), then saves it."""
    axis.grid(alpha=0.3, which="both")
    axis.legend(fontsize=8)
    note = load_note(payload.get("meta", payload))
    axis.set_title(
        wrap_title(series.title(f"{name} ({sizes}; {note})"), 70), fontsize=10
    )
    figure.tight_layout()
    return save_figure(figure, path)


def latency_figure(
    payload: Mapping[str, Any], path: str | Path, series: Series | None = None
) -> Path:
    """One online step's latency (p50, min–p90 range) against the history size
    ``t``, per solver, from a ``bench_solver --sections latency`` JSON."""
    series = series or Series()
    plt = pyplot()
    rows = payload["latency"]["rows"]
    figure, axis = plt.subplots(figsize=(7, 5))
    for solver in sorted({r["solver"] for r in rows}, key=_solver_order):
        mine = sorted((r for r in rows if r["solver"] == solver), key=lambda r: r["t"])
        ts = [r["t"] for r in mine]
        p50 = [r["p50_ms"] for r in mine]
        name = series.name(solver)
        style = solver_style(name)
        axis.plot(ts, p50, **style, label=series.label(name, payload, " (p50)"))
        axis.fill_between(
            ts,
            [r["min_ms"] for r in mine],
            [r["p90_ms"] for r in mine],
            color=style["color"],
            alpha=0.15,
            label=series.label(name, payload, " (min–p90)"),
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
    axis.set_xlabel("history: queries already stored (t, log scale)")
    axis.set_ylabel("one online step (select + observe), ms (log scale)")
    return _finish(
        figure, axis, payload, "Latency vs history", "M=1,000, N=200, r=8", path, series
    )


def throughput_figure(
    payload: Mapping[str, Any], path: str | Path, series: Series | None = None
) -> Path:
    """``run_batch`` stream-queries per second against the number of streams
    ``S``, per solver, from a ``bench_solver --sections throughput`` JSON.

    ``series`` names a row's solver in the legend; unnamed rows show the
    solver's name.
    """
    series = series or Series()
    plt = pyplot()
    rows = [r for r in payload["throughput"]["rows"] if r.get("sweep", "S") == "S"]
    figure, axis = plt.subplots(figsize=(7, 5))
    for solver in sorted({r["solver"] for r in rows}, key=_solver_order):
        mine = sorted((r for r in rows if r["solver"] == solver), key=lambda r: r["S"])
        name = series.name(solver)
        axis.plot(
            [r["S"] for r in mine],
            [r["stream_queries_per_s"] for r in mine],
            **solver_style(name),
            label=series.label(name, payload),
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
    axis.xaxis.set_minor_locator(pyplot().NullLocator())
    axis.set_xlabel("streams S (vmapped in one run_batch call; log scale)")
    axis.set_ylabel("stream-queries per second (median, compile excluded; log)")
    return _finish(
        figure,
        axis,
        payload,
        "Throughput vs streams",
        "M=1,000, N=200, r=8, T=40",
        path,
        series,
    )


def solver_quality_figure(
    simulated: Mapping[str, Any] | None,
    conversations: Mapping[str, Any] | None,
    path: str | Path,
) -> Path:
    """``incremental`` − ``als`` quality (same anchors, 95% CIs): on simulated
    streams by the number of history rows refreshed per query, and on LoCoMo
    per metric; run times in the labels."""
    plt = pyplot()
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
            f"{als['seconds_incl_compile']:.0f} s); the two metrics side by side"
        )
        left.set_ylabel("incremental − als (metric difference, 95% CI)")
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
        right.errorbar(
            range(len(names)),
            means,
            yerr=[lows, highs],
            fmt="o",
            capsize=3,
            label="Mixed (EARM): incremental − als",
        )
        right.set_xticks(range(len(names)), names)
        right.axhline(0, color="grey", lw=0.8)
        right.set_xlabel("quality metric")
        right.set_ylabel("incremental − als (95% CI over questions)")
        right.grid(alpha=0.3)
        right.legend(fontsize=8)
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
    return save_figure(figure, path)


QUERY_COST_POLICIES: dict[str, str] = {"paper": "mixed"}
"""The policy whose style a query-cost policy takes where the names differ
(the paper's schedule is Mixed)."""


def query_cost_figure(payload: Mapping[str, Any], path: str | Path) -> Path:
    """Recall@10 against a query's p50 wall time, one point per policy and
    scorer (the in-process cross-encoder filled, a served one hollow), from a
    ``benchmarks/bench_query_cost.py`` JSON."""
    plt = pyplot()
    results = payload["results"]
    if results and "wall_ms" in next(iter(results.values())):
        # Written before the scorers were named: the in-process one only.
        results = {"in-process": results}
    described = payload.get("scorers", {})
    figure, axis = plt.subplots(figsize=(7.5, 5))
    for scorer, rows in results.items():
        served = described.get(scorer, {}).get("backend") == "vllm-server"
        how = "vLLM server" if served else "in process"
        backend = described.get(scorer, {}).get("backend")
        if backend and not served:
            how += f", {backend}"
        for policy, row in rows.items():
            if row.get("recall@10") is None:
                continue
            key = QUERY_COST_POLICIES.get(policy, policy)
            style = policy_style(key)
            p50, recall = row["wall_ms"]["p50"], row["recall@10"]
            axis.scatter(
                [p50],
                [recall],
                s=70,
                marker=style["marker"],
                edgecolors=style["color"],
                facecolors="none" if served else style["color"],
                linewidths=1.5,
                label=f"{policy_label(key)} ({how})",
            )
            axis.annotate(
                policy_label(key, short=True),
                (p50, recall),
                textcoords="offset points",
                xytext=(6, -10 if served else 5),
                fontsize=8,
            )
    axis.set_xscale("log")
    axis.set_xlabel("query wall time, p50 (ms, log scale)")
    axis.set_ylabel("Recall@10 (LoCoMo evidence)")
    config = payload.get("config", {})
    sizes = (
        f"conversation {config.get('conversation')}, {config.get('limit')} "
        f"questions, {config.get('memories')} memories"
    )
    return _finish(
        figure, axis, payload, "Recall@10 vs query latency", sizes, path, Series()
    )


class FigureSpec(NamedTuple):
    """One figure of the list: draw ``figure`` (a PNG name) of ``kind`` from the
    result JSON ``source`` (and ``with``, for ``solvers``); for ``latency``
    and ``throughput`` figures ``rename``, ``labels`` and ``note`` say how
    the solvers are drawn and named (:class:`Series`)."""

    source: str
    figure: str
    kind: str
    companion: str | None = None
    series_labels: dict[str, str] | None = None
    rename: dict[str, str] | None = None
    note: str | None = None

    def series(self) -> Series:
        return Series(self.rename, self.series_labels, self.note)


def read_figure_list(results_dir: str | Path) -> list[FigureSpec]:
    """The figures a results folder lists in its ``figures.json``.

    Raises:
      ValueError: the list is missing, not JSON, or names an unknown kind.
    """
    path = Path(results_dir) / FIGURE_LIST
    try:
        entries = json.loads(path.read_text(encoding="utf-8"))["figures"]
        specs = [
            FigureSpec(
                e["source"],
                e["figure"],
                e["kind"],
                e.get("with"),
                e.get("labels"),
                e.get("rename"),
                e.get("note"),
            )
            for e in entries
        ]
    except FileNotFoundError as error:
        raise ValueError(f"{str(path)!r} does not exist") from error
    except (ValueError, KeyError, TypeError) as error:
        raise ValueError(
            f"{str(path)!r} is not a figure list ({type(error).__name__}: {error})"
        ) from error
    for spec in specs:
        if spec.kind not in _DRAW:
            raise ValueError(
                f"{str(path)!r}: figure {spec.figure!r} has kind {spec.kind!r}; "
                f"known: {sorted(_DRAW)}"
            )
    return specs


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


def _draw_calls(payload, target, metric, spec, results_dir):
    title = f"{metric} vs calls — {_describe(payload, spec.source)}"
    return calls_figure(payload, target, metric, title)


def _draw_stages(payload, target, metric, spec, results_dir):
    first = payload["runs"][0] if "runs" in payload else payload
    title = f"{metric} per budget stage — {_describe(payload, spec.source)}"
    return per_stage_figure(first, target, metric, title)


def _draw_solvers(payload, target, metric, spec, results_dir):
    other = results_dir / spec.companion if spec.companion else None
    locomo = json.loads(other.read_text()) if other and other.is_file() else None
    return solver_quality_figure(payload, locomo, target)


_DRAW: dict[str, Callable[..., Path]] = {
    "calls": _draw_calls,
    "stages": _draw_stages,
    "grid": lambda payload, target, metric, spec, results_dir: locomo_grid_figure(
        payload, target, metric
    ),
    "latency": lambda payload, target, metric, spec, results_dir: latency_figure(
        payload, target, spec.series()
    ),
    "throughput": lambda payload, target, metric, spec, results_dir: throughput_figure(
        payload, target, spec.series()
    ),
    "solvers": _draw_solvers,
    "query_cost": lambda payload, target, metric, spec, results_dir: query_cost_figure(
        payload, target
    ),
}
"""The figure kinds a figure list may name, and how each is drawn."""


def benchmark_figures(
    results_dir: str | Path, out_dir: str | Path, metric: str = "recall@10"
) -> list[Path]:
    """Draws every figure of the folder's figure list whose JSON exists.

    Returns:
      The PNG paths written, in the list's order.

    Raises:
      ValueError: no usable ``figures.json`` in ``results_dir``.
    """
    results_dir, out_dir = Path(results_dir), Path(out_dir)
    written = []
    for spec in read_figure_list(results_dir):
        file = results_dir / spec.source
        if not file.is_file():
            continue
        payload = json.loads(file.read_text())
        draw = _DRAW[spec.kind]
        written.append(draw(payload, out_dir / spec.figure, metric, spec, results_dir))
    return written


__all__ = [
    "FIGURE_LIST",
    "SOLVER_STYLES",
    "FigureSpec",
    "Series",
    "benchmark_figures",
    "latency_figure",
    "query_cost_figure",
    "read_figure_list",
    "solver_quality_figure",
    "solver_style",
    "throughput_figure",
]
