"""The manifest of a trained scorer folder, and which fold may score what.

``earm train-scorer`` writes a folder with one model folder per fold and a
``manifest.json`` that records, per fold, the conversations it was trained on
(by content digest) and those it held out. A conversation is scored by the fold
that held it out; a conversation no fold trained on (another data set) by the
first fold; a conversation every fold trained on is *in sample*, and an
evaluation refuses it unless told otherwise, since its scores would flatter the
scorer.

Both forms open the same way (:func:`open_scorer_folder`): a build's folder,
or one fold's folder inside it, which is that fold alone, so the conversations
it trained on stay refused (read from the manifest, or from the fold's record
``fold-<k>.json`` beside it when the build stopped before listing it). An
agent's own memories are no conversation any fold trained on:
:meth:`TrainedScorerFolder.for_new_data` names the model that scores them.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = "earm-trained-scorer-v1"
FOLD_RECORD = "{name}.json"
"""Written beside a fold's folder once its model is (outside it, so the
model's identity and the score cache's keys do not change): the fold's entry,
its conversations included, before the manifest lists it."""


class InSampleError(ValueError):
    """A conversation would be scored by a model that was trained on it."""


class WeakScorerError(ValueError):
    """A trained scorer whose manifest measured it no better than similarity."""


@dataclasses.dataclass(frozen=True)
class FoldChoice:
    """Which model scores a conversation.

    Attributes:
      folder: the model folder.
      fold: the fold's name (``"fold-0"``; ``""`` for a plain model folder).
      in_sample: whether that model was trained on the conversation.
      known: whether the manifest names this conversation (by digest) at all.
    """

    folder: Path
    fold: str
    in_sample: bool
    known: bool


@dataclasses.dataclass(frozen=True)
class TrainedScorerFolder:
    """A scorer folder: a trained-scorer folder with a manifest, or one plain
    cross-encoder folder (then nothing is known about its training data).

    Attributes:
      root: the folder given.
      manifest: the parsed manifest (``None`` for a plain model folder).
    """

    root: Path
    manifest: dict[str, Any] | None

    @property
    def folds(self) -> list[dict[str, Any]]:
        return [] if self.manifest is None else list(self.manifest["folds"])

    @property
    def scoring_backend(self) -> str | None:
        """The backend the build scored its held-out pools with (the score
        cache holds them under that identity); ``None`` for a plain model
        folder. A build from before backends had names scored with the torch
        backend of its recorded ``dtype``."""
        job = (self.manifest or {}).get("job")
        scoring = job.get("scoring") if isinstance(job, dict) else None
        if not isinstance(scoring, dict):
            return None
        backend = scoring.get("backend")
        if backend is None and "dtype" in scoring:
            backend = f"torch-{scoring['dtype']}"
        return backend if isinstance(backend, str) else None

    def profile_path(self, setting: str) -> Path | None:
        """The scorer profile measured for ``setting``, if the folder has one."""
        if self.manifest is None:
            return None
        name = self.manifest.get("profiles", {}).get(setting)
        return None if name is None else self.root / name

    def recall_at_10(self) -> list[tuple[str, str, float, float]]:
        """What the manifest measured of this scorer against similarity:
        ``(where, setting, Full Recall@10, Semantic Recall@10)`` for each
        memory setting, over the cross-fitted pools when the build has them
        (every pool scored by a model that never saw it), else over each
        fold's held-back questions. Empty for a plain model folder or a
        manifest that measured nothing."""
        if self.manifest is None:
            return []
        found = []
        cross_fitted = self.manifest.get("cross_fitted_quality") or {}
        if cross_fitted:
            sources = [("cross-fitted", cross_fitted)]
        else:
            sources = [
                (f"{fold.get('name', '?')} held-back questions", quality)
                for fold in self.folds
                if (quality := fold.get("held_back_quality"))
            ]
        for where, quality in sources:
            for setting, row in sorted(quality.items()):
                recall = (row or {}).get("recall@10") or {}
                full, semantic = recall.get("full"), recall.get("semantic")
                if isinstance(full, int | float) and isinstance(semantic, int | float):
                    found.append((where, setting, float(full), float(semantic)))
        return found

    def check_strength(self, force: bool = False, switch: str = "force") -> None:
        """Refuses a scorer its own manifest measured at or below similarity.

        A reranker whose Full Recall@10 (every candidate scored) is no higher
        than Semantic's (the similarity order, no calls) would make every
        answer worse for what it costs.

        Args:
          force: use it anyway (a test fixture, a study of weak scorers).
          switch: how the caller names ``force`` in the error.

        Raises:
          WeakScorerError: naming both numbers, where they were measured, and
            the fix.
        """
        if force:
            return
        for where, setting, full, semantic in self.recall_at_10():
            if full <= semantic:
                raise WeakScorerError(
                    f"scorer {str(self.root)!r} ranks no better than similarity: "
                    f"its manifest records Full Recall@10 {full:.3f} <= Semantic "
                    f"{semantic:.3f} ({where}, {setting}); train a stronger one "
                    f"(more conversations or steps), or pass {switch} to use it "
                    "anyway"
                )

    def for_new_data(self) -> FoldChoice:
        """The model for data no fold trained on, such as an agent's own
        memories: the first fold (what :meth:`choose` picks for a conversation
        the manifest does not name), or the folder itself for a plain model
        folder."""
        if self.manifest is None:
            return FoldChoice(self.root, "", in_sample=False, known=False)
        first = self.folds[0]
        return FoldChoice(self.root / first["folder"], first["name"], False, False)

    def choose(self, digest: str) -> FoldChoice:
        """The model for the conversation whose content digest is ``digest``."""
        if self.manifest is None:
            return self.for_new_data()
        folds = self.folds
        for fold in folds:
            if any(entry["digest"] == digest for entry in fold["held_out"]):
                return FoldChoice(self.root / fold["folder"], fold["name"], False, True)
        trained = [
            fold
            for fold in folds
            if any(entry["digest"] == digest for entry in fold["trained_on"])
        ]
        if trained:
            first = folds[0]
            return FoldChoice(self.root / first["folder"], first["name"], True, True)
        return self.for_new_data()


def model_scorer(
    folder: str | os.PathLike[str],
    settings: Any = None,
    embedder: Any = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> Any:
    """The scorer of one model folder: the in-process cross-encoder, blended
    with the cosine similarity when the folder holds a similarity blend
    (``embedder``: the sentence encoder it was fitted with; default: the
    bundled MiniLM, through the default embedding cache). ``cache_dir``: where
    an ONNX backend's export goes (default: the user's cache).

    Raises:
      ValueError: not a model folder, or an embedder other than the blend's.
    """
    from .cross_encoder import CrossEncoderScorer

    scorer = CrossEncoderScorer(folder, settings, cache_dir=cache_dir)
    return with_folder_blend(scorer, folder, embedder)


def with_folder_blend(
    scorer: Any, folder: str | os.PathLike[str], embedder: Any = None
) -> Any:
    """``scorer`` (the model of ``folder``) blended with the cosine similarity
    as the folder's similarity blend says, or as it is when the folder holds
    none (``embedder`` as in :func:`model_scorer`).

    Raises:
      ValueError: an embedder other than the blend's.
    """
    from .similarity_blend import BlendedScorer, load_blend

    blend = load_blend(folder)
    if blend is None:
        return scorer
    if embedder is None:
        from earm_jax.store.embeddings import Embedder

        embedder = Embedder()
    return BlendedScorer(scorer, blend, embedder)


def free_order_from(path: str | os.PathLike[str]) -> Any:
    """The free order a build fitted (``RetrieverConfig.free_order``): from a
    model folder's ``free_order.json``, a trained-scorer build's (the fold it
    serves for new data, as :func:`model_scorer` of that fold), or that file.

    Raises:
      ValueError: nothing at ``path``, or it holds no free order (a build with
        ``--no-word-coverage`` fits none).
    """
    from .similarity_blend import FREE_ORDER_FILE, SimilarityBlend, load_blend

    given = Path(path).expanduser()
    if given.is_file():
        try:
            data = json.loads(given.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{str(given)!r} cannot be read: {error}") from error
        try:
            return SimilarityBlend.from_json(data)
        except (TypeError, ValueError) as error:
            raise ValueError(f"{str(given)!r}: {error}") from error
    folder = open_scorer_folder(given).for_new_data().folder
    order = load_blend(folder, FREE_ORDER_FILE)
    if order is None:
        raise ValueError(
            f"{str(folder)!r} holds no {FREE_ORDER_FILE}: `earm train-scorer` "
            "fits one unless --no-word-coverage"
        )
    return order


def open_scorer_folder(path: str | os.PathLike[str]) -> TrainedScorerFolder:
    """Reads a scorer folder.

    Raises:
      ValueError: the folder is missing, the manifest is not one, or a fold
        folder it names is missing.
    """
    root = Path(path).expanduser()
    if not root.is_dir():
        raise ValueError(f"scorer folder {str(root)!r} does not exist")
    manifest_path = root / MANIFEST_NAME
    if not manifest_path.is_file():
        if not (root / "config.json").is_file():
            raise ValueError(
                f"{str(root)!r} is neither a trained-scorer folder (no "
                f"{MANIFEST_NAME}) nor a model folder (no config.json)"
            )
        return _one_fold(root)
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"{str(manifest_path)!r} cannot be read: {error}") from error
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise ValueError(
            f"{str(manifest_path)!r} is not a trained-scorer manifest "
            f"(format must be {MANIFEST_FORMAT!r})"
        )
    folds = manifest.get("folds")
    if not isinstance(folds, list) or not folds:
        raise ValueError(f"{str(manifest_path)!r} lists no folds")
    for fold in folds:
        for field in ("name", "folder", "trained_on", "held_out"):
            if field not in fold:
                raise ValueError(f"{str(manifest_path)!r}: a fold has no {field!r}")
        if not (root / fold["folder"] / "config.json").is_file():
            raise ValueError(
                f"{str(manifest_path)!r} names fold folder {fold['folder']!r}, which "
                "is missing or not a model folder"
            )
    return TrainedScorerFolder(root, manifest)


def _one_fold(root: Path) -> TrainedScorerFolder:
    """A model folder: one fold of the build beside it (so the conversations
    that fold trained on are still refused), else a plain model folder.

    The build is found from the folder's resolved path, so ``.`` inside a fold
    is that fold too; the fold's entry comes from the build's manifest, else
    from its record (a build stopped before the manifest listed it)."""
    here = root.resolve()
    # As given where that names the parent (messages then show the user's
    # path); resolved for ".", "..", which name none.
    build_root = (root if root.name not in ("", "..") else here).parent
    manifest: dict[str, Any] = {"format": MANIFEST_FORMAT}
    mine: list[dict[str, Any]] = []
    if (build_root / MANIFEST_NAME).is_file():
        try:
            build = open_scorer_folder(build_root)
        except ValueError:  # a damaged build: its fold's record may still say
            build = None
        if build is not None and build.manifest is not None:
            manifest = dict(build.manifest)
            mine = [
                fold
                for fold in build.folds
                if (build_root / fold["folder"]).resolve() == here
            ]
    if not mine:
        mine = _fold_record(build_root, here)
    if not mine:
        return TrainedScorerFolder(root, None)
    return TrainedScorerFolder(build_root, {**manifest, "folds": mine})


def _fold_record(build_root: Path, here: Path) -> list[dict[str, Any]]:
    """The fold entry its record beside ``here`` holds (``[]``: none, or not
    a record of this folder)."""
    record = build_root / FOLD_RECORD.format(name=here.name)
    try:
        entry = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return []
    fields = ("name", "folder", "trained_on", "held_out")
    if not isinstance(entry, dict) or any(field not in entry for field in fields):
        return []
    if (build_root / entry["folder"]).resolve() != here:
        return []
    return [entry]


__all__ = [
    "FOLD_RECORD",
    "MANIFEST_FORMAT",
    "MANIFEST_NAME",
    "FoldChoice",
    "InSampleError",
    "TrainedScorerFolder",
    "WeakScorerError",
    "free_order_from",
    "model_scorer",
    "open_scorer_folder",
    "with_folder_blend",
]
