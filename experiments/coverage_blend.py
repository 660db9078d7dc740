"""Whether the similarity blend gains from word coverage, on one build's own
models: each fold's blend fitted with and without the question's word coverage
(:mod:`earm_jax.scoring.word_coverage`) on the fold's held-back questions, then
judged on the conversations that fold never saw (the build's recorded answers).

For each fold of ``--build`` (a folder ``earm train-scorer --folds K`` wrote):

1. the fold's model alone (calibrated, no blend) scores the whole pools of its
   held-back questions (the seeded tenth of each training conversation's
   questions it never trained on; the score cache keeps the answers);
2. three logistic blends are fitted on those pairs, as ``earm train-scorer``
   fits its own: the model's logit and the cosine (the blend before word
   coverage), the same plus word coverage (the blend now), and the cosine
   plus word coverage with no model (what a retriever gets for free);
3. each blend ranks the pools of the conversations the fold held out, from
   the model's logits in ``--scores`` (the build's recorded answers).

Per question, Recall@10 of each ranking and of Semantic; the differences with
paired bootstrap 95% CIs; AUC. ``--write FILE`` also writes the recorded
answers with the coverage blends (refitted only when the file's blends lack
coverage) and each fold's free order (the cosine + coverage blend, for
``earm locomo --pool-order free``); the logits are unchanged and the profile
is measured again when the blends change. Writes a JSON with the command,
commit, date and machine.

    python experiments/coverage_blend.py --data ../shared/data/locomo \\
        --build scorers/turns-cv3-bf16 \\
        --scores experiments/scores/turns-500steps-bf16-scores.npz \\
        --out experiments/results/coverage_blend_turns.json \\
        --write experiments/scores/turns-500steps-bf16-coverage-scores.npz
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

K = 10
BLENDS = {
    "model_cosine": ("logit", "cosine"),
    "model_cosine_coverage": ("logit", "cosine", "coverage"),
    "cosine_coverage": ("cosine", "coverage"),
}


def held_back_pairs(
    folder: Path, entry: dict[str, Any], streams: dict[str, Any], job: dict[str, Any]
) -> dict[str, np.ndarray]:
    """The fold's held-back pools: features and labels of every valid pair."""
    from earm_jax.jobs.fold_answers import score_pools
    from earm_jax.jobs.train_scorer import held_back_questions
    from earm_jax.scoring.cache import CachedScorer, ScoreCache
    from earm_jax.scoring.cross_encoder import CrossEncoderScorer, CrossEncoderSettings
    from earm_jax.scoring.similarity_blend import answer_logits
    from earm_jax.scoring.word_coverage import pool_word_coverage
    from earm_jax.store.embeddings import default_cache_dir

    training_ids = [item["id"] for item in entry["trained_on"]]
    back = held_back_questions(
        {s: len(streams[s].meta.query_texts) for s in training_ids},
        job["validation_fraction"],
        job["training"]["seed"],
    )
    counts = {s: int(v.sum()) for s, v in back.items()}
    if counts != entry["held_back_questions"]:
        raise ValueError(
            f"{entry['name']}: the held-back draw {counts} is not the build's "
            f"{entry['held_back_questions']} (another seed or data?)"
        )
    scorer = CrossEncoderScorer(folder, CrossEncoderSettings.from_json(job["scoring"]))
    cache = ScoreCache(default_cache_dir() / "scores.sqlite")
    parts: dict[str, list[np.ndarray]] = {
        "logit": [],
        "cosine": [],
        "coverage": [],
        "label": [],
    }
    try:
        for sample in training_ids:
            stream = streams[sample]
            arrays = stream.arrays
            answers = score_pools(CachedScorer(scorer, cache), stream, back[sample])
            chosen = np.isfinite(answers) & arrays.valid
            coverage = pool_word_coverage(
                stream.meta.query_texts,
                stream.meta.memory_texts,
                arrays.candidates,
                chosen,
            )
            parts["logit"].append(answer_logits(answers[chosen]))
            parts["cosine"].append(arrays.similarity[chosen].astype(np.float64))
            parts["coverage"].append(coverage[chosen])
            parts["label"].append(arrays.relevant[chosen])
    finally:
        cache.close()
        scorer.close()
    return {name: np.concatenate(values) for name, values in parts.items()}


