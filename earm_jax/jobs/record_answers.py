"""Records a cross-fitted build's answers (``earm record-scores``).

``earm train-scorer --folds K`` scores each conversation's whole pools with the
fold that never saw it, into the score cache, under the identity of the
blended scorer (model + similarity). This reads them back, turns each answer
into the model's own logit (the blend is inverted with the pair's cosine, so
the file can apply it at any weight later) and writes one
:class:`~earm_jax.scoring.recorded_answers.RecordedAnswers` per memory setting.
Nothing is scored here: a pair the cache lacks is recorded as NaN and
counted.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from earm_jax.jobs.locomo_recorded import blend_coverage
from earm_jax.jobs.train_scorer_job import CROSS_FITTED
from earm_jax.locomo.data import load_locomo
from earm_jax.locomo.evaluate import scorer_scores
from earm_jax.locomo.selection import select_conversations
from earm_jax.locomo.streams import build_streams
from earm_jax.locomo.training_data import conversation_digest
from earm_jax.scoring.cache import ScoreCache, text_sha256
from earm_jax.scoring.recorded_answers import (
    RecordedAnswers,
    RecordedConversation,
    answer_logits,
    blended_answers,
    digest_bytes,
    unblend,
)
from earm_jax.scoring.replay import ReplayScorer
from earm_jax.scoring.similarity_blend import FREE_ORDER_FILE, load_blend

_PATH_KEYS = frozenset(
    {"path", "data", "out", "cache_dir", "score_cache", "base_model", "folder_path"}
)


def without_machine_paths(value: Any) -> Any:
    """``value`` with every absolute path cut to its last part: the manifest a
    committed file carries names no folder of the machine that built it."""
    if isinstance(value, dict):
        return {
            key: (
                _last_part(item)
                if key in _PATH_KEYS and isinstance(item, str)
                else without_machine_paths(item)
            )
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [without_machine_paths(item) for item in value]
    if isinstance(value, str) and (os.sep in value or value.startswith("~")):
        return " ".join(
            _last_part(part) if part.startswith(("/", "~")) else part
            for part in value.split(" ")
        )
    return value


def _last_part(text: str) -> str:
    return Path(text).name if text.startswith(("/", "~")) else text


@dataclasses.dataclass(frozen=True)
class RecordJob:
    """What ``earm record-scores`` reads.

    Attributes:
      scorer_folder: a folder ``earm train-scorer --folds K`` wrote.
      data: the LoCoMo data the build was made from (same content).
      setting: the memory setting to record.
      score_cache: the cache the build scored into (None: the manifest's).
      cache_dir: the embedding cache (None: the default).
    """

    scorer_folder: str
    data: str
    setting: str = "turns"
    score_cache: str | None = None
    cache_dir: str | None = None


def record_answers(job: RecordJob) -> tuple[RecordedAnswers, dict[str, int]]:
    """The build's recorded answers for ``job.setting`` and, per conversation,
    the pairs the cache lacked.

    Raises:
      ValueError: not a cross-fitted build, the setting was not built, the
        data differs from the build's, or the cache holds none of its answers.
    """
    from earm_jax.scoring.cross_encoder import CrossEncoderSettings
    from earm_jax.scoring.scorer_manifest import model_scorer, open_scorer_folder
    from earm_jax.store.embeddings import Embedder, model_identity

    folder = open_scorer_folder(job.scorer_folder)
    if folder.root.resolve() != Path(job.scorer_folder).expanduser().resolve():
        raise ValueError(
            f"scorer_folder {job.scorer_folder!r} is one fold of the build in "
            f"{str(folder.root)!r}: pass the build's folder (its answers come "
            "from every fold)"
        )
    manifest = folder.manifest
    if manifest is None or manifest["job"]["folds"] < 2:
        raise ValueError(
            f"scorer_folder {job.scorer_folder!r} is not a cross-fitted build "
            "(earm train-scorer --folds K with K > 1): its answers on the "
            "conversations it trained on would flatter it"
        )
    built = manifest["job"]
    if job.setting not in manifest["memories"]:
        raise ValueError(
            f"setting {job.setting!r} was not built (the build has "
            f"{', '.join(manifest['memories'])})"
        )
    conversations = select_conversations(
        load_locomo(job.data), tuple(built["conversations"]), built["limit"]
    )
    digests = {c.sample_id: conversation_digest(c) for c in conversations}
    recorded_digests = {e["id"]: e["digest"] for e in manifest["conversations"]}
    if digests != recorded_digests:
        raise ValueError(
            f"data {job.data!r} is not the copy the build was made from (the "
            "conversations or their texts differ)"
        )
    embedder = Embedder(built["embedding_model"], cache_dir=job.cache_dir)
    if embedder.identity != manifest["embedding_model"]:
        raise ValueError(
            f"the build's pools came from {manifest['embedding_model']}, not "
            f"{embedder.identity}"
        )
    streams = build_streams(
        conversations, embedder, setting=job.setting, pool_size=built["pool_size"]
    )
    scoring = CrossEncoderSettings.from_json(built["scoring"])
    cache = ScoreCache(job.score_cache or manifest["score_cache"])
    out: dict[str, RecordedConversation] = {}
    answered: list[tuple[str, Any, np.ndarray]] = []
    blends, models, missing = {}, {}, {}
    free_orders: dict[str, Any] = {}
    replays: dict[str, ReplayScorer] = {}
    try:
        for stream, conversation in zip(streams, conversations, strict=True):
            choice = folder.choose(digests[conversation.sample_id])
            if choice.in_sample:
                if manifest.get("complete") is False:
                    # Its fold is not finished yet: a stopped build records
                    # the conversations its finished folds held out.
                    continue
                raise ValueError(
                    f"conversation {conversation.sample_id} has no fold that held it "
                    "out"
                )
            blend = load_blend(choice.folder)
            blends[choice.fold] = blend
            free_orders[choice.fold] = load_blend(choice.folder, FREE_ORDER_FILE)
            models[choice.fold] = model_identity(choice.folder)
            if choice.fold not in replays:
                scorer = model_scorer(choice.folder, scoring, embedder)
                try:
                    replays[choice.fold] = ReplayScorer.from_cache(
                        cache, scorer.identity
                    )
                finally:
                    scorer.close()
            replay = replays[choice.fold]
            answers, failures = scorer_scores(stream, replay)
            missing[conversation.sample_id] = sum(failures.values())
            arrays = stream.arrays
            coverage = blend_coverage(stream, blend)
            logits = (
                answer_logits(answers)
                if blend is None
                else unblend(answers, arrays.similarity, blend, coverage)
            )
            logits = np.where(arrays.valid, logits, np.nan)
            # The profile is of the answers as the scorer gives them (the
            # blend at full weight), from the float16 values the file keeps.
            kept = logits.astype(np.float16).astype(np.float64)
            given = blended_answers(kept, arrays.similarity, blend, 1.0, coverage)
            answered.append(
                (
                    conversation.sample_id,
                    stream,
                    np.where(np.isfinite(kept), given, np.nan),
                )
            )
            out[conversation.sample_id] = RecordedConversation(
                sample_id=conversation.sample_id,
                digest=digests[conversation.sample_id],
                fold=choice.fold,
                query_sha256=digest_bytes(
                    [text_sha256(text) for text in stream.meta.query_texts]
                ),
                memory_sha256=digest_bytes(
                    [text_sha256(text) for text in stream.meta.memory_texts]
                ),
                candidates=np.where(arrays.valid, arrays.candidates, -1).astype(
                    np.int32
                ),
                logits=logits.astype(np.float16),
            )
    finally:
        cache.close()
    if not out or all(not np.isfinite(c.logits).any() for c in out.values()):
        raise ValueError(
            f"the score cache {cache.path!r} holds none of this build's answers "
            f"for {job.setting} (pass the build's --score-cache)"
        )
    recorded = RecordedAnswers(
        setting=job.setting,
        scorer={
            "kind": "cross-encoder",
            "models": models,
            "backend": scoring.runtime,
            "precision": scoring.dtype,
            "max_length": scoring.max_length,
            "embedding_model": embedder.identity,
        },
        blends=blends,
        manifest=without_machine_paths(manifest),
        conversations=out,
        profile=_profile(answered),
        free_orders=free_orders,
    )
    return recorded, missing


def refit_profile(
    scores_file: str, data: str, cache_dir: str | None = None
) -> RecordedAnswers:
    """``scores_file``'s recorded answers with their scorer profile measured
    again from the answers the file holds (no model, no score cache), as
    :func:`record_answers` measures it: a file recorded before profiles kept
    standings is brought up to the current form, its answers unchanged.

    Raises:
      ValueError: the data or the embedder is not the one the file was
        recorded on, or a class of pairs is missing.
    """
    from earm_jax.jobs.locomo_recorded import replayed_streams

    recorded = RecordedAnswers.load(scores_file)
    answered = [
        (
            stream.meta.sample_id,
            stream,
            np.where(stream.arrays.valid, replayed.arrays.scores, np.nan),
        )
        for stream, replayed in replayed_streams(recorded, data, cache_dir)
    ]
    profile = _profile(answered)
    if profile is None:
        raise ValueError(
            f"{scores_file!r} holds too few answers of a class to measure a profile"
        )
    return dataclasses.replace(recorded, profile=profile)


def _profile(answered: list[tuple[str, Any, np.ndarray]]) -> dict[str, Any] | None:
    """The profile of the recorded answers, or None when a class of pairs is
    missing (too few answers to measure it)."""
    from earm_jax.jobs.fold_answers import streams_profile

    try:
        return streams_profile(answered, {"measured_on": CROSS_FITTED})
    except ValueError:
        return None


__all__ = ["RecordJob", "record_answers", "refit_profile", "without_machine_paths"]
