"""The job behind ``earm train-scorer``: a relevance cross-encoder from LoCoMo.

For each fold (``folds=1``: one model on everything it is given; ``folds=K``:
K models on disjoint groups of conversations, so every conversation is scored
by a model that never saw it):

1. training groups from the fold's training conversations (a seeded share of
   their questions is held back for calibration);
2. listwise fine-tuning of the base model
   (:mod:`earm_jax.scoring.cross_encoder_training`);
3. Platt calibration on the held-back questions' whole pools, folded into the
   model's last layer; the fold folder is written;
4. with ``K > 1``: the fold's own conversations are scored whole through the
   in-process scorer and the score cache (so ``earm locomo --scorer
   cross-encoder``, which scores with the backend the build records, later
   scores nothing), and the scorer's quality there is recorded.

Pools are scored with ``scoring.backend``: by default
:data:`~earm_jax.scoring.cross_encoder.BUILD_BACKEND`, the fastest backend
the committed benchmark found to keep float32 torch's ranking; each progress
line of the scoring says which backend and precision run and at how many
pairs/s.

The output folder holds ``fold-<k>/`` model folders, ``manifest.json`` (data
digests, conversations per fold, settings, per-fold metrics, provenance) and a
scorer profile per memory setting for ``earm simulate --scorer-profile``:
measured on the cross-fitted pools with ``K > 1``, on the held-back questions
with one fold.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from earm_jax.jobs.fold_answers import FoldAnswers, PoolData, score_pools
from earm_jax.jobs.progress import Progress, duration
from earm_jax.jobs.train_scorer_job import (
    CROSS_FITTED,
    HELD_BACK,
    RECORDED_NAME,
    SCORE_CACHE_NAME,
    TrainScorerJob,
    default_base_model,
    scoring_label,
)
from earm_jax.locomo.data import Conversation, load_locomo
from earm_jax.locomo.evaluate import scorer_scores
from earm_jax.locomo.selection import select_conversations
from earm_jax.locomo.streams import build_streams
from earm_jax.locomo.training_data import (
    assign_folds,
    conversation_digest,
    pool_pairs,
    training_groups,
    validation_questions,
)
from earm_jax.scoring.cross_encoder import CrossEncoderSettings
from earm_jax.scoring.cross_encoder_training import (
    apply_calibration,
    load_base_model,
    model_logits,
    save_model,
    train_cross_encoder,
)
from earm_jax.scoring.platt import Calibration, fit_platt
from earm_jax.scoring.scorer_manifest import (
    FOLD_RECORD,
    MANIFEST_FORMAT,
    MANIFEST_NAME,
    model_scorer,
)
from earm_jax.scoring.similarity_blend import (
    FREE_ORDER_FILE,
    SimilarityBlend,
    write_blend,
)
from earm_jax.scoring.word_coverage import word_coverage


def file_digests(data: str) -> dict[str, str]:
    """SHA-256 of each data file (a folder's ``*.json``, or the one file)."""
    path = Path(data)
    files = sorted(path.glob("*.json")) if path.is_dir() else [path]
    return {file.name: hashlib.sha256(file.read_bytes()).hexdigest() for file in files}


def _entry(conversation: Conversation) -> dict[str, str]:
    return {"id": conversation.sample_id, "digest": conversation_digest(conversation)}


def held_back_questions(
    query_counts: dict[str, int], fraction: float, seed: int
) -> dict[str, np.ndarray]:
    """``bool[T]`` per training conversation: the seeded questions a build
    holds back for calibration, given each conversation's question count in
    the order the fold trains on them (the same on a resumed build, and for
    whoever judges the fold on them afterwards)."""
    return {
        sample: validation_questions(count, fraction, seed + index)
        for index, (sample, count) in enumerate(query_counts.items())
    }


def _held_back(
    job: TrainScorerJob, data: PoolData, training_ids: list[str]
) -> dict[str, np.ndarray]:
    return held_back_questions(
        {s: len(data.conversation(s).queries()) for s in training_ids},
        job.validation_fraction,
        job.training.seed,
    )


def _train_fold(
    job: TrainScorerJob,
    data: PoolData,
    name: str,
    training_ids: list[str],
    embedding_model: str,
    progress: Progress,
) -> tuple[Path, dict[str, Any], dict[str, np.ndarray]]:
    """Trains, calibrates and writes one fold; returns its folder, its
    manifest entry and the held-back questions of each training conversation."""
    held_back = _held_back(job, data, training_ids)
    groups = [
        group
        for setting in job.settings
        for sample in training_ids
        for group in training_groups(
            data.stream(setting, sample), ~held_back[sample], job.hard_pool
        )
    ]
    steps = job.training.num_steps(len(groups))
    progress.note(
        f"{name}: training on {', '.join(training_ids)} ({len(groups)} groups, "
        f"{steps} steps)"
    )
    base = job.base_model or str(default_base_model())
    tokenizer, model = load_base_model(base, job.training.layers, job.training.seed)
    progress.phase(f"{name} training", steps)
    every = max(1, steps // 50)

    def on_step(done: int, total: int, loss: float) -> None:
        if done % every == 0 or done == total:
            progress.step(f"step {done}/{total}, loss {loss:.3f}", done=done)

    report = train_cross_encoder(tokenizer, model, groups, job.training, on_step)
    logits, labels, cosines, coverage = [], [], [], []
    for setting in job.settings:
        for sample in training_ids:
            stream = data.stream(setting, sample)
            pairs = pool_pairs(stream, held_back[sample])
            cosines.append(
                np.array([stream.arrays.similarity[t, p] for t, p in pairs.positions])
            )
            if job.word_coverage:
                coverage.append(
                    np.array([word_coverage(q, [m])[0] for q, m in pairs.pairs])
                )
            logits.append(
                model_logits(
                    tokenizer,
                    model,
                    pairs.pairs,
                    max_length=job.training.max_length,
                    precision=job.training.precision,
                )
            )
            labels.append(
                np.array([stream.arrays.relevant[t, p] for t, p in pairs.positions])
            )
    try:
        held_logits, held_labels = np.concatenate(logits), np.concatenate(labels)
        calibration: Calibration | None = fit_platt(held_logits, held_labels)
    except ValueError:  # the held-back pools lack a class, or pairs (tiny slices)
        calibration = None
    else:
        apply_calibration(model, calibration)
    folder = save_model(tokenizer, model, Path(job.out) / name, job.training.max_length)
    blend = free_order = None
    if job.similarity_blend and calibration is not None:
        cosine = np.concatenate(cosines)
        cover = np.concatenate(coverage) if job.word_coverage else None
        calibrated = calibration.scale * held_logits + calibration.shift
        blend = SimilarityBlend.fit(
            calibrated, cosine, held_labels, embedding_model, cover
        )
        write_blend(folder, blend)
        if cover is not None:
            # The free order a policy may go down: the same pairs, no model.
            free_order = SimilarityBlend.fit(
                None, cosine, held_labels, embedding_model, cover
            )
            write_blend(folder, free_order, FREE_ORDER_FILE)
    entry = {
        "name": name,
        "folder": folder.name,
        "trained_on": [_entry(data.conversation(s)) for s in training_ids],
        "training_groups": len(groups),
        "held_back_questions": {s: int(v.sum()) for s, v in held_back.items()},
        "training": dataclasses.asdict(report),
        "calibration": None if calibration is None else dataclasses.asdict(calibration),
        "similarity_blend": None if blend is None else dataclasses.asdict(blend),
        "free_order": None if free_order is None else dataclasses.asdict(free_order),
    }
    return folder, entry, held_back


def _scored(
    what: str,
    pairs: int,
    hits: int,
    sent: int,
    seconds: float,
    scoring: CrossEncoderSettings,
) -> str:
    """A scoring step's line: its pairs, how many the score cache answered,
    how many the model scored and how fast, and the backend and precision
    that scored them (``conversation 26 (turns): 900 pairs, 300 from the
    score cache, 600 scored at 30 pairs/s by torch-float32 (PyTorch,
    float32)``)."""
    cached = f", {hits:,} from the score cache" if hits else ""
    rate = f" at {sent / seconds:,.0f} pairs/s" if sent and seconds > 0 else ""
    return (
        f"{what}: {pairs:,} pairs{cached}, {sent:,} scored{rate} by "
        f"{scoring_label(scoring)}"
    )


def _check_kept_fold(
    entry: dict[str, Any],
    folder: Path,
    training_ids: list[str],
    held: list[str],
    data: PoolData,
) -> None:
    """Refuses a kept fold whose model or conversations changed since."""
    from earm_jax.store.embeddings import model_identity

    if not (folder / "config.json").is_file():
        raise ValueError(f"resume: the model folder {str(folder)!r} is missing")
    if model_identity(folder) != entry.get("model_identity"):
        raise ValueError(
            f"resume: the model in {str(folder)!r} changed since it was recorded"
        )
    expected = [_entry(data.conversation(s)) for s in training_ids]
    if entry.get("trained_on") != expected or entry.get("held_out") != [
        _entry(data.conversation(s)) for s in held
    ]:
        raise ValueError(
            f"resume: {entry.get('name')} was built on other conversations "
            "(or the data changed)"
        )


def _manifest(
    job: TrainScorerJob,
    conversations: list[Any],
    folds: list[dict[str, Any]],
    embedder: Any,
    cache_path: str,
) -> dict[str, Any]:
    from earm_jax.store.embeddings import model_identity

    base = job.base_model or str(default_base_model())
    return {
        "format": MANIFEST_FORMAT,
        "kind": "cross-encoder",
        "base_model": {"path": base, "identity": model_identity(base)},
        "embedding_model": embedder.identity,
        "data": {"path": job.data, "files": file_digests(job.data)},
        "memories": list(job.settings),
        "conversations": [_entry(c) for c in conversations],
        "folds": list(folds),
        "job": job.to_json(),
        "score_cache": cache_path,
        "profiles": {},
    }


def run_train_scorer(
    job: TrainScorerJob, progress: Progress | None = None
) -> dict[str, Any]:
    """Trains, calibrates, writes and (with folds) evaluates; returns the manifest.

    Raises:
      ValueError: a bad field of ``job``, an unknown conversation, more folds
        than conversations, or no question with a relevant memory.
    """
    from earm_jax.jobs.metadata import provenance, write_json
    from earm_jax.scoring.cache import CachedScorer, ScoreCache
    from earm_jax.store.embeddings import Embedder, default_cache_dir, model_identity

    job.validate()
    progress = progress or Progress(enabled=False)
    started = time.perf_counter()
    conversations = select_conversations(
        load_locomo(job.data), job.conversations, job.limit
    )
    if job.folds > len(conversations):
        raise ValueError(
            f"folds ({job.folds}) must not exceed the conversations "
            f"({len(conversations)})"
        )
    embedder = Embedder(job.embedding_model, cache_dir=job.cache_dir)
    progress.note(
        f"pools of {len(conversations)} conversation(s) by {embedder.identity}"
    )
    data = PoolData(
        conversations,
        {
            setting: build_streams(
                conversations, embedder, setting=setting, pool_size=job.pool_size
            )
            for setting in job.settings
        },
    )
    Path(job.out).mkdir(parents=True, exist_ok=True)
    finished = (
        {fold["name"]: fold for fold in job.stopped_manifest()["folds"]}
        if job.resume
        else {}
    )
    everyone = [c.sample_id for c in conversations]
    held_groups = assign_folds(conversations, job.folds) if job.folds > 1 else [[]]
    cache_path = job.score_cache or str(default_cache_dir() / SCORE_CACHE_NAME)
    held_back_answers = FoldAnswers({s: {} for s in job.settings})
    held_out_answers = FoldAnswers({s: {} for s in job.settings})
    folds = []
    for index, held in enumerate(held_groups):
        fold_started = time.perf_counter()
        name = f"fold-{index}"
        training_ids = [s for s in everyone if s not in held]
        record = Path(job.out) / FOLD_RECORD.format(name=name)
        kept = finished.get(name)
        if kept is None and job.resume and record.is_file():
            kept = json.loads(record.read_text())
        if kept is not None:
            folder = Path(job.out) / kept["folder"]
            entry = dict(kept)
            _check_kept_fold(entry, folder, training_ids, held, data)
            held_back = _held_back(job, data, training_ids)
            progress.note(f"{name}: kept from the stopped build")
        else:
            folder, entry, held_back = _train_fold(
                job, data, name, training_ids, embedder.identity, progress
            )
            entry["model_identity"] = model_identity(folder)
            entry["held_out"] = [_entry(data.conversation(s)) for s in held]
            write_json(record, entry)
        scorer = model_scorer(folder, job.scoring, embedder, job.cache_dir)
        # A fold the stopped build finished already measured its held-back
        # questions; they matter again only for a one-fold profile.
        if name not in finished or job.folds == 1:
            progress.note(
                f"{name}: scoring the held-back questions' pools with "
                f"{scoring_label(job.scoring)}"
            )
            fold_back = FoldAnswers({s: {} for s in job.settings})
            for setting in job.settings:
                for sample in training_ids:
                    answers = score_pools(
                        scorer, data.stream(setting, sample), held_back[sample]
                    )
                    fold_back.by_setting[setting][sample] = answers
                    held_back_answers.by_setting[setting][sample] = answers
            entry["held_back_quality"] = {
                setting: fold_back.quality(data, setting) for setting in job.settings
            }
        if held:
            cached = CachedScorer(scorer, ScoreCache(cache_path))
            fold_out = FoldAnswers({s: {} for s in job.settings})
            try:
                for setting in job.settings:
                    progress.phase(f"{name} scoring {setting}", len(held))
                    for sample in held:
                        stream = data.stream(setting, sample)
                        before = dataclasses.replace(cached.counters)
                        begin = time.perf_counter()
                        answers, failures = scorer_scores(stream, cached)
                        if failures:
                            entry.setdefault("failed_pairs", {})[sample] = failures
                        fold_out.by_setting[setting][sample] = answers
                        held_out_answers.by_setting[setting][sample] = answers
                        progress.step(
                            _scored(
                                f"conversation {sample} ({setting})",
                                int(stream.arrays.valid.sum()),
                                cached.counters.hits - before.hits,
                                cached.counters.misses - before.misses,
                                time.perf_counter() - begin,
                                job.scoring,
                            )
                        )
            finally:
                cached.cache.close()
            entry["held_out_quality"] = {
                setting: fold_out.quality(data, setting) for setting in job.settings
            }
        scorer.close()
        if kept is None:
            entry["seconds"] = round(time.perf_counter() - fold_started, 1)
            report, calibration = entry["training"], entry["calibration"]
            calibrated = (
                "not calibrated (no relevant pair among the held-back questions)"
                if calibration is None
                else f"calibrated as sigmoid({calibration['scale']:.3f} x logit "
                f"{calibration['shift']:+.3f})"
            )
            progress.note(
                f"{name} done in {duration(entry['seconds'])}: loss "
                f"{report['first_loss']:.3f} -> {report['last_loss']:.3f}, "
                f"{calibrated}"
            )
        folds.append(entry)
        # A build stopped later keeps its finished folds usable: their
        # held-out conversations can be evaluated, the rest are refused.
        partial = _manifest(job, conversations, folds, embedder, cache_path)
        partial["complete"] = False
        write_json(Path(job.out) / MANIFEST_NAME, partial)
    manifest = _manifest(job, conversations, folds, embedder, cache_path)
    manifest["complete"] = True
    for setting in job.settings:
        if job.folds > 1:
            manifest.setdefault("cross_fitted_quality", {})[setting] = (
                held_out_answers.quality(data, setting)
            )
            answers, source = held_out_answers, CROSS_FITTED
        else:
            answers, source = held_back_answers, HELD_BACK
        try:
            profile = answers.profile(data, setting, {"measured_on": source})
        except ValueError as error:  # too few pairs of a class to measure
            manifest.setdefault("profile_errors", {})[setting] = str(error)
            continue
        name = f"profile-{setting}.json"
        write_json(Path(job.out) / name, profile)
        manifest["profiles"][setting] = name
    manifest["seconds"] = round(time.perf_counter() - started, 1)
    manifest.update(provenance())
    write_json(Path(job.out) / MANIFEST_NAME, manifest)
    if job.folds > 1:
        manifest["recorded_answers"] = _record(job, cache_path, progress)
        write_json(Path(job.out) / MANIFEST_NAME, manifest)
    return manifest


def _record(job: TrainScorerJob, cache_path: str, progress: Progress) -> dict:
    """Writes ``<setting>-scores.npz`` (the cross-fitted answers, replayable
    with no model) per memory setting; returns setting -> file name."""
    from earm_jax.jobs.record_answers import RecordJob, record_answers

    names = {}
    for setting in job.settings:
        recorded, missing = record_answers(
            RecordJob(
                scorer_folder=job.out,
                data=job.data,
                setting=setting,
                score_cache=cache_path,
                cache_dir=job.cache_dir,
            )
        )
        name = RECORDED_NAME.format(setting=setting)
        recorded.save(Path(job.out) / name)
        names[setting] = name
        progress.note(
            f"recorded answers ({setting}): {name}, "
            f"{sum(missing.values())} pair(s) not scored"
        )
    return names


__all__ = [
    "FOLD_RECORD",
    "file_digests",
    "held_back_questions",
    "run_train_scorer",
]
