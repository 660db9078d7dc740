"""A cross-encoder relevance scorer that runs in this process (no server).

A cross-encoder reads the query and the memory together and returns one logit;
the score is its sigmoid, in [0, 1]. Any folder that
``sentence_transformers.CrossEncoder`` loads works (a BERT-like
sequence-classification model with one label), among them the models
``earm train-scorer`` writes, whose last layer already carries their
calibration, so the same folder gives the same scores here and behind vLLM
(``earm serve-scorer --model FOLDER --runner pooling``, then
:class:`~earm_jax.scoring.vllm.VllmScorer` in ``rerank`` mode).

Pairs are scored in batches sorted by token count
(:mod:`earm_jax.scoring.token_batches`), so a pool of 200 short memories
costs about the tokens it holds, not 200 times the longest one.

**Backends.** One name says what runs the model and at which precision
(:data:`BACKENDS`): ``torch-float32`` (the default: exact, what vLLM serves on
CPU), ``torch-bfloat16`` (matrix products in bfloat16, about 2.5 times as fast
on CPUs with native bfloat16, a few thousandths off float32), ``onnx-float32``
(the folder exported once to ONNX and run by ONNX Runtime with its graph
optimizations, :mod:`earm_jax.scoring.onnx_backend`) and ``onnx-int8`` (the
same with dynamically quantized int8 weights). The backend is part of the
identity, so no score cache and no recorded answers mix two of them; the
torch backends keep the identity they always had (``dtype`` and
``max_length``, no ``backend`` entry), so caches written before backends had
names stay valid. The default is chosen by ``benchmarks/bench_scorer_backends.py``
runs on each kind of machine measured (docs/trained-scorer.md, "Backends"); a
build (``earm train-scorer``) scores its held-out pools with
:data:`BUILD_BACKEND`, the same backend.

Needs the ``embed`` extra (torch, sentence-transformers), and for the ONNX
backends the ``scorer`` extra (onnxruntime); nothing here is imported by
``import earm_jax``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from earm_jax.store.embeddings import model_identity

from .base import PairScore, ScorerIdentity
from .token_batches import encode_pairs, longest_first_batches

Backend = Literal["torch-float32", "torch-bfloat16", "onnx-float32", "onnx-int8"]
BACKENDS: tuple[str, ...] = (
    "torch-float32",
    "torch-bfloat16",
    "onnx-float32",
    "onnx-int8",
)
DEFAULT_BACKEND: Backend = "torch-float32"
"""Fixed in code from the committed JSONs of
``benchmarks/bench_scorer_backends.py`` (one per kind of machine measured),
never chosen at run time: of the backends that keep float32 torch's ranking
(Recall@10 of Full within 0.002, mean top-10 overlap >= 9.5/10) on every kind,
the one whose smallest speedup is largest. ``torch-float32`` is that backend
for AVX2-only cores and cores with AVX-512 and native bfloat16:
``onnx-float32`` keeps the ranking on both but is slower on the first
(docs/trained-scorer.md, "Backends")."""

BUILD_BACKEND: Backend = DEFAULT_BACKEND
"""What ``earm train-scorer`` scores held-out pools with: the same pick as
:data:`DEFAULT_BACKEND`, from the committed
``benchmarks/bench_scorer_backends.py`` runs. A build that asks for another
(``--scorer-backend``) records it in its manifest, and an evaluation of the
build scores with the backend its manifest records
(``TrainedScorerFolder.scoring_backend``), so it finds the build's answers in
the score cache."""

BACKEND_LABELS: dict[str, str] = {
    "torch-float32": "PyTorch, float32",
    "torch-bfloat16": "PyTorch, bfloat16 autocast",
    "onnx-float32": "ONNX Runtime, float32",
    "onnx-int8": "ONNX Runtime, int8 weights",
}
"""What runs each backend and at which precision, for progress lines."""

DTYPES: tuple[str, ...] = ("float32", "bfloat16")
"""The precisions of the torch backends (the old ``--scorer-dtype`` values)."""
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
      backend: what runs the model at which precision, one of
        :data:`BACKENDS` (``"torch-float32"``: exact; what vLLM serves on CPU).
      num_threads: CPU threads of torch or of the ONNX Runtime session
        (``None``: the library's default).
    """

    batch_size: int = 64
    max_length: int = DEFAULT_MAX_LENGTH
    backend: Backend = DEFAULT_BACKEND
    num_threads: int | None = None

    @property
    def runtime(self) -> str:
        """``"torch"`` or ``"onnx"``."""
        return self.backend.split("-", 1)[0]

    @property
    def dtype(self) -> str:
        """The precision part of the backend: float32, bfloat16 or int8."""
        return self.backend.split("-", 1)[1]

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> CrossEncoderSettings:
        """Settings from their JSON (a build manifest's ``scoring``); the
        ``dtype`` of manifests written before backends had names is read as
        the torch backend of that precision."""
        fields = dict(data)
        dtype = fields.pop("dtype", None)
        if dtype is not None and "backend" not in fields:
            fields["backend"] = f"torch-{dtype}"
        return CrossEncoderSettings(**fields)

    def require_runtime(self, what: str = "backend", hint: str = "") -> None:
        """Raises ``ValueError`` naming ``what`` and the backend when it needs
        onnxruntime and none is installed (``hint``: another way out)."""
        if self.runtime == "onnx" and importlib.util.find_spec("onnxruntime") is None:
            raise ValueError(
                f"{what} {self.backend!r} needs onnxruntime: pip install "
                f"'earm_jax[scorer]'{hint}"
            )

    def __post_init__(self) -> None:
        if not isinstance(self.batch_size, int) or self.batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {self.batch_size!r}")
        if not isinstance(self.max_length, int) or not 8 <= self.max_length <= 512:
            raise ValueError(
                f"max_length must be an int in [8, 512], got {self.max_length!r}"
            )
        if self.backend not in BACKENDS:
            raise ValueError(
                f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}"
            )
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
                "e.g. open_scorer_folder(path).for_new_data().folder)"
            )
        raise ValueError(f"{str(path)!r} has no config.json: not a model folder{hint}")
    return path


