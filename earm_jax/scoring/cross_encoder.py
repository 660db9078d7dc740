"""A cross-encoder relevance scorer that runs in this process (no server).

A cross-encoder reads the query and the memory together and returns one logit;
the score is its sigmoid, in [0, 1]. Any folder that
``sentence_transformers.CrossEncoder`` loads works (a BERT-like
sequence-classification model with one label), among them the models
``earm train-scorer`` writes, whose last layer already carries their
calibration, so the same folder gives the same scores here and behind vLLM
(``earm serve-scorer --model FOLDER --runner pooling``, then
:class:`~earm_jax.scoring.vllm.VllmScorer` in ``rerank`` mode).

Pairs are scored in length-sorted batches (sentence-transformers sorts them),
so a pool of 200 short memories costs about the tokens it holds, not 200 times
the longest one. ``dtype="bfloat16"`` runs the matrix products in bfloat16
(about twice as fast on CPUs with native bfloat16); its scores differ from
float32 by a few thousandths, so the dtype is part of the identity and no cache
mixes the two.

Needs the ``embed`` extra (torch, sentence-transformers); nothing here is
imported by ``import earm_jax``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, Literal

from earm_jax.store.embeddings import model_identity

from .base import PairScore, ScorerIdentity

Dtype = Literal["float32", "bfloat16"]
DTYPES: tuple[str, ...] = ("float32", "bfloat16")
PROMPT_VERSION = "pair-v1"
"""The input format: the raw question as text A, the memory text as text B."""

DEFAULT_MAX_LENGTH = 256
"""Tokens per (query, memory) pair; LoCoMo's longest pair has about 150."""


@dataclasses.dataclass(frozen=True)
class CrossEncoderSettings:
    """How the scorer runs a model folder (all of it is in the identity).

    Attributes:
      batch_size: pairs per forward pass.
      max_length: tokens per pair; longer pairs are truncated (longest first).
      dtype: ``"float32"`` (exact; what vLLM serves on CPU) or ``"bfloat16"``.
      num_threads: torch CPU threads (``None``: torch's default).
    """

    batch_size: int = 64
    max_length: int = DEFAULT_MAX_LENGTH
    dtype: Dtype = "float32"
    num_threads: int | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if not isinstance(self.max_length, int) or not 8 <= self.max_length <= 512:
            raise ValueError(
                f"max_length must be an int in [8, 512], got {self.max_length!r}"
            )
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.num_threads is not None and (
            not isinstance(self.num_threads, int) or self.num_threads < 1
        ):
            raise ValueError(
                f"num_threads must be None or an int >= 1, got {self.num_threads!r}"
            )


def check_model_folder(folder: str | os.PathLike[str]) -> Path:
    """The folder as a ``Path``, or a ``ValueError`` that says what is missing.

    A cross-encoder folder holds ``config.json`` (one label), the weights and
    the tokenizer files.
    """
    path = Path(folder).expanduser()
    if not path.is_dir():
        raise ValueError(f"cross-encoder folder {str(path)!r} does not exist")
    if not (path / "config.json").is_file():
        hint = ""
        if (path / "manifest.json").is_file():
            hint = (
                " (it is a trained-scorer folder: pass one of its fold folders, "
                "or use earm_jax.scoring.trained_scorer.TrainedScorer)"
            )
        raise ValueError(f"{str(path)!r} has no config.json: not a model folder{hint}")
    return path


def _autocast(dtype: Dtype) -> contextlib.AbstractContextManager[Any]:
    import torch

    if dtype == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


class CrossEncoderScorer:
    """Scores (query, memory) pairs with a local cross-encoder folder.

    Args:
      folder: a model folder ``sentence_transformers.CrossEncoder`` loads.
      settings: batching, length, dtype, threads.

    Example:
      scorer = CrossEncoderScorer("scorer/fold-0")
      scorer.score("When did Caroline move?", ["Caroline: I moved in May."])
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        settings: CrossEncoderSettings | None = None,
    ) -> None:
        self.folder = check_model_folder(folder)
        self.settings = settings or CrossEncoderSettings()
        self._identity = ScorerIdentity(
            kind="cross-encoder",
            model=model_identity(self.folder),
            prompt_version=PROMPT_VERSION,
            settings=(
                ("dtype", self.settings.dtype),
                ("max_length", str(self.settings.max_length)),
            ),
        )
        self._model: Any = None
        self.pairs_scored = 0

    @property
    def identity(self) -> ScorerIdentity:
        return self._identity

    def _load(self) -> Any:
        if self._model is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            import torch
            from sentence_transformers import CrossEncoder

            if self.settings.num_threads is not None:
                torch.set_num_threads(self.settings.num_threads)
            # A trained folder is a plain transformers folder (no modules.json);
            # sentence-transformers says so at INFO as "initializing a new
            # CrossEncoder model", which reads as random weights: it is not.
            quiet = logging.getLogger("sentence_transformers")
            level = quiet.level
            quiet.setLevel(max(level, logging.WARNING))
            try:
                model = CrossEncoder(
                    str(self.folder),
                    device="cpu",
                    local_files_only=True,
                    max_length=self.settings.max_length,
                )
            finally:
                quiet.setLevel(level)
            if model.num_labels != 1:
                raise ValueError(
                    f"{str(self.folder)!r} has {model.num_labels} labels; a relevance "
                    "cross-encoder has one"
                )
            self._model = model
        return self._model

    def logits(self, pairs: Sequence[tuple[str, str]]) -> list[float]:
        """The raw logits of ``pairs`` (before the sigmoid), in order."""
        if not pairs:
            return []
        import torch

        model = self._load()
        with _autocast(self.settings.dtype):
            values = model.predict(
                [list(pair) for pair in pairs],
                batch_size=self.settings.batch_size,
                activation_fn=torch.nn.Identity(),
                show_progress_bar=False,
            )
        self.pairs_scored += len(pairs)
        return [float(value) for value in values]

    def score_pairs(self, pairs: Sequence[tuple[str, str]]) -> list[PairScore]:
        """One :class:`PairScore` per ``(query, memory)`` pair, in order."""
        out = []
        for logit in self.logits(pairs):
            if math.isfinite(logit):
                out.append(PairScore.success(_sigmoid(logit)))
            else:
                out.append(PairScore.failure("model: non-finite logit"))
        return out

    def score(self, query: str, memories: Sequence[str]) -> list[PairScore]:
        return self.score_pairs([(query, memory) for memory in memories])

    def score_many(
        self, requests: Sequence[tuple[str, Sequence[str]]]
    ) -> list[list[PairScore]]:
        """All pairs of all requests in one length-sorted pass."""
        pairs = [(query, memory) for query, memories in requests for memory in memories]
        flat = iter(self.score_pairs(pairs))
        return [[next(flat) for _ in memories] for _, memories in requests]

    def close(self) -> None:
        self._model = None

    def __enter__(self) -> CrossEncoderScorer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _sigmoid(logit: float) -> float:
    if logit >= 0:
        return 1.0 / (1.0 + math.exp(-logit))
    expo = math.exp(logit)
    return expo / (1.0 + expo)


def iter_batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """Consecutive slices of ``items`` of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


__all__ = [
    "DEFAULT_MAX_LENGTH",
    "DTYPES",
    "PROMPT_VERSION",
    "CrossEncoderScorer",
    "CrossEncoderSettings",
    "check_model_folder",
]
