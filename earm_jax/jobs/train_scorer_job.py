"""What ``earm train-scorer`` is asked to build: the job's fields and their
checks, the names its output uses, and how a stopped build's settings are
compared when ``resume`` continues it. The build itself is
:mod:`earm_jax.jobs.train_scorer`."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from earm_jax.scoring.cross_encoder import (
    BACKEND_LABELS,
    BUILD_BACKEND,
    CrossEncoderSettings,
)
from earm_jax.scoring.cross_encoder_training import TrainingSettings, base_model_layers
from earm_jax.scoring.scorer_manifest import MANIFEST_NAME

CROSS_FITTED = "cross-fitted pools, each scored by a model that never saw it"
HELD_BACK = "held-back questions of the training conversations"
RECORDED_NAME = "{setting}-scores.npz"
"""The recorded answers a cross-fitted build writes per memory setting."""
SCORE_CACHE_NAME = "scores.sqlite"
"""The score cache's file name in the cache folder (``$EARM_CACHE_DIR``)."""


@dataclasses.dataclass(frozen=True)
class TrainScorerJob:
    """Everything ``earm train-scorer`` runs (recorded in the manifest).

    Attributes:
      data: ``locomo10.json`` or a folder of per-conversation files.
      out: the output folder (must be empty or absent).
      settings: memory settings whose pairs train the model.
      conversations: only these sample ids (empty: all).
      limit: first N questions of categories 1-4 per conversation (0: all).
      folds: 1 (one model) or K > 1 (cross-fitting).
      base_model: the BERT-like folder to start from (None: bundled MiniLM).
      embedding_model: the sentence-transformers folder of the pools
        (None: bundled MiniLM).
      pool_size: candidates per question.
      hard_pool: the most similar non-relevant candidates a question's hard
        negatives come from.
      validation_fraction: share of each training conversation's questions
        held back for calibration.
      similarity_blend: also fit the blend of the calibrated answer with the
        pool's cosine similarity on the held-back questions
        (:mod:`earm_jax.scoring.similarity_blend`); the fold's scorer uses it.
      word_coverage: the blend also weighs how much of the question's rarer
        words the memory repeats (:mod:`earm_jax.scoring.word_coverage`).
      scoring: how held-out pools are scored (backend, batch); by default
        with :data:`~earm_jax.scoring.cross_encoder.BUILD_BACKEND`.
      training: the fine-tuning settings.
      cache_dir: embedding cache, and where an ONNX backend's exports go
        (None: the default).
      score_cache: the SQLite score cache held-out scores go to (None:
        ``$EARM_CACHE_DIR/scores.sqlite``).
      resume: continue a stopped build in ``out``: the folds its manifest
        records are kept (their held-out pools come back from the score
        cache), a fold whose model was written (``fold-<k>.json``) is scored
        without training again, the rest are trained. Every other field must
        equal the stopped build's.
    """

    data: str
    out: str
    settings: tuple[str, ...] = ("turns",)
    conversations: tuple[str, ...] = ()
    limit: int = 0
    folds: int = 1
    base_model: str | None = None
    embedding_model: str | None = None
    pool_size: int = 200
    hard_pool: int = 20
    validation_fraction: float = 0.1
    similarity_blend: bool = True
    word_coverage: bool = True
    scoring: CrossEncoderSettings = CrossEncoderSettings(backend=BUILD_BACKEND)
    training: TrainingSettings = TrainingSettings()
    cache_dir: str | None = None
    score_cache: str | None = None
    resume: bool = False

    def validate(self) -> None:
        """Raises ``ValueError`` naming the first bad field."""
        from earm_jax.locomo.memories import SETTINGS

        if not self.settings or any(s not in SETTINGS for s in self.settings):
            raise ValueError(f"settings must be among {SETTINGS}, got {self.settings}")
        if (
            isinstance(self.folds, bool)
            or not isinstance(self.folds, int)
            or self.folds < 1
        ):
            raise ValueError(f"folds must be an int >= 1, got {self.folds!r}")
        if self.limit < 0:
            raise ValueError(f"limit must be >= 0 (0 = all), got {self.limit}")
        if self.pool_size < 2:
            raise ValueError(f"pool_size must be >= 2, got {self.pool_size}")
        if self.hard_pool < 0:
            raise ValueError(f"hard_pool must be >= 0, got {self.hard_pool}")
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(
                f"validation_fraction must be in (0, 1), got {self.validation_fraction}"
            )
        if self.training.layers:
            available = base_model_layers(self.base_model or default_base_model())
            if available is not None and self.training.layers > available:
                raise ValueError(
                    f"layers must be at most the base model's {available}, got "
                    f"{self.training.layers}"
                )
        # Checked before training: the scorer is made only after a fold's
        # model is written, minutes in.
        self.scoring.require_runtime(
            "scoring backend",
            ", or score with torch-float32 (--scorer-backend torch-float32)",
        )
        out = Path(self.out)
        if self.resume:
            self.stopped_manifest()
        elif out.exists() and (not out.is_dir() or any(out.iterdir())):
            hint = (
                " (a stopped build: add --resume to continue it)"
                if (out / MANIFEST_NAME).is_file()
                else ""
            )
            raise ValueError(
                f"out {self.out!r} exists and is not an empty folder{hint}"
            )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def stopped_manifest(self) -> dict[str, Any]:
        """The manifest of the stopped build ``resume`` continues.

        Raises:
          ValueError: naming ``resume`` when ``out`` holds no stopped build of
            this job (no manifest, a finished build, or other settings).
        """
        path = Path(self.out) / MANIFEST_NAME
        if not path.is_file():
            raise ValueError(
                f"resume: {str(path)!r} does not exist (nothing to resume)"
            )
        manifest = json.loads(path.read_text())
        if manifest.get("complete") is not False:
            raise ValueError(f"resume: the build in {self.out!r} is already complete")
        stopped, asked = _settings_of(manifest.get("job")), _settings_of(self.to_json())
        if stopped != asked:
            differ = _differing_fields(stopped, asked)
            raise ValueError(
                f"resume: the build in {self.out!r} was started with other "
                f"settings ({differ}; every option must equal the stopped build's)"
            )
        return manifest


