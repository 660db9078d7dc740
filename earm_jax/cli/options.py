"""Options that several commands share, declared once."""

from __future__ import annotations

from typing import Annotated

import typer

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

__all__ = ["CallBudget", "Preset", "Resamples"]
