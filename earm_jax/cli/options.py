"""Options that several commands share, declared once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from earm_jax.cli.errors import UserError
from earm_jax.core.solvers import SOLVERS
from earm_jax.settings import EarmSettings

HELP_STYLE: dict[str, Any] = {"rich_markup_mode": None}
"""How every ``earm`` app renders ``--help``: click's plain formatter. Rich's
panels cut option names at 80 columns ("--false-positive-r…"), show ``<bool>``
beside on/off flags and keep the docstrings' line breaks; click wraps the help
to the terminal and shows a flag as ``--quiet / --no-quiet``."""

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
CallOrder = Annotated[
    str,
    typer.Option(
        help="best: which candidates its calls after the similarity head (the "
        "first 40%) pay for: embedding (the highest posterior mean of a "
        "regression of the answers on the texts' embeddings; the default where "
        "the texts exist), embedding_gain (the highest expected gain over the "
        "current top K), learned (the highest in its learned order) or "
        "similarity (the most similar unscored; the simulator's default)."
    ),
]

StopRule = Annotated[
    str,
    typer.Option(
        help="best: spend (every query spends its allowance; the default) or "
        "settle_or_spill (a query judged settled stops and its calls go to "
        "later queries)."
    ),
]

Solver = Annotated[str, typer.Option(help=" | ".join(SOLVERS) + ".")]
NumSweeps = Annotated[
    int, typer.Option(help="ALS sweeps per query (--solver als only).")
]
HighFraction = Annotated[
    float, typer.Option(help="High-similarity stratum of the anchor sampler.")
]
PoolSize = Annotated[int, typer.Option(help="Candidates per query (N).")]
Expand = Annotated[
    int,
    typer.Option(
        help="Search expansion (docs/design-notes.md): E slots per query for "
        "memories outside the pool with history, ranked by their completion; "
        "adds the policy mixed_expand (0: off)."
    ),
]
ExpandMinScore = Annotated[
    float,
    typer.Option(
        help="--expand: the completion an outside memory needs for a slot "
        "(0: any; 0.5: predicted relevant)."
    ),
]
ScorerMode = Annotated[
    str, typer.Option(help="vLLM scoring mode: yesno, rerank, chat, text.")
]
SCORER_BACKENDS = ("torch-float32", "torch-bfloat16", "onnx-float32", "onnx-int8")
"""The in-process scorer's backends (``earm_jax.scoring.cross_encoder.BACKENDS``,
repeated here so that ``--help`` imports no torch; a test checks they agree)."""
DEFAULT_SCORER_BACKEND = "torch-float32"
BUILD_SCORER_BACKEND = DEFAULT_SCORER_BACKEND
"""``earm_jax.scoring.cross_encoder.BUILD_BACKEND``, repeated for ``--help`` (a
test checks they agree)."""

ScorerBackend = Annotated[
    str | None,
    typer.Option(
        help="In-process cross-encoder: what runs it at which precision, "
        + ", ".join(SCORER_BACKENDS)
        + f" (default {DEFAULT_SCORER_BACKEND}; onnx-* need the scorer extra; "
        "see docs/trained-scorer.md#backends).",
        show_default=False,
    ),
]
EvaluationScorerBackend = Annotated[
    str | None,
    typer.Option(
        "--scorer-backend",
        help="In-process cross-encoder: what runs it at which precision, "
        + ", ".join(SCORER_BACKENDS)
        + " (default: the one a trained-scorer build scored its held-out pools "
        f"with, so its score cache answers; else {DEFAULT_SCORER_BACKEND}; "
        "onnx-* need the scorer extra; see docs/trained-scorer.md#backends).",
        show_default=False,
    ),
]
BuildScorerBackend = Annotated[
    str | None,
    typer.Option(
        "--scorer-backend",
        help="What scores the held-out pools, at which precision: "
        + ", ".join(SCORER_BACKENDS)
        + f" (default {BUILD_SCORER_BACKEND}, the fastest that keeps float32's "
        "ranking; onnx-* need the scorer extra; with --resume: the stopped "
        "build's).",
        show_default=False,
    ),
]
ScorerDtype = Annotated[
    str | None,
    typer.Option(
        hidden=True,
        help="Deprecated: --scorer-backend torch-float32 or torch-bfloat16.",
    ),
]

_WARNED: set[str] = set()


def scorer_backend(backend: str | None, dtype: str | None) -> str:
    """The backend ``--scorer-backend`` names, or the one the deprecated
    ``--scorer-dtype`` stands for (saying so once per process), else the
    default; a one-line error on an unknown name or on both options
    disagreeing.

    >>> scorer_backend("onnx-float32", None)
    'onnx-float32'
    >>> scorer_backend(None, None)
    'torch-float32'
    """
    return given_scorer_backend(backend, dtype) or DEFAULT_SCORER_BACKEND


def given_scorer_backend(backend: str | None, dtype: str | None) -> str | None:
    """:func:`scorer_backend`, ``None`` where neither option is given (the
    command then picks its own).

    >>> given_scorer_backend(None, None) is None
    True
    """
    if backend is not None and backend not in SCORER_BACKENDS:
        raise UserError(
            f"--scorer-backend must be one of {', '.join(SCORER_BACKENDS)}, got "
            f"{backend!r}",
            "e.g. --scorer-backend onnx-float32",
        )
    if dtype is None:
        return backend
    if dtype not in ("float32", "bfloat16"):
        raise UserError(
            f"--scorer-dtype must be float32 or bfloat16, got {dtype!r}",
            "it is deprecated: use --scorer-backend torch-float32 or torch-bfloat16",
        )
    mapped = f"torch-{dtype}"
    if backend is not None and backend != mapped:
        raise UserError(
            f"--scorer-dtype {dtype} (deprecated, = --scorer-backend {mapped}) "
            f"disagrees with --scorer-backend {backend}",
            "drop --scorer-dtype",
        )
    if "scorer-dtype" not in _WARNED:
        _WARNED.add("scorer-dtype")
        print(
            f"warning: --scorer-dtype is deprecated and will go; it means "
            f"--scorer-backend {mapped}",
            file=sys.stderr,
        )
    return mapped


JsonPath = Annotated[
    Path | None, typer.Option("--json", help="Write the results JSON here.")
]
Plot = Annotated[Path | None, typer.Option(help="Write a PNG figure here.")]

LocomoData = Annotated[
    Path | None,
    typer.Option(
        help="locomo10.json or a folder of per-conversation files "
        "(default: $EARM_LOCOMO_DATA)."
    ),
]
Conversations = Annotated[
    str, typer.Option(help="Only these conversations, e.g. 26,30 (default: all).")
]
Limit = Annotated[
    int, typer.Option(help="First N questions of each conversation (0 = all).")
]
CacheDir = Annotated[
    Path | None, typer.Option(help="Embedding cache (default $EARM_CACHE_DIR).")
]
Quiet = Annotated[bool, typer.Option(help="No progress lines (stderr).")]


def comma_names(text: str) -> tuple[str, ...]:
    """The names of a comma list such as ``--conversations 26,30``."""
    return tuple(part.strip() for part in text.split(",") if part.strip())


__all__ = [
    "DEFAULTS",
    "HELP_STYLE",
    "CacheDir",
    "CallBudget",
    "CallOrder",
    "StopRule",
    "Conversations",
    "Expand",
    "ExpandMinScore",
    "HighFraction",
    "JsonPath",
    "Limit",
    "LocomoData",
    "NumSweeps",
    "Plot",
    "PoolSize",
    "Preset",
    "Quiet",
    "Resamples",
    "SCORER_BACKENDS",
    "BuildScorerBackend",
    "EvaluationScorerBackend",
    "ScorerBackend",
    "ScorerDtype",
    "ScorerMode",
    "Solver",
    "comma_names",
    "given_scorer_backend",
    "scorer_backend",
]
