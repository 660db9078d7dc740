"""Figures: every policy drawn (also ones added later), README names and order,
titles everywhere, and ``earm plots`` from the result JSONs."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from earm_jax.cli import main  # noqa: E402
from earm_jax.eval import labels  # noqa: E402
from earm_jax.jobs import benchmark_plots, plots  # noqa: E402

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
    xs = [float(c.lines[0].get_xdata()[0]) for c in axis.containers]
    plt.close(figure)
    expected = [*labels.POLICY_LABELS.values(), "best"]
    assert [entry.split(" (")[0] for entry in legend] == [
        e.split(" (")[0] for e in expected
    ]
    # five policies pay 58 calls; they are drawn apart, none hides another
    assert legend[3].endswith("(58 calls)")
    assert len(set(xs)) == len(xs) == len(expected)


def test_earm_plots_writes_titled_figures(tmp_path, capsys):
    results = tmp_path / "results"
    results.mkdir()
    figures = plots.read_figure_list(RESULTS)
    (results / plots.FIGURE_LIST).write_text((RESULTS / plots.FIGURE_LIST).read_text())
    sources = {figure.source for figure in figures}
    sources |= {figure.companion for figure in figures if figure.companion}
    for name in sources:
        payload = json.loads((RESULTS / name).read_text())
        if isinstance(payload.get("results"), dict):
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
    plots.throughput_figure(payload, tmp_path / "x.png", paired.series_labels)
    legend = [t.get_text() for t in drawn[0].axes[0].get_legend().get_texts()]
    plt.close(drawn[0])
    solvers = {row["solver"] for row in payload["throughput"]["rows"]}
    assert len(legend) == len(solvers)
    for solver, label in paired.series_labels.items():
        if solver in solvers:
            assert any(entry.startswith(label.split("{")[0]) for entry in legend)