def fitted(pairs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Each blend's weights (last: the intercept), fitted as the build fits."""
    from earm_jax.scoring.platt import fit_logistic

    return {
        name: fit_logistic(
            np.stack([pairs[f] for f in features], axis=1), pairs["label"]
        )
        for name, features in BLENDS.items()
    }


def held_out_recall(
    stream: Any, logits: np.ndarray, weights: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Per labelled question, Recall@10 of each blend's ranking and of
    Semantic, and the pairs' blended logits (for the AUC)."""
    from earm_jax.eval.scorer_quality import recall_at
    from earm_jax.scoring.word_coverage import pool_word_coverage

    arrays = stream.arrays
    features = {
        "logit": np.nan_to_num(np.asarray(logits, np.float64), nan=-30.0),
        "cosine": np.where(arrays.valid, arrays.similarity, 0.0).astype(np.float64),
        "coverage": pool_word_coverage(
            stream.meta.query_texts,
            stream.meta.memory_texts,
            arrays.candidates,
            arrays.valid,
        ),
    }
    labelled = arrays.num_relevant > 0
    args = (arrays.relevant, arrays.valid, arrays.num_relevant, K)
    out: dict[str, np.ndarray] = {
        "semantic": recall_at(arrays.similarity, *args)[labelled]
    }
    for name, features_of in BLENDS.items():
        w = weights[name]
        z = sum(w[i] * features[f] for i, f in enumerate(features_of)) + w[-1]
        z = np.where(arrays.valid, z, -np.inf)
        out[name] = recall_at(z, *args)[labelled]
        out[f"{name}_pairs"] = z[arrays.valid]
    out["semantic_pairs"] = arrays.similarity[arrays.valid].astype(np.float64)
    out["labels"] = arrays.relevant[arrays.valid]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", default=os.environ.get("EARM_LOCOMO_DATA"))
    parser.add_argument("--build", required=True)
    parser.add_argument("--scores", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--write", default=None)
    parser.add_argument("--cache-dir", default=None)
    args = parser.parse_args(argv)
    if not args.data:
        parser.error("--data (or $EARM_LOCOMO_DATA) is required")

    from earm_jax.eval.scorer_quality import auc
    from earm_jax.eval.stats import contrast_ci
    from earm_jax.jobs.locomo_recorded import replayed_streams
    from earm_jax.jobs.metadata import provenance, write_json
    from earm_jax.jobs.record_answers import refit_profile, without_machine_paths
    from earm_jax.scoring.recorded_answers import RecordedAnswers, answer_logits
    from earm_jax.scoring.similarity_blend import SimilarityBlend

    build = Path(args.build)
    manifest = json.loads((build / "manifest.json").read_text())
    job = manifest["job"]
    recorded = RecordedAnswers.load(args.scores)
    replayed = replayed_streams(recorded, args.data, args.cache_dir, blend_weight=0.0)
    streams = {stream.meta.sample_id: stream for stream, _ in replayed}
    if len(job["settings"]) != 1 or job["settings"][0] != recorded.setting:
        parser.error(
            f"the build trained on {job['settings']}; the answers are "
            f"{recorded.setting}: give the build the answers were recorded from"
        )
    folds: dict[str, Any] = {}
    weights: dict[str, dict[str, np.ndarray]] = {}
    held_back: dict[str, dict[str, np.ndarray]] = {}
    for entry in manifest["folds"]:
        name = entry["name"]
        if recorded.scorer["models"].get(name) is None:
            parser.error(f"{args.scores} holds no answers of {name}")
        pairs = held_back_pairs(build / entry["folder"], entry, streams, job)
        held_back[name] = pairs
        weights[name] = fitted(pairs)
        folds[name] = {
            "held_back_pairs": int(pairs["label"].size),
            "trained_on": [item["id"] for item in entry["trained_on"]],
            "blends": {
                blend: dict(zip((*BLENDS[blend], "shift"), w.tolist(), strict=True))
                for blend, w in weights[name].items()
            },
            "build_blend": entry.get("similarity_blend"),
        }
    per_conversation: dict[str, Any] = {}
    gathered: dict[str, list[np.ndarray]] = {}
    for stream, replay in replayed:
        sample = stream.meta.sample_id
        fold = recorded.conversations[sample].fold
        logits = answer_logits(replay.arrays.scores.astype(np.float64))
        logits = np.where(stream.arrays.valid, logits, np.nan)
        recall = held_out_recall(stream, logits, weights[fold])
        per_conversation[sample] = {
            "fold": fold,
            "questions": int(recall["semantic"].size),
            **{name: float(recall[name].mean()) for name in ("semantic", *BLENDS)},
        }
        for name, values in recall.items():
            gathered.setdefault(name, []).append(values)
    joined = {name: np.concatenate(values) for name, values in gathered.items()}

    def difference(treatment: str, baseline: str) -> dict[str, float]:
        ci = contrast_ci(joined[treatment], joined[baseline], seed=0)
        return {"estimate": ci.estimate, "low": ci.low, "high": ci.high}

    rankings = [
        {
            "ranking": "semantic",
            "recall": float(joined["semantic"].mean()),
            "auc": auc(joined["semantic_pairs"], joined["labels"]),
        }
    ]
    for name in BLENDS:
        rankings.append(
            {
                "ranking": name,
                "recall": float(joined[name].mean()),
                "auc": auc(joined[f"{name}_pairs"], joined["labels"]),
                "minus_semantic": difference(name, "semantic"),
                "minus_model_cosine": difference(name, "model_cosine"),
                "minus_cosine_coverage": difference(name, "cosine_coverage"),
            }
        )
    overall = {"questions": int(joined["semantic"].size), "rankings": rankings}
    result = {
        "setting": recorded.setting,
        "scores": Path(args.scores).name,
        "build": {
            "command": without_machine_paths(manifest.get("command")),
            "precision": job["training"].get("precision"),
            "word_coverage": job.get("word_coverage", False),
        },
        "folds": folds,
        "conversations": per_conversation,
        "overall": overall,
        **provenance("python", ["experiments/coverage_blend.py", *sys.argv[1:]]),
    }
    write_json(Path(args.out), result)
    for row in rankings:
        gain = row.get("minus_semantic", {}).get("estimate", 0.0)
        print(f"{row['ranking']:24s} Recall@10 {row['recall']:.3f} ({gain:+.3f})")
    if args.write:
        # The build's own fit, as `earm train-scorer` makes it now: a blend
        # with word coverage (kept when the file's already weighs it) and
        # the free order next to it.
        embedding_model = recorded.scorer["embedding_model"]
        refit = not all(
            blend is not None and blend.uses_coverage
            for blend in recorded.blends.values()
        )
        blends = {
            name: SimilarityBlend.fit(
                pairs["logit"],
                pairs["cosine"],
                pairs["label"],
                embedding_model,
                pairs["coverage"],
            )
            if refit
            else recorded.blends[name]
            for name, pairs in held_back.items()
        }
        free_orders = {
            name: SimilarityBlend.fit(
                None,
                pairs["cosine"],
                pairs["label"],
                embedding_model,
                pairs["coverage"],
            )
            for name, pairs in held_back.items()
        }
        with tempfile.TemporaryDirectory() as scratch:
            staged = Path(scratch) / "staged-scores.npz"
            refitted = {
                **recorded.manifest,
                "similarity_blends_refitted": {
                    "word_coverage": True,
                    "blends_refitted": refit,
                    "free_orders": True,
                    "fitted_on": "each fold's held-back questions",
                    "command": result["command"],
                    "note": (
                        "the blends were fitted again with word coverage "
                        "(when they had none) and each fold's free order next to "
                        "them; cross_fitted_quality is the build's own, before"
                    ),
                },
            }
            updated = dataclasses.replace(
                recorded, blends=blends, free_orders=free_orders, manifest=refitted
            )
            if refit:  # the profile is of the blended answers: measured again
                updated.save(staged)
                updated = refit_profile(str(staged), args.data, args.cache_dir)
            updated.save(args.write)
        print(f"wrote {args.write}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
