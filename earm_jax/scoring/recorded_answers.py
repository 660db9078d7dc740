r"""Recorded answers: a trained scorer's answers on whole LoCoMo pools, in one
small file that replays them with no model.

One file holds one build's answers for one memory setting. Per conversation:

- ``logits``: ``float16[T, N]``, the model's own calibrated answer as a logit
  (:math:`\operatorname{logit} p_{\mathrm{ce}}`) for question ``t`` and pool
  position ``n``; NaN where not scored (padding, or a pair the build failed);
- ``candidates``: ``int32[T, N]``, the pool's memory rows (-1 at padding);
- ``query_sha256`` / ``memory_sha256``: ``uint8[T, 32]`` / ``uint8[M, 32]``,
  the SHA-256 of each question's and memory's text (no text is stored), so a
  different copy of the data is refused, and pairs are replayed by digest
  whatever order another embedder gives the pool;

and once: the setting, the scorer's identity (backend and precision), each
fold's similarity blend and free order (the blend of the texts alone,
:mod:`earm_jax.locomo.pool_order`; absent in files recorded before builds
fitted one), and the build's manifest without machine paths.

A logit rather than a probability: float16 keeps three significant digits of
a logit but cannot tell ``0.9995`` from ``0.9999``, and the top of a pool is
where the ranking matters. The blend with the cosine similarity
(:mod:`earm_jax.scoring.similarity_blend`) is applied at replay, at any weight
between the model alone (0) and the fitted blend (1).
"""

from __future__ import annotations

import dataclasses
import json
import os
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .similarity_blend import SimilarityBlend, answer_logits

RECORDED_FORMAT = "earm-recorded-answers-v1"


def digest_bytes(hex_digests: list[str] | tuple[str, ...]) -> np.ndarray:
    """``uint8[len, 32]`` of SHA-256 hex digests."""
    if not hex_digests:
        return np.zeros((0, 32), np.uint8)
    return np.frombuffer(
        b"".join(bytes.fromhex(d) for d in hex_digests), np.uint8
    ).reshape(-1, 32)


def digest_hex(rows: np.ndarray) -> list[str]:
    """The hex digests of ``uint8[len, 32]`` rows."""
    return [bytes(row).hex() for row in np.asarray(rows, np.uint8)]


def unblend(
    blended: np.ndarray,
    cosines: np.ndarray,
    blend: SimilarityBlend,
    coverage: np.ndarray | None = None,
) -> np.ndarray:
    """The model's own logit from a blended answer, the pair's cosine and (for
    a blend that weighs it) its word coverage: the inverse of
    :meth:`SimilarityBlend.combine` up to its clipping."""
    z = answer_logits(blended)
    rest = blend.combine_logits(np.zeros_like(z), cosines, coverage)
    return (z - rest) / blend.logit_weight


