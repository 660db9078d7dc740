"""The one interface every relevance scorer implements (host side, no JAX).

A scorer answers "does this memory contain evidence for this query?" with a
score in [0, 1] per (query, memory) pair. One pair is one call: the cost unit.
A pair that could not be scored is reported as failed with a reason, never
replaced by a made-up score; the solver treats it as not observed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class PairScore:
    """The outcome of scoring one pair.

    Attributes:
      value: the score in [0, 1] when ``ok``; ``None`` when failed.
      ok: whether the pair was scored.
      reason: why it failed (``"timeout"``, ``"http 503"``, ``"parse: ..."``, ...);
        empty when ok.
    """

    value: float | None
    ok: bool
    reason: str = ""

    @staticmethod
    def success(value: float) -> PairScore:
        return PairScore(value=float(value), ok=True)

    @staticmethod
    def failure(reason: str) -> PairScore:
        return PairScore(value=None, ok=False, reason=reason)


@dataclasses.dataclass(frozen=True)
class ScorerIdentity:
    """What a stored score depends on: recorded with every score and cache key.

    Attributes:
      kind: ``"evidence"``, ``"vllm-yesno"``, ``"vllm-rerank"``, ``"replay"``, ...
      model: model name or path ("" where none).
      prompt_version: version tag of the prompt template ("" where none).
      settings: other settings that change scores (dtype, noise, seed, ...), as
        sorted ``(key, value)`` string pairs so the identity is hashable.
    """

    kind: str
    model: str = ""
    prompt_version: str = ""
    settings: tuple[tuple[str, str], ...] = ()

    def key(self) -> str:
        parts = [self.kind, self.model, self.prompt_version]
        parts += [f"{k}={v}" for k, v in self.settings]
        return "|".join(parts)


@runtime_checkable
class Scorer(Protocol):
    """Scores one query against a list of memories.

    ``score(query, memories)`` returns one ``PairScore`` per memory, in order.
    Implementations batch and parallelise internally; ``score_many`` scores
    several queries at once (e.g. concurrently on a server).
    """

    @property
    def identity(self) -> ScorerIdentity: ...

    def score(self, query: str, memories: Sequence[str]) -> list[PairScore]: ...

    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[PairScore]]: ...


__all__ = ["PairScore", "Scorer", "ScorerIdentity"]
