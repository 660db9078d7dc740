"""What ``earm train-scorer`` scores: the conversations' pools, and a fold's
calibrated answers on them with the quality and the scorer profile they give."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from earm_jax.eval.scorer_profile import fit_scorer_profile, profile_to_json
from earm_jax.jobs.locomo import streams_scorer_quality
from earm_jax.locomo.data import Conversation
from earm_jax.locomo.evaluate import with_scores
from earm_jax.locomo.streams import LocomoStream


@dataclasses.dataclass
class PoolData:
    """The conversations, their pools per setting, and lookups."""

    conversations: list[Conversation]
    streams: dict[str, list[LocomoStream]]

    def stream(self, setting: str, sample: str) -> LocomoStream:
        index = [c.sample_id for c in self.conversations].index(sample)
        return self.streams[setting][index]

    def conversation(self, sample: str) -> Conversation:
        return next(c for c in self.conversations if c.sample_id == sample)


@dataclasses.dataclass
class FoldAnswers:
    """Calibrated answers on some pools: per setting, per conversation, the
    ``float32[T, N]`` scores (NaN where not scored)."""

    by_setting: dict[str, dict[str, np.ndarray]]

    def quality(self, data: PoolData, setting: str) -> dict[str, Any]:
        """The scorer's quality on the questions it scored: a question with no
        answer (outside a held-back share) would count as Full missing
        everything, so only scored rows are measured."""
        streams = [
            scored_questions(data.stream(setting, sample), answers)
            for sample, answers in self.by_setting[setting].items()
        ]
        return streams_scorer_quality(streams, (10, 20))

    def profile(self, data: PoolData, setting: str, source: dict[str, Any]) -> dict:
        return streams_profile(
            [
                (sample, data.stream(setting, sample), answers)
                for sample, answers in self.by_setting[setting].items()
            ],
            {**source, "setting": setting},
        )


def streams_profile(
    answered: list[tuple[str, LocomoStream, np.ndarray]], source: dict[str, Any]
) -> dict:
    """The scorer profile (``profile_to_json``'s form) measured on each
    ``(sample id, stream, float[T, N] answers)``; NaN answers are left out,
    and so are questions with none.

    Raises:
      ValueError: no relevant or no non-relevant pair was answered.
    """
    parts: dict[str, list[np.ndarray]] = {
        "scores": [],
        "relevant": [],
        "valid": [],
        "memory": [],
        "query": [],
    }
    for sample, stream, answers in answered:
        arrays = stream.arrays
        rows = np.flatnonzero(np.isfinite(answers).any(axis=1))
        parts["scores"].append(answers[rows])
        parts["relevant"].append(arrays.relevant[rows])
        parts["valid"].append(arrays.valid[rows])
        parts["memory"].append(
            np.char.add(f"{sample}:", arrays.candidates[rows].astype(str))
        )
        parts["query"].append(np.char.add(f"{sample}:", rows.astype(str)))
    width = max(p.shape[1] for p in parts["scores"])

    def stacked(name: str, fill: Any) -> np.ndarray:
        pad = [[(0, 0), (0, width - p.shape[1])] for p in parts[name]]
        return np.concatenate(
            [
                np.pad(p, w, constant_values=fill)
                for p, w in zip(parts[name], pad, strict=True)
            ]
        )

    profile, counts = fit_scorer_profile(
        stacked("scores", np.nan),
        stacked("relevant", False),
        stacked("valid", False),
        stacked("memory", ""),
        np.concatenate(parts["query"]),
    )
    return profile_to_json(profile, {**source, **counts})


def scored_questions(stream: LocomoStream, answers: np.ndarray) -> LocomoStream:
    """``stream`` with ``answers`` as its scores, cut to the questions that
    have at least one answer (per-question arrays only; memories unchanged)."""
    rows = np.flatnonzero(np.isfinite(answers).any(axis=1))
    arrays = stream.arrays
    return dataclasses.replace(
        with_scores(stream, answers),
        arrays=dataclasses.replace(
            arrays,
            candidates=arrays.candidates[rows],
            similarity=arrays.similarity[rows],
            valid=arrays.valid[rows],
            scores=answers[rows],
            relevant=arrays.relevant[rows],
            num_relevant=arrays.num_relevant[rows],
            category=arrays.category[rows],
            relevant_memories=None
            if arrays.relevant_memories is None
            else arrays.relevant_memories[rows],
            query_embeddings=None
            if arrays.query_embeddings is None
            else arrays.query_embeddings[rows],
        ),
    )


def score_pools(scorer: Any, stream: LocomoStream, questions: np.ndarray) -> np.ndarray:
    """The chosen questions' whole pools scored (NaN elsewhere)."""
    answers = np.full(stream.arrays.scores.shape, np.nan, np.float32)
    rows = np.flatnonzero(questions)
    requests = []
    for t in rows:
        positions = np.flatnonzero(stream.arrays.valid[t])
        memories = [
            stream.meta.memory_texts[int(m)]
            for m in stream.arrays.candidates[t, positions]
        ]
        requests.append((stream.meta.query_texts[t], memories))
    for t, row in zip(rows, scorer.score_many(requests), strict=True):
        positions = np.flatnonzero(stream.arrays.valid[t])
        for position, value in zip(positions, row, strict=True):
            if value.ok:
                answers[t, position] = value.value
    return answers


__all__ = [
    "FoldAnswers",
    "PoolData",
    "score_pools",
    "scored_questions",
    "streams_profile",
]
