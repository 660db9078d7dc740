r"""The evidence scorer: a stand-in for an LLM relevance judge, built from labels.

.. math::

   y = \mathrm{clip}(\ell + \text{noise}\cdot\xi,\ 0,\ 1), \qquad
   \ell = \begin{cases}
     1 - \mathrm{Bernoulli}(\text{false\_negative\_rate}) & \text{relevant} \\
     \mathrm{Bernoulli}(\text{false\_positive\_rate}) & \text{otherwise}
   \end{cases}

with :math:`\xi \sim \mathcal N(0, 1)`. It is **not an LLM**: it knows the gold
evidence, so every report that uses it must say so (:data:`STAND_IN_NOTE`).

The randomness of a pair is a hash of ``(seed, query key, memory key)``, where a
key is the SHA-256 of the text. So a pair's score does not depend on its pool
position, batch or call order, the whole-stream function and the online
:class:`EvidenceScorer` give identical answers, and a repeated question gets the
same scores again (like an LLM at temperature 0 behind a cache).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Callable, Collection, Mapping, Sequence

import numpy as np

from earm_jax.locomo.memories import MemorySet
from earm_jax.scoring.base import PairScore, ScorerIdentity

STAND_IN_NOTE = (
    "scores come from the evidence stand-in scorer "
    "(y = clip(1[relevant] + noise), built from LoCoMo's gold evidence), not an LLM"
)
"""One line every report that uses this scorer must print."""

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


@dataclasses.dataclass(frozen=True)
class EvidenceNoise:
    """The scorer's knobs.

    Attributes:
      noise: standard deviation of the additive Gaussian noise (>= 0).
      false_positive_rate: probability an irrelevant pair is labelled relevant.
      false_negative_rate: probability a relevant pair is labelled irrelevant.
      seed: makes the noise reproducible; different seeds, different draws.
      graded: ``G``: a non-relevant candidate's expected score is
        ``G * p**2`` (``p`` its similarity percentile in the pool, 1 = most
        similar) before noise, as LLM rerankers are fooled by on-topic
        non-evidence. 0 (default): the near-binary oracle. Needs the pool
        (``evidence_scores(..., percentile=...)``).
    """

    noise: float = 0.1
    false_positive_rate: float = 0.0
    false_negative_rate: float = 0.0
    seed: int = 0
    graded: float = 0.0

    def __post_init__(self) -> None:
        if not np.isfinite(self.noise) or self.noise < 0:
            raise ValueError(f"noise must be a finite number >= 0, got {self.noise}")
        for name in ("false_positive_rate", "false_negative_rate"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int | np.integer):
            raise ValueError(f"seed must be an integer, got {self.seed!r}")
        if not 0.0 <= self.graded <= 1.0:
            raise ValueError(f"graded must be in [0, 1], got {self.graded}")

    def identity(self) -> ScorerIdentity:
        """The :class:`ScorerIdentity` recorded with every score."""
        settings = {
            "false_negative_rate": repr(float(self.false_negative_rate)),
            "false_positive_rate": repr(float(self.false_positive_rate)),
            "noise": repr(float(self.noise)),
            "seed": str(int(self.seed)),
            "stand_in": "gold-evidence labels, not an LLM",
        }
        if self.graded:
            settings["graded"] = repr(float(self.graded))
        return ScorerIdentity(kind="evidence", settings=tuple(sorted(settings.items())))


DEFAULT_KNOBS = EvidenceNoise()
"""Noise 0.1, no false positives or negatives, seed 0."""


def text_key64(text: str) -> int:
    """The first 64 bits of the text's SHA-256: the pair-noise key of a text."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little")


def text_keys64(texts: Sequence[str]) -> np.ndarray:
    """``uint64[len(texts)]`` of :func:`text_key64`."""
    return np.array([text_key64(text) for text in texts], dtype=np.uint64)


