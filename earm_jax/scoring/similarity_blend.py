r"""A cross-encoder's answer combined with the retriever's similarity.

A cross-encoder fine-tuned on a few thousand questions ranks a pool far better
than similarity, but not always better than both together: it misses what the
sentence encoder learned from a billion pairs. The blend is a logistic model
fitted on pools the cross-encoder did not train on:

.. math::

   p = \sigma\bigl(\alpha\,\operatorname{logit}(p_{\mathrm{ce}})
       + \beta \cos(e_q, e_m) + \delta \operatorname{cov}(q, m) + \gamma\bigr),

where :math:`p_{\mathrm{ce}}` is the cross-encoder's calibrated answer,
:math:`\cos(e_q, e_m)` the cosine of the two texts' sentence embeddings (the
same model the retriever's pool comes from) and :math:`\operatorname{cov}(q,
m)` how much of the question's rarer words the memory repeats
(:mod:`earm_jax.scoring.word_coverage`; a blend fitted without it has
:math:`\delta = 0`). ``earm train-scorer`` fits :math:`(\alpha, \beta,
\delta, \gamma)` on its held-back questions and writes them next to the model
(``similarity_blend.json``); :class:`BlendedScorer` applies them to any scorer
of that model, in process or behind vLLM, so both give the same scores.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .base import PairScore, Scorer, ScorerIdentity
from .word_coverage import word_coverage

BLEND_FILE = "similarity_blend.json"
FREE_ORDER_FILE = "free_order.json"
"""The blend of the texts alone, fitted next to :data:`BLEND_FILE`: the free
order of a pool (:mod:`earm_jax.locomo.pool_order`)."""
BLEND_FORMAT = "earm-similarity-blend-v1"
# A blend that weighs word coverage is written as v2, so a reader that does
# not know the coverage term refuses it instead of dropping it.
BLEND_FORMAT_COVERAGE = "earm-similarity-blend-v2"
_EDGE = 1e-7  # answers are clipped to [1e-7, 1 - 1e-7] before the logit


def answer_logits(answers: np.ndarray) -> np.ndarray:
    """``log(p / (1 - p))`` of answers in [0, 1], clipped to [1e-7, 1 - 1e-7]
    first (the blend's input); NaN stays NaN."""
    clipped = np.clip(np.asarray(answers, np.float64), _EDGE, 1.0 - _EDGE)
    return np.log(clipped) - np.log1p(-clipped)


@dataclasses.dataclass(frozen=True)
class SimilarityBlend:
    """The fitted blend.

    Attributes:
      logit_weight: :math:`\\alpha`.
      similarity_weight: :math:`\\beta`.
      shift: :math:`\\gamma`.
      coverage_weight: :math:`\\delta` (0: fitted without word coverage).
      embedding_model: identity of the sentence encoder whose cosine it was
        fitted on (another model's cosines mean something else).
      pairs: pairs it was fitted on.
    """

    logit_weight: float
    similarity_weight: float
    shift: float
    embedding_model: str
    pairs: int = 0
    coverage_weight: float = 0.0

    def __post_init__(self) -> None:
        for name in ("logit_weight", "similarity_weight", "shift", "coverage_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not math.isfinite(float(value)):
                raise ValueError(f"{name} must be a finite number, got {value!r}")
        if not isinstance(self.embedding_model, str) or not self.embedding_model:
            raise ValueError("embedding_model must name the sentence encoder")

    @staticmethod
    def fit(
        logits: np.ndarray | None,
        cosines: np.ndarray,
        labels: np.ndarray,
        embedding_model: str,
        coverage: np.ndarray | None = None,
    ) -> SimilarityBlend:
        """The blend fitted by ridge-logistic regression on labelled pairs: the
        model's calibrated logits, their cosines and (when given) their word
        coverage.

        ``logits=None`` fits the blend of the texts alone (``logit_weight``
        0): a free order of a pool, known before any call
        (:mod:`earm_jax.locomo.pool_order`).

        Raises:
          ValueError: shapes differ, or one class is missing.
        """
        from .platt import fit_logistic

        inputs = [np.asarray(cosines, np.float64)]
        if logits is not None:
            inputs.insert(0, np.asarray(logits, np.float64))
        if coverage is not None:
            inputs.append(np.asarray(coverage, np.float64))
        weights = fit_logistic(np.stack(inputs, axis=1), labels).tolist()
        if logits is None:
            weights.insert(0, 0.0)
        return SimilarityBlend(
            logit_weight=float(weights[0]),
            similarity_weight=float(weights[1]),
            shift=float(weights[-1]),
            embedding_model=embedding_model,
            pairs=int(inputs[0].size),
            coverage_weight=0.0 if coverage is None else float(weights[2]),
        )

    @property
    def is_free(self) -> bool:
        """Whether the blend reads the texts alone (no model answer): an order
        of a pool that costs no call."""
        return self.logit_weight == 0.0

    @property
    def uses_coverage(self) -> bool:
        """Whether the blend needs the pairs' word coverage."""
        return self.coverage_weight != 0.0

    def combine_logits(
        self,
        logits: np.ndarray,
        cosines: np.ndarray,
        coverage: np.ndarray | None = None,
    ) -> np.ndarray:
        """The blend's logit of the model's own logits, cosines and (when
        :attr:`uses_coverage`) word coverage.

        Raises:
          ValueError: the blend uses word coverage and ``coverage`` is None.
        """
        z = (
            self.logit_weight * np.asarray(logits, np.float64)
            + self.similarity_weight * np.asarray(cosines, np.float64)
            + self.shift
        )
        if self.uses_coverage:
            if coverage is None:
                raise ValueError(
                    "coverage is required: this blend weighs the pairs' word "
                    "coverage (earm_jax.scoring.word_coverage)"
                )
            z = z + self.coverage_weight * np.asarray(coverage, np.float64)
        return z

    def combine(
        self,
        answers: np.ndarray,
        cosines: np.ndarray,
        coverage: np.ndarray | None = None,
    ) -> np.ndarray:
        """Blended probabilities of answers in [0, 1], cosines and (when
        :attr:`uses_coverage`) word coverage."""
        z = self.combine_logits(answer_logits(answers), cosines, coverage)
        return 1.0 / (1.0 + np.exp(-z))

    def combine_texts(
        self,
        answers: np.ndarray,
        cosines: np.ndarray,
        query: str,
        memories: Sequence[str],
    ) -> np.ndarray:
        """:meth:`combine` of one query's answers on ``memories``, the word
        coverage read from the texts when the blend weighs it."""
        coverage = word_coverage(query, memories) if self.uses_coverage else None
        return self.combine(answers, cosines, coverage)

    def to_json(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        if not self.uses_coverage:
            del fields["coverage_weight"]
            return {"format": BLEND_FORMAT, **fields}
        return {"format": BLEND_FORMAT_COVERAGE, **fields}

    @staticmethod
    def from_json(data: Any) -> SimilarityBlend:
        """Reads :meth:`to_json`'s dict; ``ValueError`` naming a bad field."""
        formats = (BLEND_FORMAT, BLEND_FORMAT_COVERAGE)
        if not isinstance(data, dict) or data.get("format") not in formats:
            raise ValueError(
                f"not a similarity blend (format must be one of {formats})"
            )
        fields = {f.name for f in dataclasses.fields(SimilarityBlend)}
        missing = fields - set(data) - {"pairs", "coverage_weight"}
        if missing:
            raise ValueError(f"similarity blend lacks {sorted(missing)}")
        return SimilarityBlend(**{k: v for k, v in data.items() if k in fields})


def load_blend(
    folder: str | os.PathLike[str], name: str = BLEND_FILE
) -> SimilarityBlend | None:
    """The blend stored in a model folder (``name``: :data:`BLEND_FILE`, or
    :data:`FREE_ORDER_FILE` for its free order), or ``None`` when it has
    none."""
    path = Path(folder) / name
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{str(path)!r} cannot be read: {error}") from error
    return SimilarityBlend.from_json(data)


def write_blend(
    folder: str | os.PathLike[str], blend: SimilarityBlend, name: str = BLEND_FILE
) -> Path:
    path = Path(folder) / name
    path.write_text(json.dumps(blend.to_json(), indent=2) + "\n", encoding="utf-8")
    return path


def _blend_setting(blend: SimilarityBlend) -> str:
    """The blend's weights as the scorer identity names them (a blend without
    word coverage keeps the three-number form its cached answers carry)."""
    weights = (
        f"{blend.logit_weight:.9g},{blend.similarity_weight:.9g},{blend.shift:.9g}"
    )
    if blend.uses_coverage:
        weights += f",coverage={blend.coverage_weight:.9g}"
    return weights


class BlendedScorer:
    """A scorer whose answers are blended with the texts' cosine similarity.

    Args:
      inner: the cross-encoder's scorer (in process or vLLM ``rerank``).
      blend: the fitted blend.
      embedder: the sentence encoder the blend was fitted with (its
        ``identity`` must equal ``blend.embedding_model``); embeddings go
        through its cache.

    Raises:
      ValueError: the embedder is not the one the blend was fitted with.
    """

    def __init__(self, inner: Scorer, blend: SimilarityBlend, embedder: Any) -> None:
        if embedder.identity != blend.embedding_model:
            raise ValueError(
                f"the similarity blend was fitted with {blend.embedding_model}, not "
                f"{embedder.identity}: pass that sentence encoder"
            )
        self.inner = inner
        self.blend = blend
        self.embedder = embedder
        base = inner.identity
        self._identity = ScorerIdentity(
            kind=f"{base.kind}+similarity",
            model=base.model,
            prompt_version=base.prompt_version,
            settings=tuple(
                sorted(
                    (
                        *base.settings,
                        ("blend", _blend_setting(blend)),
                        ("embedding_model", embedder.identity),
                    )
                )
            ),
        )

    @property
    def identity(self) -> ScorerIdentity:
        return self._identity

    @property
    def counters(self) -> Any:
        return getattr(self.inner, "counters", None)

    @property
    def pairs_scored(self) -> int:
        return int(getattr(self.inner, "pairs_scored", 0))

    def score(self, query: str, memories: Sequence[str]) -> list[PairScore]:
        return self.score_many([(query, memories)])[0]

    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[PairScore]]:
        answers = self.inner.score_many(requests)
        texts = list(
            dict.fromkeys(
                [query for query, _ in requests]
                + [memory for _, memories in requests for memory in memories]
            )
        )
        vectors = dict(zip(texts, self.embedder.embed(texts), strict=True))
        out = []
        for (query, memories), row in zip(requests, answers, strict=True):
            if not memories:
                out.append([])
                continue
            cosines = np.array([float(vectors[query] @ vectors[m]) for m in memories])
            values = np.array([s.value if s.ok else 0.5 for s in row], np.float64)
            blended = self.blend.combine_texts(values, cosines, query, memories)
            out.append(
                [
                    PairScore.success(float(b)) if s.ok else s
                    for s, b in zip(row, blended, strict=True)
                ]
            )
        return out

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


__all__ = [
    "BLEND_FILE",
    "FREE_ORDER_FILE",
    "answer_logits",
    "BlendedScorer",
    "SimilarityBlend",
    "load_blend",
    "write_blend",
]
