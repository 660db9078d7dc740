"""Replays recorded scores (from a ``ScoreCache``, a JSONL file, or a build's
recorded answers, :mod:`earm_jax.scoring.recorded_answers`).

A replay scorer never computes anything: pairs it has no record of are returned
as failed (``"not recorded"``). Use it to rerun an evaluation offline with the
exact scores a server gave before.

JSONL records (one per line): ``{"scorer": <identity key>, "prompt_version":
..., "query_sha256": ..., "memory_sha256": ..., "value": ...}``; ``query`` /
``memory`` texts may be given instead of their hashes.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from typing import TYPE_CHECKING

from .base import PairScore, ScorerIdentity
from .cache import ScoreCache, text_sha256

if TYPE_CHECKING:
    from .recorded_answers import RecordedAnswers

NOT_RECORDED = "not recorded"


class ReplayScorer:
    """Answers pairs from recorded scores of one scorer identity.

    Args:
      recorded: identity of the scorer whose scores are replayed.
      scores: ``{(query_sha256, memory_sha256): value}``.
    """

    def __init__(
        self, recorded: ScorerIdentity, scores: dict[tuple[str, str], float]
    ) -> None:
        self.recorded = recorded
        self._scores = dict(scores)

    @classmethod
    def from_cache(cls, cache: ScoreCache, recorded: ScorerIdentity) -> ReplayScorer:
        """Replays every score ``cache`` holds for ``recorded``."""
        scores = {
            (entry.query_sha256, entry.memory_sha256): entry.value
            for entry in cache.entries(recorded)
        }
        return cls(recorded, scores)

    @classmethod
    def from_recorded(cls, answers: RecordedAnswers) -> ReplayScorer:
        """Replays the model's own calibrated answers, ``sigmoid(logit)``, of a
        recorded-answers file (the similarity blend is applied by the caller,
        which holds the pool's cosines)."""
        recorded = ScorerIdentity(
            kind=f"recorded-{answers.scorer.get('kind', 'scorer')}",
            model=",".join(
                f"{fold}={model}"
                for fold, model in sorted(answers.scorer.get("models", {}).items())
            ),
            settings=tuple(
                sorted(
                    (key, str(answers.scorer[key]))
                    for key in ("backend", "precision")
                    if key in answers.scorer
                )
            ),
        )
        scores = {
            pair: 1.0 / (1.0 + math.exp(-logit))
            for pair, logit in answers.pairs().items()
        }
        return cls(recorded, scores)

    @classmethod
    def from_jsonl(
        cls, path: str | os.PathLike[str], recorded: ScorerIdentity
    ) -> ReplayScorer:
        """Replays the records of ``path`` that belong to ``recorded``."""
        scores: dict[tuple[str, str], float] = {}
        with open(path, encoding="utf-8") as lines:
            for line_number, line in enumerate(lines, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                    if (
                        record["scorer"] != recorded.key()
                        or record.get("prompt_version", recorded.prompt_version)
                        != recorded.prompt_version
                    ):
                        continue
                    query_hash = record.get("query_sha256") or text_sha256(
                        record["query"]
                    )
                    memory_hash = record.get("memory_sha256") or text_sha256(
                        record["memory"]
                    )
                    scores[(query_hash, memory_hash)] = float(record["value"])
                except (KeyError, TypeError, ValueError) as error:
                    raise ValueError(
                        f"{path}:{line_number}: not a score record ({error})"
                    ) from error
        return cls(recorded, scores)

    @property
    def identity(self) -> ScorerIdentity:
        return ScorerIdentity(
            kind="replay",
            model=self.recorded.key(),
            prompt_version=self.recorded.prompt_version,
        )

    def __len__(self) -> int:
        return len(self._scores)

    def score(self, query: str, memories: Sequence[str]) -> list[PairScore]:
        query_hash = text_sha256(query)
        results = []
        for memory in memories:
            value = self._scores.get((query_hash, text_sha256(memory)))
            results.append(
                PairScore.failure(NOT_RECORDED)
                if value is None
                else PairScore.success(value)
            )
        return results

    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[PairScore]]:
        return [self.score(query, memories) for query, memories in requests]


def export_jsonl(
    cache: ScoreCache, recorded: ScorerIdentity, path: str | os.PathLike[str]
) -> int:
    """Writes ``recorded``'s cached scores to a JSONL file; returns the count."""
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for entry in cache.entries(recorded):
            record = {
                "scorer": entry.scorer_key,
                "prompt_version": entry.prompt_version,
                "query_sha256": entry.query_sha256,
                "memory_sha256": entry.memory_sha256,
                "value": entry.value,
            }
            out.write(json.dumps(record) + "\n")
            count += 1
    return count


__all__ = ["NOT_RECORDED", "ReplayScorer", "export_jsonl"]