def _mix64(value: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer: a bijective avalanche on ``uint64`` (wrapping)."""
    value = (value ^ (value >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    value = (value ^ (value >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return value ^ (value >> np.uint64(31))


def _uniform(
    seed: int, query_keys: np.ndarray, memory_keys: np.ndarray, draw: int
) -> np.ndarray:
    """``float64`` in [0, 1), a pure function of (seed, query, memory, draw)."""
    with np.errstate(over="ignore"):
        state = _mix64(np.asarray([seed % (1 << 64)], dtype=np.uint64) + _GOLDEN)
        state = _mix64(state ^ query_keys)
        state = _mix64(state ^ memory_keys)
        state = _mix64(state + _GOLDEN * np.uint64(draw + 1))
    return (state >> np.uint64(11)).astype(np.float64) * 2.0**-53


def evidence_scores(
    relevant: np.ndarray,
    knobs: EvidenceNoise = DEFAULT_KNOBS,
    *,
    query_keys: np.ndarray | None = None,
    memory_keys: np.ndarray | None = None,
    percentile: np.ndarray | None = None,
) -> np.ndarray:
    """The stand-in scorer's answers for a whole array of pairs, vectorized.

    Args:
      relevant: ``bool[..., N]`` e.g. a stream's ``relevant[T, N]``.
      knobs: noise level, false-positive/negative rates and seed.
      query_keys: ``uint64`` broadcastable to ``relevant`` (e.g. ``[T, 1]``), the
        query of each pair; default: the row index of the leading axis.
      memory_keys: ``uint64`` broadcastable to ``relevant`` (e.g. ``[T, N]``), the
        memory of each pair; default: the position on the last axis.
      percentile: ``float[..., N]`` similarity percentile of each candidate in
        its pool (1 = most similar); required when ``knobs.graded > 0``.

    Returns:
      ``float32`` scores in [0, 1], shaped like ``relevant``.

    Example (graded: an on-topic non-relevant candidate scores about ``G``):
      >>> knobs = EvidenceNoise(noise=0.0, graded=0.5)
      >>> evidence_scores(np.array([True, False, False]), knobs,
      ...                 percentile=np.array([1.0, 1.0, 0.0])).tolist()
      [1.0, 0.5, 0.0]
    """
    relevant = np.asarray(relevant, dtype=bool)
    if query_keys is None:
        leading = relevant.shape[0] if relevant.ndim > 1 else 1
        query_keys = np.arange(leading, dtype=np.uint64).reshape(
            (leading,) + (1,) * max(relevant.ndim - 1, 0)
        )
    if memory_keys is None:
        memory_keys = np.arange(relevant.shape[-1] if relevant.ndim else 1)
    query_keys = np.broadcast_to(np.asarray(query_keys, np.uint64), relevant.shape)
    memory_keys = np.broadcast_to(np.asarray(memory_keys, np.uint64), relevant.shape)
    flip = _uniform(knobs.seed, query_keys, memory_keys, draw=0)
    label = np.where(
        relevant, flip >= knobs.false_negative_rate, flip < knobs.false_positive_rate
    )
    radius = np.sqrt(-2.0 * np.log1p(-_uniform(knobs.seed, query_keys, memory_keys, 1)))
    angle = 2.0 * np.pi * _uniform(knobs.seed, query_keys, memory_keys, draw=2)
    gaussian = radius * np.cos(angle)
    expected = label.astype(np.float64)
    if knobs.graded:
        if percentile is None:
            raise ValueError("graded evidence scores need each candidate's percentile")
        percentile = np.broadcast_to(np.asarray(percentile, np.float64), label.shape)
        expected = np.where(label, 1.0, knobs.graded * np.clip(percentile, 0, 1) ** 2)
    return np.clip(expected + knobs.noise * gaussian, 0.0, 1.0).astype(np.float32)


def pool_percentiles(valid: np.ndarray) -> np.ndarray:
    """``float[..., N]`` similarity percentile of each valid candidate in a pool
    sorted by descending similarity (1 = the most similar, 0 = the least).

    >>> pool_percentiles(np.array([True, True, True, False])).tolist()
    [1.0, 0.5, 0.0, 0.0]
    """
    valid = np.asarray(valid, bool)
    count = valid.sum(axis=-1, keepdims=True)
    position = np.cumsum(valid, axis=-1) - 1
    percentile = np.where(count > 1, 1.0 - position / np.maximum(count - 1, 1), 1.0)
    return np.where(valid, percentile, 0.0)


RelevanceOracle = Callable[[str, str], bool | None]
"""``(query, memory) -> relevant?``; ``None`` when the query has no label."""


def relevance_oracle(memory_sets: Sequence[MemorySet] | MemorySet) -> RelevanceOracle:
    """A text oracle from LoCoMo labels: question text -> relevant memory texts.

    A question asked twice keeps the union of its relevant memories. Matching is
    by text, so two memories with identical text share a label.

    Args:
      memory_sets: one or more conversations' memory sets.
    """
    if isinstance(memory_sets, MemorySet):
        memory_sets = [memory_sets]
    labels: dict[str, set[str]] = {}
    for memory_set in memory_sets:
        for question, rows in zip(
            memory_set.queries, memory_set.relevant_rows, strict=True
        ):
            texts = labels.setdefault(question.question, set())
            texts.update(memory_set.memories[row].text for row in rows)
    return mapping_oracle(labels)


def mapping_oracle(labels: Mapping[str, Collection[str]]) -> RelevanceOracle:
    """An oracle from ``{query: relevant memory texts}``; unknown queries -> None."""
    frozen = {query: frozenset(texts) for query, texts in labels.items()}

    def oracle(query: str, memory: str) -> bool | None:
        relevant = frozen.get(query)
        return None if relevant is None else memory in relevant

    return oracle


class EvidenceScorer:
    """The evidence stand-in behind the :class:`earm_jax.scoring.base.Scorer` API.

    Gives exactly the scores of :func:`evidence_scores` with text keys, so the
    online path and the offline stream agree. A pair whose query the oracle does
    not know is reported as failed, never given a made-up score.

    Args:
      oracle: ``(query, memory) -> bool | None``, e.g. :func:`relevance_oracle`.
      knobs: noise level, false-positive/negative rates and seed.
    """

    def __init__(
        self, oracle: RelevanceOracle, knobs: EvidenceNoise = DEFAULT_KNOBS
    ) -> None:
        self._oracle = oracle
        self.knobs = knobs

    @property
    def identity(self) -> ScorerIdentity:
        return self.knobs.identity()

    def score(self, query: str, memories: Sequence[str]) -> list[PairScore]:
        """One :class:`PairScore` per memory, in order."""
        if self.knobs.graded:
            raise ValueError(
                "EvidenceScorer has no pool to grade against: graded > 0 is an "
                "offline-stream mode (evidence_scores with percentile=...)"
            )
        labels = [self._oracle(query, memory) for memory in memories]
        known = [position for position, label in enumerate(labels) if label is not None]
        values = evidence_scores(
            np.array([bool(labels[position]) for position in known], dtype=bool),
            self.knobs,
            query_keys=np.array([text_key64(query)], dtype=np.uint64),
            memory_keys=text_keys64([memories[position] for position in known]),
        )
        results = [
            PairScore.failure("evidence: no relevance label for this query")
        ] * len(memories)
        for position, value in zip(known, values, strict=True):
            results[position] = PairScore.success(float(value))
        return results

    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[PairScore]]:
        """:meth:`score` for each ``(query, memories)`` request."""
        return [self.score(query, memories) for query, memories in requests]


__all__ = [
    "DEFAULT_KNOBS",
    "STAND_IN_NOTE",
    "EvidenceNoise",
    "EvidenceScorer",
    "RelevanceOracle",
    "evidence_scores",
    "mapping_oracle",
    "pool_percentiles",
    "relevance_oracle",
    "text_key64",
    "text_keys64",
]
