"""``earm locomo --scorer recorded``: a build's recorded answers replayed, with
no model, and moved along a measured quality axis.

The answers come back through :class:`~earm_jax.scoring.replay.ReplayScorer`
(pairs matched by the SHA-256 of their texts, a pair not in the file counted
as failed, never made up); the similarity blend is applied here, where the
pool's cosines are, at ``blend_weight`` (0: the model alone, 1: the fitted
blend). ``mix`` moves the scorer along a quality axis anchored on the real
model: toward the evidence label (``oracle``: ``(1 - w) p + w * label``) or
toward the retriever's own order (``similarity``: ``(1 - w) p + w *`` the
candidate's similarity percentile in its pool). Each point's quality (AUC,
Full against Semantic) is measured on the same pools, so the axis is measured,
not nominal.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from earm_jax.locomo.evaluate import scorer_scores, with_scores
from earm_jax.locomo.streams import LocomoStream
from earm_jax.scoring.recorded_answers import (
    RecordedAnswers,
    answer_logits,
    blended_answers,
)
from earm_jax.scoring.replay import ReplayScorer
from earm_jax.scoring.similarity_blend import SimilarityBlend
from earm_jax.scoring.word_coverage import pool_word_coverage

MIX_TARGETS = ("oracle", "similarity")

RECORDED_NOTE = (
    "scores replayed from recorded answers {files} (cross-encoder folds {folds}, "
    "backend {backend} {precision}; a model trained on LoCoMo evidence, each "
    "conversation answered by a fold that never saw it), similarity blend at "
    "weight {blend}{mix}; nothing was scored in this run"
)


@dataclasses.dataclass(frozen=True)
class Mix:
    """A point on the quality axis: ``target`` in :data:`MIX_TARGETS` (or
    ``""``: the scorer as recorded) at ``weight`` in [0, 1]."""

    target: str = ""
    weight: float = 0.0

    def __post_init__(self) -> None:
        if self.target not in ("", *MIX_TARGETS):
            raise ValueError(
                f"mix target must be one of {MIX_TARGETS}, got {self.target!r}"
            )
        if not 0.0 <= self.weight <= 1.0:
            raise ValueError(f"mix weight must be in [0, 1], got {self.weight!r}")

    @staticmethod
    def parse(text: str) -> Mix:
        """``"oracle:0.3"`` / ``"similarity:0.5"`` / ``""``."""
        if not text:
            return Mix()
        target, _, weight = text.partition(":")
        try:
            value = float(weight)
        except ValueError as error:
            raise ValueError(
                f"mix must be TARGET:WEIGHT (e.g. oracle:0.3), got {text!r}"
            ) from error
        return Mix(target, value)

    def describe(self) -> str:
        return f", mixed toward {self.target} at {self.weight:g}" if self.target else ""


def load_recorded(files: Sequence[str]) -> dict[str, RecordedAnswers]:
    """The recorded answers per memory setting.

    Raises:
      ValueError: a file that cannot be read, or two files for one setting.
    """
    by_setting: dict[str, RecordedAnswers] = {}
    for file in files:
        answers = RecordedAnswers.load(file)
        if answers.setting in by_setting:
            raise ValueError(
                f"scores: two files record memories {answers.setting!r}; give one "
                "per setting"
            )
        by_setting[answers.setting] = answers
    return by_setting


def check_recorded(
    recorded: Mapping[str, RecordedAnswers],
    settings: Sequence[str],
    digests: Mapping[str, str],
) -> None:
    """Refuses a run whose settings or conversations the files do not hold
    (``ValueError`` naming the setting or conversation)."""
    for setting in settings:
        if setting not in recorded:
            raise ValueError(
                f"scores: no recorded answers for memories {setting!r} (the files "
                f"hold {', '.join(sorted(recorded)) or 'none'})"
            )
        recorded[setting].check(setting, digests)


def similarity_percentile(similarity: np.ndarray, valid: np.ndarray) -> np.ndarray:
    """``float[T, N]``: each valid candidate's similarity rank in its pool
    scaled to [0, 1] (1: the most similar), 0 at padding."""
    similarity = np.where(valid, similarity, -np.inf)
    order = np.argsort(np.argsort(similarity, axis=1, kind="stable"), axis=1)
    counts = valid.sum(axis=1, keepdims=True)
    padding = similarity.shape[1] - counts
    rank = order - padding  # 0 for the least similar valid candidate
    scaled = rank / np.maximum(counts - 1, 1)
    return np.where(valid, scaled, 0.0)


def blend_coverage(
    stream: LocomoStream, blend: SimilarityBlend | None
) -> np.ndarray | None:
    """The pools' word coverage when ``blend`` weighs it, else ``None`` (it is
    not computed for a blend that would ignore it)."""
    if blend is None or not blend.uses_coverage:
        return None
    arrays = stream.arrays
    return pool_word_coverage(
        stream.meta.query_texts,
        stream.meta.memory_texts,
        arrays.candidates,
        arrays.valid,
    )


def recorded_stream(
    stream: LocomoStream,
    answers: RecordedAnswers,
    replay: ReplayScorer,
    blend_weight: float,
    mix: Mix,
) -> tuple[LocomoStream, dict[str, int]]:
    """``stream`` with the recorded answers (blended and mixed) as its scores,
    and the failed pairs by reason."""
    model, failures = scorer_scores(stream, replay)
    arrays = stream.arrays
    blend = answers.blend_of(stream.meta.sample_id)
    values = blended_answers(
        answer_logits(model),
        arrays.similarity,
        blend,
        blend_weight,
        blend_coverage(stream, blend) if blend_weight > 0.0 else None,
    )
    if mix.target == "oracle":
        values = (1.0 - mix.weight) * values + mix.weight * arrays.relevant
    elif mix.target == "similarity":
        values = (1.0 - mix.weight) * values + mix.weight * similarity_percentile(
            arrays.similarity, arrays.valid
        )
    return with_scores(stream, values.astype(np.float32)), failures


def replayed_streams(
    answers: RecordedAnswers,
    data: str,
    cache_dir: str | None = None,
    blend_weight: float = 1.0,
) -> list[tuple[LocomoStream, LocomoStream]]:
    """Each conversation ``answers`` holds, its stream rebuilt from ``data`` as
    the build made it (its question limit and pool size), and that stream
    with the recorded answers replayed on it at ``blend_weight``.

    Raises:
      ValueError: ``data`` is not the copy the answers were recorded on, or
        the embedder is not the one their pools came from.
    """
    from earm_jax.locomo.data import load_locomo
    from earm_jax.locomo.selection import select_conversations
    from earm_jax.locomo.streams import build_streams
    from earm_jax.locomo.training_data import conversation_digest
    from earm_jax.store.embeddings import Embedder

    built = answers.manifest.get("job", {})
    conversations = select_conversations(
        load_locomo(data), tuple(answers.conversations), built.get("limit", 0)
    )
    answers.check(
        answers.setting, {c.sample_id: conversation_digest(c) for c in conversations}
    )
    embedder = Embedder(cache_dir=cache_dir)
    if embedder.identity != answers.scorer.get("embedding_model"):
        raise ValueError(
            f"the answers were recorded on pools of "
            f"{answers.scorer.get('embedding_model')}, not {embedder.identity}"
        )
    streams = build_streams(
        conversations,
        embedder,
        setting=answers.setting,
        pool_size=built.get("pool_size", 200),
    )
    replay = ReplayScorer.from_recorded(answers)
    return [
        (stream, recorded_stream(stream, answers, replay, blend_weight, Mix())[0])
        for stream in streams
    ]


def recorded_note(
    files: Sequence[str],
    recorded: Mapping[str, RecordedAnswers],
    blend_weight: float,
    mix: Mix,
) -> str:
    first = next(iter(recorded.values()))
    return RECORDED_NOTE.format(
        files=", ".join(Path(f).name for f in files),
        folds=", ".join(sorted(first.scorer.get("models", {}))),
        backend=first.scorer.get("backend", "?"),
        precision=first.scorer.get("precision", "?"),
        blend=f"{blend_weight:g}",
        mix=mix.describe(),
    )


def recorded_summary(recorded: Mapping[str, RecordedAnswers]) -> dict[str, Any]:
    """What the JSON records of the files: per setting, the scorer and the
    build's headline quality (so a table can name the build)."""
    return {
        setting: {
            "scorer": answers.scorer,
            "folds": {c.sample_id: c.fold for c in answers.conversations.values()},
            "build": {
                key: answers.manifest.get(key)
                for key in ("job", "cross_fitted_quality", "seconds", "git_commit")
            },
        }
        for setting, answers in recorded.items()
    }


__all__ = [
    "replayed_streams",
    "blend_coverage",
    "MIX_TARGETS",
    "Mix",
    "check_recorded",
    "load_recorded",
    "recorded_note",
    "recorded_stream",
    "recorded_summary",
    "similarity_percentile",
]
