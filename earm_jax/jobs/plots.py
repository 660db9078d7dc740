"""Figures of policy results and benchmarks (matplotlib, host side, PNG).

One import path for every figure:

- :mod:`~earm_jax.jobs.policy_plots`: ``earm simulate --plot`` / ``earm locomo
  --plot``: per-stage curves and quality vs calls (:func:`policy_figure`).
- :mod:`~earm_jax.jobs.benchmark_plots`: ``earm plots``: every figure a results
  folder's ``figures.json`` lists (:func:`benchmark_figures`).
- :mod:`~earm_jax.jobs.plot_style`: the colours, markers and titles they share.
"""

from earm_jax.jobs.benchmark_plots import FIGURE_LIST as FIGURE_LIST
from earm_jax.jobs.benchmark_plots import FigureSpec as FigureSpec
from earm_jax.jobs.benchmark_plots import benchmark_figures as benchmark_figures
from earm_jax.jobs.benchmark_plots import latency_figure as latency_figure
from earm_jax.jobs.benchmark_plots import read_figure_list as read_figure_list
from earm_jax.jobs.benchmark_plots import (
    solver_quality_figure as solver_quality_figure,
)
from earm_jax.jobs.benchmark_plots import throughput_figure as throughput_figure
from earm_jax.jobs.plot_style import policy_style as policy_style
from earm_jax.jobs.policy_plots import calls_figure as calls_figure
from earm_jax.jobs.policy_plots import locomo_grid_figure as locomo_grid_figure
from earm_jax.jobs.policy_plots import per_stage_figure as per_stage_figure
from earm_jax.jobs.policy_plots import policy_figure as policy_figure
from earm_jax.jobs.policy_plots import quality_vs_calls as quality_vs_calls

__all__ = [
    "FIGURE_LIST",
    "FigureSpec",
    "benchmark_figures",
    "calls_figure",
    "latency_figure",
    "locomo_grid_figure",
    "per_stage_figure",
    "policy_figure",
    "policy_style",
    "quality_vs_calls",
    "read_figure_list",
    "solver_quality_figure",
    "throughput_figure",
]