def stopped_backend(out: str | os.PathLike[str]) -> str | None:
    """The scoring backend of the build in ``out`` (``None``: no manifest
    there), so a resumed build keeps the backend it started with."""
    path = Path(out) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    scoring = _settings_of(manifest.get("job"))
    scoring = scoring.get("scoring") if isinstance(scoring, dict) else None
    return scoring.get("backend") if isinstance(scoring, dict) else None


def scoring_label(settings: CrossEncoderSettings) -> str:
    """``torch-float32 (PyTorch, float32)``: the backend and what it is."""
    return f"{settings.backend} ({BACKEND_LABELS[settings.backend]})"


def _settings_of(job: dict[str, Any] | None) -> Any:
    """A job's fields as JSON, without ``resume``."""
    if not isinstance(job, dict):
        return None
    settings = json.loads(json.dumps({k: v for k, v in job.items() if k != "resume"}))
    # A build started before backends had names recorded its scoring dtype.
    scoring = settings.get("scoring")
    if isinstance(scoring, dict) and "dtype" in scoring and "backend" not in scoring:
        scoring["backend"] = f"torch-{scoring.pop('dtype')}"
    # A build started before layers could be cut kept all of them, one
    # started before residual training trained on the logit alone, and one
    # started before the focus on hard groups drew from all groups.
    training = settings.get("training")
    if isinstance(training, dict):
        training.setdefault("layers", 0)
        training.setdefault("residual_weight", 0.0)
        training.setdefault("hardest_share", 1.0)
    # One started before the blend weighed word coverage fitted it without.
    settings.setdefault("word_coverage", False)
    # The same folder named relatively or absolutely is the same build.
    for name in ("data", "out"):
        if isinstance(settings.get(name), str):
            settings[name] = os.path.realpath(settings[name])
    return settings


def _differing_fields(stopped: Any, asked: Any) -> str:
    """``field: stopped -> asked`` for each top-level field that differs."""
    if not isinstance(stopped, dict) or not isinstance(asked, dict):
        return "the stopped build records no job"
    names = sorted(set(stopped) | set(asked))
    return ", ".join(
        f"{name}: {stopped.get(name)!r} -> {asked.get(name)!r}"
        for name in names
        if stopped.get(name) != asked.get(name)
    )


def default_base_model() -> Path:
    from earm_jax.store.embeddings import default_model_path

    return default_model_path()


__all__ = [
    "CROSS_FITTED",
    "HELD_BACK",
    "RECORDED_NAME",
    "SCORE_CACHE_NAME",
    "TrainScorerJob",
    "default_base_model",
    "scoring_label",
    "stopped_backend",
]