def blended_answers(
    logits: np.ndarray,
    cosines: np.ndarray,
    blend: SimilarityBlend | None,
    weight: float = 1.0,
    coverage: np.ndarray | None = None,
) -> np.ndarray:
    r"""Answers in (0, 1) at blend ``weight``: :math:`\sigma((1-w)\,\ell + w\,
    z)` for the model's logit :math:`\ell` and the blend's logit :math:`z`
    (:meth:`SimilarityBlend.combine_logits`; ``coverage`` is the pairs' word
    coverage, needed when the blend weighs it); ``weight=0`` (or no blend) is
    the model alone, ``1`` the fitted blend."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"blend weight must be in [0, 1], got {weight!r}")
    ell = np.asarray(logits, np.float64)
    if blend is not None and weight > 0.0:
        z = blend.combine_logits(ell, cosines, coverage)
        ell = (1.0 - weight) * ell + weight * z
    return 1.0 / (1.0 + np.exp(-ell))


@dataclasses.dataclass(frozen=True)
class RecordedConversation:
    """One conversation's recorded answers (see the module docstring).

    Attributes:
      sample_id: LoCoMo's id.
      digest: the conversation's content digest (training data's
        ``conversation_digest``).
      fold: the fold whose model scored it (one that never saw it).
      query_sha256: ``uint8[T, 32]``.
      memory_sha256: ``uint8[M, 32]``.
      candidates: ``int32[T, N]`` memory rows, -1 at padding.
      logits: ``float16[T, N]``, NaN where not scored.
    """

    sample_id: str
    digest: str
    fold: str
    query_sha256: np.ndarray
    memory_sha256: np.ndarray
    candidates: np.ndarray
    logits: np.ndarray

    def __post_init__(self) -> None:
        t, n = self.logits.shape
        where = f"conversation {self.sample_id}"
        if self.candidates.shape != (t, n):
            raise ValueError(f"{where}: candidates must be [{t}, {n}]")
        if self.query_sha256.shape != (t, 32):
            raise ValueError(f"{where}: query_sha256 must be [{t}, 32]")
        if self.memory_sha256.ndim != 2 or self.memory_sha256.shape[1] != 32:
            raise ValueError(f"{where}: memory_sha256 must be [M, 32]")
        if np.any(self.candidates >= self.memory_sha256.shape[0]):
            raise ValueError(f"{where}: a candidate row is past the memories")

    def pairs(self) -> dict[tuple[str, str], float]:
        """``{(query sha256, memory sha256): logit}`` of the scored pairs."""
        queries = digest_hex(self.query_sha256)
        memories = digest_hex(self.memory_sha256)
        rows, cols = np.nonzero(np.isfinite(self.logits) & (self.candidates >= 0))
        return {
            (queries[t], memories[self.candidates[t, n]]): float(self.logits[t, n])
            for t, n in zip(rows.tolist(), cols.tolist(), strict=True)
        }


@dataclasses.dataclass(frozen=True)
class RecordedAnswers:
    """A build's recorded answers for one memory setting.

    Attributes:
      setting: ``"turns"`` or ``"observations"``.
      scorer: the scorer's identity: ``kind``, ``model`` (model identity per
        fold), ``backend`` and ``precision`` (answers of different backends
        never mix).
      blends: fold name -> its similarity blend (``None``: the fold has none).
      manifest: the build's manifest without machine paths.
      conversations: sample id -> its answers.
      profile: the scorer profile measured on these answers as the scorer
        gives them (blend at full weight), in ``profile_to_json``'s form, for
        ``earm simulate --scorer-profile``; ``None`` when not measured.
      free_orders: fold name -> its free order (a blend of the texts alone,
        fitted with the fold's blend; :mod:`earm_jax.locomo.pool_order`);
        empty in files recorded before builds fitted one.
    """

    setting: str
    scorer: dict[str, Any]
    blends: dict[str, SimilarityBlend | None]
    manifest: dict[str, Any]
    conversations: dict[str, RecordedConversation]
    profile: dict[str, Any] | None = None
    free_orders: dict[str, SimilarityBlend | None] = dataclasses.field(
        default_factory=dict
    )

    def blend_of(self, sample_id: str) -> SimilarityBlend | None:
        return self.blends.get(self.conversations[sample_id].fold)

    def free_order_of(self, sample_id: str) -> SimilarityBlend:
        """The free order of the fold that answered ``sample_id``.

        Raises:
          ValueError: the file holds none for that fold.
        """
        fold = self.conversations[sample_id].fold
        order = self.free_orders.get(fold)
        if order is None:
            raise ValueError(
                f"pool_order 'free': the recorded answers hold no free order for "
                f"{fold} (conversation {sample_id}); record them from a build that "
                "fits one (earm train-scorer with word coverage)"
            )
        return order

    def check(self, setting: str, digests: Mapping[str, str]) -> None:
        """Refuses answers recorded for another setting or other data.

        Args:
          setting: the memory setting about to be replayed.
          digests: sample id -> content digest of the conversations about to
            be replayed.

        Raises:
          ValueError: naming the setting, or the conversation that is missing
            or whose text differs.
        """
        if setting != self.setting:
            raise ValueError(
                f"the recorded answers are for memories {self.setting!r}, not "
                f"{setting!r}"
            )
        missing = sorted(set(digests) - set(self.conversations))
        if missing:
            raise ValueError(
                f"the recorded answers hold no conversation {', '.join(missing)} "
                f"(they hold {', '.join(sorted(self.conversations))})"
            )
        changed = sorted(
            sample
            for sample, digest in digests.items()
            if self.conversations[sample].digest != digest
        )
        if changed:
            raise ValueError(
                f"conversation(s) {', '.join(changed)} differ from the copy the "
                "answers were recorded on (another data version or a repair)"
            )

    def pairs(self) -> dict[tuple[str, str], float]:
        """Every conversation's ``{(query sha256, memory sha256): logit}``."""
        out: dict[tuple[str, str], float] = {}
        for conversation in self.conversations.values():
            out.update(conversation.pairs())
        return out

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Writes a compressed ``.npz`` (atomically: a temporary file renamed)."""
        path = Path(path)
        header = {
            "format": RECORDED_FORMAT,
            "setting": self.setting,
            "scorer": self.scorer,
            "blends": {
                fold: None if blend is None else dataclasses.asdict(blend)
                for fold, blend in self.blends.items()
            },
            "free_orders": {
                fold: None if order is None else dataclasses.asdict(order)
                for fold, order in self.free_orders.items()
            },
            "manifest": self.manifest,
            "profile": self.profile,
            "conversations": [
                {"id": c.sample_id, "digest": c.digest, "fold": c.fold}
                for c in self.conversations.values()
            ],
        }
        arrays: dict[str, np.ndarray] = {
            "header": np.frombuffer(
                json.dumps(header, sort_keys=True).encode(), np.uint8
            )
        }
        for index, c in enumerate(self.conversations.values()):
            arrays[f"c{index}_query_sha256"] = c.query_sha256.astype(np.uint8)
            arrays[f"c{index}_memory_sha256"] = c.memory_sha256.astype(np.uint8)
            small = np.int16 if c.memory_sha256.shape[0] < 2**15 else np.int32
            arrays[f"c{index}_candidates"] = c.candidates.astype(small)
            arrays[f"c{index}_logits"] = c.logits.astype(np.float16)
        temporary = path.with_name(path.name + ".partial")
        with open(temporary, "wb") as out:
            np.savez_compressed(out, **arrays)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        return path

    @staticmethod
    def load(path: str | os.PathLike[str]) -> RecordedAnswers:
        """Reads :meth:`save`'s file.

        Raises:
          ValueError: the file is missing, not a recorded-answers file, or
            damaged (naming the part).
        """
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"recorded answers {str(path)!r} do not exist")
        try:
            with np.load(path, allow_pickle=False) as data:
                arrays = {name: data[name] for name in data.files}
        except (OSError, ValueError, zipfile.BadZipFile, EOFError) as error:
            raise ValueError(
                f"{str(path)!r} is not a recorded-answers file: {error}"
            ) from error
        try:
            header = json.loads(bytes(arrays["header"]).decode())
        except (KeyError, UnicodeDecodeError, json.JSONDecodeError) as error:
            raise ValueError(f"{str(path)!r} has no readable header") from error
        if not isinstance(header, dict) or header.get("format") != RECORDED_FORMAT:
            raise ValueError(
                f"{str(path)!r} is not a recorded-answers file (format must be "
                f"{RECORDED_FORMAT!r})"
            )
        conversations = {}
        for index, entry in enumerate(header["conversations"]):
            try:
                conversations[entry["id"]] = RecordedConversation(
                    sample_id=entry["id"],
                    digest=entry["digest"],
                    fold=entry["fold"],
                    query_sha256=arrays[f"c{index}_query_sha256"],
                    memory_sha256=arrays[f"c{index}_memory_sha256"],
                    candidates=arrays[f"c{index}_candidates"].astype(np.int32),
                    logits=arrays[f"c{index}_logits"],
                )
            except KeyError as error:
                raise ValueError(
                    f"{str(path)!r} lacks {error.args[0]} (a damaged file)"
                ) from error
        blends = {
            fold: None if blend is None else SimilarityBlend(**blend)
            for fold, blend in header["blends"].items()
        }
        free_orders = {
            fold: None if order is None else SimilarityBlend(**order)
            for fold, order in header.get("free_orders", {}).items()
        }
        return RecordedAnswers(
            setting=header["setting"],
            scorer=header["scorer"],
            blends=blends,
            manifest=header["manifest"],
            conversations=conversations,
            profile=header.get("profile"),
            free_orders=free_orders,
        )


def describe(answers: RecordedAnswers) -> dict[str, Any]:
    """A short summary: conversations, questions, scored pairs, backend."""
    scored = sum(
        int(np.isfinite(c.logits).sum()) for c in answers.conversations.values()
    )
    return {
        "setting": answers.setting,
        "conversations": list(answers.conversations),
        "questions": sum(c.logits.shape[0] for c in answers.conversations.values()),
        "scored_pairs": scored,
        "backend": answers.scorer.get("backend"),
        "precision": answers.scorer.get("precision"),
    }


__all__ = [
    "RECORDED_FORMAT",
    "RecordedAnswers",
    "RecordedConversation",
    "answer_logits",
    "blended_answers",
    "describe",
    "digest_bytes",
    "digest_hex",
    "unblend",
]