def backend_from_dtype(dtype: str) -> str:
    """The backend name of an old ``dtype`` setting (``float32`` ->
    ``torch-float32``); a ``ValueError`` for another value."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {DTYPES}, got {dtype!r}")
    return f"torch-{dtype}"


def identity_settings(settings: CrossEncoderSettings) -> tuple[tuple[str, str], ...]:
    """The identity's settings: precision and length, and the runtime where it
    is not torch (the torch backends keep the identity of before, so their
    caches stay valid).

    >>> identity_settings(CrossEncoderSettings())
    (('dtype', 'float32'), ('max_length', '256'))
    >>> identity_settings(CrossEncoderSettings(backend="onnx-int8"))
    (('backend', 'onnx'), ('dtype', 'int8'), ('max_length', '256'))
    """
    pairs = [("dtype", settings.dtype), ("max_length", str(settings.max_length))]
    if settings.runtime != "torch":
        pairs.insert(0, ("backend", settings.runtime))
    return tuple(pairs)


def _autocast(dtype: str) -> contextlib.AbstractContextManager[Any]:
    import torch

    if dtype == "bfloat16":
        return torch.autocast("cpu", dtype=torch.bfloat16)
    return contextlib.nullcontext()


class CrossEncoderScorer:
    """Scores (query, memory) pairs with a local cross-encoder folder.

    Args:
      folder: a model folder ``sentence_transformers.CrossEncoder`` loads.
      settings: batching, length, backend, threads.
      cache_dir: the cache an ONNX backend's export goes under (default: the
        user's, ``$EARM_CACHE_DIR``); not part of the identity.

    Raises:
      ValueError: not a model folder, or an ONNX backend without onnxruntime.

    Example:
      scorer = CrossEncoderScorer("scorer/fold-0")
      scorer.score("When did Caroline move?", ["Caroline: I moved in May."])
    """

    def __init__(
        self,
        folder: str | os.PathLike[str],
        settings: CrossEncoderSettings | None = None,
        cache_dir: str | os.PathLike[str] | None = None,
    ) -> None:
        self.folder = check_model_folder(folder)
        self.settings = settings or CrossEncoderSettings()
        self.cache_dir = cache_dir
        self.settings.require_runtime()
        self._identity = ScorerIdentity(
            kind="cross-encoder",
            model=model_identity(self.folder),
            prompt_version=PROMPT_VERSION,
            settings=identity_settings(self.settings),
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
            if self.settings.runtime == "onnx":
                from .onnx_backend import OnnxCrossEncoder

                self._model = OnnxCrossEncoder(
                    self.folder,
                    precision=self.settings.dtype,  # type: ignore[arg-type]
                    max_length=self.settings.max_length,
                    num_threads=self.settings.num_threads,
                    cache_dir=self.cache_dir,
                )
                return self._model
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
        model = self._load()
        if self.settings.runtime == "onnx":
            values = model.logits(pairs, self.settings.batch_size)
            self.pairs_scored += len(pairs)
            return [float(value) for value in values]
        import numpy as np
        import torch

        # Batches sorted by tokens, each handed to sentence-transformers
        # whole: its own order (by characters) pads far more.
        encoded = encode_pairs(model.tokenizer, pairs, self.settings.max_length)
        lengths = [len(ids) for ids in encoded["input_ids"]]
        values = np.empty(len(pairs), np.float64)
        with _autocast(self.settings.dtype):
            for rows in longest_first_batches(lengths, self.settings.batch_size):
                values[rows] = model.predict(
                    [list(pairs[row]) for row in rows],
                    batch_size=len(rows),
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
    "BACKENDS",
    "BACKEND_LABELS",
    "BUILD_BACKEND",
    "DEFAULT_BACKEND",
    "DEFAULT_MAX_LENGTH",
    "DTYPES",
    "PROMPT_VERSION",
    "CrossEncoderScorer",
    "CrossEncoderSettings",
    "backend_from_dtype",
    "check_model_folder",
    "identity_settings",
]
