"""``earm advise``: a user's scorer answers, read from a file, asked where the
regime map puts them.

Two inputs: a CSV of labelled answers (one row per question and pool
candidate) or a build's recorded answers replayed on the LoCoMo pools they
were recorded on.
"""

from __future__ import annotations

import csv
import dataclasses
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from earm_jax.eval.regime import advise

CSV_COLUMNS = ("query_id", "candidate_rank", "similarity", "score", "label")
"""Required CSV columns; an optional ``group`` (e.g. the conversation) is
resampled whole by the bootstrap."""

MAP_BOUNDS = (-0.059, 0.001)
"""The regime map's ``(smallest room that paid, largest room that did not)``
in Full − Top-similarity (Recall@10), from the committed map
(``experiments/results/regime_map/turns.json``) by
:func:`earm_jax.eval.regime.boundary`; a test keeps the two equal."""


@dataclasses.dataclass(frozen=True)
class LabelledAnswers:
    """``[T, N]`` arrays of one labelled sample, pools in similarity order."""

    scores: np.ndarray
    similarity: np.ndarray
    relevant: np.ndarray
    valid: np.ndarray
    groups: np.ndarray | None = None
    num_relevant: np.ndarray | None = None
    candidates: np.ndarray | None = None
    """``int[T, N]`` each candidate's memory row in its conversation (recorded
    answers only; with ``groups`` it names the memory)."""
    free_order: np.ndarray | None = None
    """``float[T, N]`` the build's free order of each pool (cosine + word
    coverage, ``-inf`` at padding): recorded answers whose folds carry one."""


def _number(row: dict[str, str], name: str, line: int) -> float:
    try:
        value = float(row[name])
    except (TypeError, ValueError) as error:
        raise ValueError(
            f"line {line}: {name} must be a number, got {row.get(name)!r}"
        ) from error
    if not np.isfinite(value):
        raise ValueError(f"line {line}: {name} must be finite, got {row[name]!r}")
    return value


def _label(row: dict[str, str], line: int) -> bool:
    text = (row.get("label") or "").strip().lower()
    if text in ("1", "true", "yes"):
        return True
    if text in ("0", "false", "no"):
        return False
    raise ValueError(f"line {line}: label must be 0/1, got {row.get('label')!r}")


def read_answers_csv(lines: Iterable[str], source: str = "CSV") -> LabelledAnswers:
    """The labelled answers of a CSV with :data:`CSV_COLUMNS` (and an
    optional ``group``).

    Raises:
      ValueError: a missing column, a bad value (naming the line and column),
        a score outside [0, 1], or a candidate rank given twice for a question.
    """
    reader = csv.DictReader(lines)
    missing = [c for c in CSV_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise ValueError(f"{source}: missing column(s) {', '.join(missing)}")
    rows: dict[str, dict[int, tuple[float, float, bool]]] = {}
    groups: dict[str, str] = {}
    for line, row in enumerate(reader, start=2):
        query = row["query_id"]
        rank = _number(row, "candidate_rank", line)
        if rank != int(rank) or rank < 1:
            raise ValueError(
                f"line {line}: candidate_rank must be 1, 2, ... (1: the most "
                f"similar), got {row['candidate_rank']!r}"
            )
        score = _number(row, "score", line)
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"line {line}: score must be in [0, 1], got {score}")
        entry = (_number(row, "similarity", line), score, _label(row, line))
        if int(rank) in rows.setdefault(query, {}):
            raise ValueError(
                f"line {line}: question {query!r} has candidate_rank {int(rank)} twice"
            )
        rows[query][int(rank)] = entry
        if "group" in row and row["group"] is not None:
            groups[query] = row["group"]
    if not rows:
        raise ValueError(f"{source}: no rows")
    width = max(max(ranks) for ranks in rows.values())
    shape = (len(rows), width)
    scores = np.full(shape, np.nan)
    similarity = np.zeros(shape)
    relevant = np.zeros(shape, bool)
    valid = np.zeros(shape, bool)
    for t, ranks in enumerate(rows.values()):
        for rank, (cosine, score, label) in ranks.items():
            similarity[t, rank - 1], scores[t, rank - 1] = cosine, score
            relevant[t, rank - 1], valid[t, rank - 1] = label, True
    return LabelledAnswers(
        scores,
        similarity,
        relevant,
        valid,
        np.array([groups.get(q, "") for q in rows]) if groups else None,
    )


def recorded_labelled_answers(
    scores_file: str, data: str, cache_dir: str | None, blend_weight: float = 1.0
) -> LabelledAnswers:
    """A build's recorded answers on the LoCoMo pools they were recorded on,
    as the scorer gives them (the blend at ``blend_weight``), with the
    evidence labels and, when every fold carries one, the free order; each
    conversation is a bootstrap group."""
    from earm_jax.jobs.locomo_recorded import load_recorded, replayed_streams
    from earm_jax.locomo.pool_order import free_order_key

    recorded = load_recorded([scores_file])
    (_, answers), *_ = recorded.items()
    parts: dict[str, list[np.ndarray]] = {
        "scores": [],
        "similarity": [],
        "relevant": [],
        "valid": [],
        "groups": [],
        "num_relevant": [],
        "candidates": [],
        "free_order": [],
    }
    has_free_order = all(
        answers.free_orders.get(c.fold) is not None
        for c in answers.conversations.values()
    )
    for stream, replayed in replayed_streams(answers, data, cache_dir, blend_weight):
        arrays = replayed.arrays
        parts["scores"].append(np.where(arrays.valid, arrays.scores, np.nan))
        parts["similarity"].append(arrays.similarity)
        parts["relevant"].append(arrays.relevant)
        parts["valid"].append(arrays.valid)
        parts["num_relevant"].append(arrays.num_relevant)
        parts["candidates"].append(arrays.candidates)
        if has_free_order:
            order = answers.free_order_of(stream.meta.sample_id)
            parts["free_order"].append(free_order_key(stream, order))
        parts["groups"].append(
            np.full(arrays.valid.shape[0], stream.meta.sample_id, dtype=object)
        )
    width = max(p.shape[1] for p in parts["valid"])

    def stacked(name: str, fill: Any) -> np.ndarray:
        return np.concatenate(
            [
                np.pad(p, [(0, 0), (0, width - p.shape[1])], constant_values=fill)
                for p in parts[name]
            ]
        )

    return LabelledAnswers(
        stacked("scores", np.nan),
        stacked("similarity", 0.0),
        stacked("relevant", False),
        stacked("valid", False),
        np.concatenate(parts["groups"]).astype(str),
        np.concatenate(parts["num_relevant"]),
        stacked("candidates", 0),
        stacked("free_order", -np.inf) if has_free_order else None,
    )


def advise_answers(
    answers: LabelledAnswers,
    call_budget: float,
    bounds: tuple[float, float] = MAP_BOUNDS,
    num_resamples: int = 1000,
) -> dict[str, Any]:
    """:func:`~earm_jax.eval.regime.advise` on ``answers``."""
    return advise(
        answers.scores,
        answers.similarity,
        answers.relevant,
        answers.valid,
        call_budget,
        bounds,
        num_relevant=answers.num_relevant,
        clusters=answers.groups,
        num_resamples=num_resamples,
        free_order=answers.free_order,
    )


def read_map(path: str | Path) -> dict[str, Any]:
    """A committed regime map JSON."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


__all__ = [
    "CSV_COLUMNS",
    "MAP_BOUNDS",
    "LabelledAnswers",
    "advise_answers",
    "read_answers_csv",
    "read_map",
    "recorded_labelled_answers",
]
