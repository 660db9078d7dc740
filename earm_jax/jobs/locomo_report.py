"""What ``earm locomo`` reports beside its tables: the scorer's own quality on
the streams, and a figure of the first grid point."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from earm_jax.locomo.evaluate import PerQuery


def streams_scorer_quality(streams: list[Any], ks: tuple[int, ...]) -> dict[str, Any]:
    """The scorer's own quality on the streams' whole pools (every scorer,
    the stand-in included, so reports can set them side by side)."""
    from earm_jax.eval.scorer_quality import scorer_quality

    width = max(s.arrays.scores.shape[1] for s in streams)

    def stacked(name: str, fill: Any) -> np.ndarray:
        return np.concatenate(
            [
                np.pad(
                    getattr(s.arrays, name),
                    [(0, 0), (0, width - getattr(s.arrays, name).shape[1])],
                    constant_values=fill,
                )
                for s in streams
            ]
        )

    return scorer_quality(
        stacked("scores", np.nan),
        stacked("similarity", -np.inf),
        stacked("relevant", False),
        stacked("valid", False),
        np.concatenate([s.arrays.num_relevant for s in streams]),
        np.concatenate([s.arrays.category for s in streams]),
        ks=tuple(ks),
    )


def _run_title(payload: dict[str, Any], run: dict[str, Any]) -> str:
    kind = payload["config"]["scorer"]
    if kind == "evidence":
        scorer = "evidence stand-in scorer (not an LLM)"
    elif kind == "cross-encoder":
        scorer = f"trained cross-encoder {Path(payload['config']['scorer_model']).name}"
    else:
        scorer = f"LLM scorer {payload['config']['scorer_model']}"
    noise = f", evidence noise {run['noise']}" if run["noise"] is not None else ""
    return (
        f"LoCoMo {run['setting']}, rank {run['rank']}{noise}: "
        f"{run['num_scored_queries']} labelled questions, {scorer}"
    )


def plot_first_run(payload: dict[str, Any], per_query: PerQuery, path: Path) -> Path:
    """Figure of the first grid point: the metric per budget stage and vs calls."""
    from earm_jax.jobs.plots import policy_figure

    first = payload["runs"][0]
    return policy_figure(
        per_query.metrics,
        per_query.has_relevant,
        first,
        path,
        metric=f"recall@{payload['config']['ks'][0]}",
        title=_run_title(payload, first),
        positions=per_query.stage,
        position_label="budget stage (0: 200 anchors ... 4: 35 anchors)",
    )


__all__ = ["plot_first_run", "streams_scorer_quality"]
