"""Options that several commands share, declared once."""

from __future__ import annotations

from typing import Annotated

import typer

from earm_jax.core.solvers import SOLVERS
from earm_jax.settings import EarmSettings

DEFAULTS = EarmSettings()
"""Every command's solver and policy defaults: :class:`EarmSettings`' (whose
solver fields are :class:`~earm_jax.core.config.SolverConfig`'s)."""

Resamples = Annotated[int, typer.Option(help="Bootstrap resamples.")]
Preset = Annotated[
    str,
    typer.Option(
        help="paper (seven policies) or best (adds the adaptive multi-round "
        "policy 'best' under a hard call budget)."
    ),
]
CallBudget = Annotated[
    float,
    typer.Option(help="best: hard cap on calls as a fraction of Full's calls."),
]

Solver = Annotated[str, typer.Option(help=" | ".join(SOLVERS) + ".")]
NumSweeps = Annotated[
    int, typer.Option(help="ALS sweeps per query (--solver als only).")
]
HighFraction = Annotated[
    float, typer.Option(help="High-similarity stratum of the anchor sampler.")
]

__all__ = [
    "DEFAULTS",
    "CallBudget",
    "HighFraction",
    "NumSweeps",
    "Preset",
    "Resamples",
    "Solver",
]
