"""Figures: every policy drawn (also ones added later), README names and order,
titles everywhere, and ``earm plots`` from the result JSONs."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from earm_jax.cli import main  # noqa: E402
from earm_jax.eval import labels  # noqa: E402
from earm_jax.jobs import benchmark_plots, plots, policy_plots  # noqa: E402

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"


def _with_best(payload: dict) -> dict:
    payload = copy.deepcopy(payload)
    payload["results"]["best"] = copy.deepcopy(payload["results"]["top_similarity"])
    return payload


def test_quality_vs_calls_draws_every_policy_in_readme_order():
    payload = _with_best(json.loads((RESULTS / "simulate_default.json").read_text()))
    figure, axis = plt.subplots()
    plots.quality_vs_calls(axis, payload["results"], "recall@10")
    legend = [text.get_text() for text in axis.get_legend().get_texts()]
    plt.close(figure)
    expected = [*labels.POLICY_LABELS.values(), "best"]
    assert [entry.split(" (")[0] for entry in legend] == [
        e.split(" (")[0] for e in expected
    ]
    assert legend[3].endswith("(58 calls)")


def test_quality_vs_calls_draws_every_point_at_its_true_calls():
    payload = json.loads(
        (RESULTS / "conversations_best_turns_noise01.json").read_text()
    )
    results = payload["runs"][0]["results"]
    figure, axis = plt.subplots()
    plots.quality_vs_calls(axis, results, "recall@10")
    drawn = {}
    for container in axis.containers:  # one errorbar per policy
        (x,), (y,) = container.lines[0].get_xdata(), container.lines[0].get_ydata()
        drawn[container.get_label().rsplit(" (", 1)[0]] = (float(x), float(y))
    label = axis.get_xlabel()
    plt.close(figure)
    assert len(drawn) == len(results)
    for policy, row in results.items():
        x, y = drawn[labels.policy_label(policy)]
        # no offset: best (49.2 calls) sits left of the others (49.5), not apart
        assert x == row["calls_per_query"]
        assert y == row["recall@10"]["mean"]
    assert "side by side" not in label and "calls" in label


def test_per_stage_axes_say_stage_is_also_position_in_the_stream(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(
        policy_plots, "save_figure", lambda figure, path: drawn.append(figure)
    )
    payload = json.loads((RESULTS / "simulate_default.json").read_text())
    plots.per_stage_figure(payload, tmp_path / "x.png", "recall@10", "title")
    axis = drawn[0].axes[0]
    label = axis.get_xlabel()
    plt.close(drawn[0])
    assert policy_plots.STAGE_NOTE in label and "dodged" in label


def test_every_policy_and_solver_keeps_one_colour():
    styles = [plots.policy_style(p) for p in [*labels.POLICY_LABELS, "best"]]
    assert len({s["color"] for s in styles}) == len(styles)
    assert plots.policy_style("best") == plots.policy_style("best")
    # a policy added later never takes a known policy's colour
    assert plots.policy_style("later")["color"] not in {s["color"] for s in styles}
    solvers = benchmark_plots.SOLVER_STYLES
    assert len({colour for colour, _ in solvers.values()}) == len(solvers)


def _legend_colours(figure) -> dict[str, tuple]:
    axis = figure.axes[0]
    handles, texts = axis.get_legend_handles_labels()
    return {
        text: matplotlib.colors.to_rgb(handle.get_color())
        for handle, text in zip(handles, texts, strict=True)
        if hasattr(handle, "get_color")
    }


def test_latency_and_throughput_figures_colour_each_solver_alike(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(
        benchmark_plots, "save_figure", lambda figure, path: drawn.append(figure)
    )
    colours: dict[str, set] = {}
    for spec in plots.read_figure_list(RESULTS):
        if spec.kind not in ("latency", "throughput"):
            continue
        payload = json.loads((RESULTS / spec.source).read_text())
        draw = (
            plots.latency_figure if spec.kind == "latency" else plots.throughput_figure
        )
        draw(payload, tmp_path / "x.png", spec.series())
        for text, colour in _legend_colours(drawn[-1]).items():
            colours.setdefault(text.split(" (p50")[0], set()).add(colour)
        plt.close(drawn[-1])
    assert colours["incremental"] == {matplotlib.colors.to_rgb("tab:blue")}
    assert all(len(found) == 1 for found in colours.values()), colours


def test_every_series_the_figure_list_draws_has_a_listed_style():
    for spec in plots.read_figure_list(RESULTS):
        if spec.kind not in ("latency", "throughput"):
            continue
        payload = json.loads((RESULTS / spec.source).read_text())
        rows = payload[spec.kind]["rows"]
        drawn = {spec.series().name(row["solver"]) for row in rows}
        assert drawn <= set(benchmark_plots.SOLVER_STYLES), (spec.figure, drawn)
        # a series is named for what it is, not for a commit
        assert not any(re.search("[0-9a-f]{7,}", name) for name in drawn), drawn


def test_earm_plots_writes_titled_figures(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    figures = plots.read_figure_list(RESULTS)
    (results / plots.FIGURE_LIST).write_text((RESULTS / plots.FIGURE_LIST).read_text())
    sources = {figure.source for figure in figures}
    sources |= {figure.companion for figure in figures if figure.companion}
    for name in sources:
        payload = json.loads((RESULTS / name).read_text())
        if "top_similarity" in (payload.get("results") or {}):
            payload = _with_best(payload)
        (results / name).write_text(json.dumps(payload))
    out = tmp_path / "figures"
    assert main.run(["plots", "--results", str(results), "--out", str(out)]) == 0
    written = sorted(out.glob("*.png"))
    assert len(written) == len(figures)
    assert all(path.read_bytes().startswith(b"\x89PNG") for path in written)
    assert "wrote" in capsys.readouterr().out


def test_a_results_folder_without_a_figure_list_is_one_line(tmp_path, capsys):
    status = main.run(["plots", "--results", str(tmp_path), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert status == 2
    assert "figures.json" in err and "does not exist" in err


def test_the_figure_list_names_the_series_of_throughput_figures(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(
        benchmark_plots, "save_figure", lambda figure, path: drawn.append(figure)
    )
    paired = next(
        figure
        for figure in plots.read_figure_list(RESULTS)
        if figure.figure == "throughput_vs_streams_paired.png"
    )
    payload = json.loads((RESULTS / paired.source).read_text())
    plots.throughput_figure(payload, tmp_path / "x.png", paired.series())
    legend = [t.get_text() for t in drawn[0].axes[0].get_legend().get_texts()]
    plt.close(drawn[0])
    solvers = {row["solver"] for row in payload["throughput"]["rows"]}
    assert len(legend) == len(solvers)
    for solver, label in paired.series_labels.items():
        if solver in solvers:
            assert any(entry.startswith(label.split("{")[0]) for entry in legend)


def test_earm_plots_writes_nothing_unless_told_where(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    (results / plots.FIGURE_LIST).write_text((RESULTS / plots.FIGURE_LIST).read_text())
    assert main.run(["plots", "--results", str(results)]) == 2
    err = capsys.readouterr().err
    assert "writes only where told" in err and "--in-place" in err
    assert sorted(p.name for p in results.iterdir()) == [plots.FIGURE_LIST]


def test_the_query_cost_figure_draws_a_point_per_policy_and_scorer(
    tmp_path, monkeypatch
):
    drawn = []
    monkeypatch.setattr(
        benchmark_plots, "save_figure", lambda figure, path: drawn.append(figure)
    )
    row = {"wall_ms": {"p50": 900.0}, "recall@10": 0.5}
    payload = {
        "results": {
            "in-process": {"full": row, "paper": {**row, "recall@10": 0.4}},
            "vllm": {"full": {**row, "wall_ms": {"p50": 300.0}}},
        },
        "scorers": {
            "in-process": {"backend": "torch-float32"},
            "vllm": {"backend": "vllm-server"},
        },
        "config": {"conversation": "26", "limit": 3, "memories": 10},
    }
    benchmark_plots.query_cost_figure(payload, tmp_path / "x.png")
    axis = drawn[-1].axes[0]
    _, texts = axis.get_legend_handles_labels()
    assert texts == [
        "Full (in process, torch-float32)",
        "Mixed (EARM) (in process, torch-float32)",
        "Full (vLLM server)",
    ]
    points = [tuple(c.get_offsets()[0]) for c in axis.collections]
    assert points == [(900.0, 0.5), (900.0, 0.4), (300.0, 0.5)]
    # the served scorer's points are hollow
    assert axis.collections[2].get_facecolors().size == 0
    plt.close(drawn[-1])
